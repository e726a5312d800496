"""The log cleaner: compaction of logs whose cleanup.policy contains "compact", as Kafka's cleaner does it.

A log is cut in three at its first dirty offset (`cleaner-offset-checkpoint`) and its first uncleanable
offset (the lowest of: the active segment's base offset, the owner's bound `Log.cleaner_upper_bound` (the
broker passes its high watermark), and the first segment holding records younger than
min.compaction.lag.ms). Among the logs whose dirty part is at least min.cleanable.dirty.ratio of the
closed bytes (or whose oldest dirty segment is past max.compaction.lag.ms, or whose tombstones' delete
horizon has come), the dirtiest are cleaned first:

1. An offset map, key -> latest offset, is built over the dirty batches (a bounded number of keys; when it
   fills, this clean stops there and the next one goes on).
2. Every closed segment below the map's end is rewritten, neighbours grouped into one segment up to
   segment.bytes: a record stays only if it is the latest of its key (`backbone.log.compaction`). Batches
   emptied disappear, except the last batch of each producer id, kept empty so that idempotent producer
   state rebuilt from the log keeps its sequence (Kafka does the same).
3. Each group's new segment is written to `.cleaned` files, fsynced, committed by renaming to `.swap`,
   swapped in for the old segments under the log's lock and renamed to the live names
   (`backbone.log.cleaner_files` says how a crash at any point is recovered). Readers holding regions of
   the old segments keep reading them: their files stay open after they are unlinked.
4. The checkpoint moves to the map's end.

The work itself (reading, filtering, writing) runs without the log's lock; a truncation, retention or close
meanwhile makes the swap decline, and the clean is abandoned (its files removed).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from backbone.log.cleaner_files import (
    CLEANED_SUFFIX,
    SWAP_SUFFIX,
    iter_file_batches,
    read_cleaner_checkpoint,
    write_cleaner_checkpoint,
    write_swap_end,
)
from backbone.log.compaction import BatchFilter, filter_batch, record_keys
from backbone.log.files import SegmentFile, fsync_dir, storage_errors
from backbone.log.index import INT32_MAX
from backbone.log.log import Log
from backbone.log.segment import Segment
from backbone.protocol.errors import (
    CorruptMessageError,
    InvalidRecordError,
    KafkaError,
    UnsupportedVersionError,
)
from backbone.protocol.record_batch import NO_PRODUCER_ID, read_header

log = logging.getLogger(__name__)

# Kafka's log.cleaner.dedupe.buffer.size; here it bounds the keys of one offset map at about this many
# bytes of Python objects (a 16-byte digest, an int and a dict slot).
DEFAULT_DEDUPE_BUFFER_BYTES = 128 * 1024 * 1024
MAP_ENTRY_BYTES = 128
# Cleaned batches are written in runs of about this many bytes.
_WRITE_RUN_BYTES = 1024 * 1024


class CleaningAbortedError(Exception):
    """The cleaner is shutting down, or the log changed under a clean (nothing was swapped in since)."""


ClosedSegment = tuple[Segment, SegmentFile]


@dataclass
class CleanablePart:
    """One log's cleanable range and how dirty it is."""

    log: Log
    segments: list[ClosedSegment]
    active_base: int
    log_start: int
    first_dirty: int
    upper_bound: int
    dirty_ratio: float
    dirty_segments: list[ClosedSegment]
    token: int


@dataclass
class CleanResult:
    """What one clean did."""

    map_end: int
    records_mapped: int
    segments_replaced: int
    segments_written: int
    bytes_before: int
    bytes_after: int
    # The earliest delete horizon a kept tombstone waits for (None when no tombstone was kept).
    delete_horizon: int | None = None
    groups: list[list[int]] = field(default_factory=list)


class LogCleaner:
    """Cleans compacted logs; one clean at a time (the LogManager runs it from the broker's scheduler)."""

    def __init__(
        self,
        *,
        dedupe_buffer_bytes: int = DEFAULT_DEDUPE_BUFFER_BYTES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.max_map_keys = max(1, dedupe_buffer_bytes // MAP_ENTRY_BYTES)
        self._clock = clock
        self._stopping = threading.Event()
        self._running = threading.Lock()
        # Per log directory, the earliest delete horizon a kept tombstone waits for: when it has come, the
        # log is cleaned again even if nothing new is dirty, to drop the tombstone.
        self._horizons: dict[Path, int] = {}
        # Logs found holding a batch that does not decode: left alone until the broker restarts (recovery
        # deals with damaged data), rather than failing on every run.
        self._uncleanable: set[Path] = set()

    def shutdown(self) -> None:
        """Stop: a clean in progress is abandoned at its next batch; returns once it has."""
        self._stopping.set()
        with self._running:
            pass

    def clean_logs(self, logs: Iterable[Log], now_ms: int | None = None) -> int:
        """Clean every compacted log that needs it, dirtiest first; return how many were cleaned.

        A log whose files fail (storage errors, a corrupt batch) is logged and skipped; the others go on.
        """
        now = self._now_ms() if now_ms is None else now_ms
        candidates = []
        for partition_log in logs:
            if not partition_log.config.compacts or partition_log.directory in self._uncleanable:
                continue
            try:
                part = self.cleanable_part(partition_log, now)
            except KafkaError as exc:
                log.error("event=log_cleaning_failed dir=%s error=%r", partition_log.directory, str(exc))
                continue
            if part is not None and self._needs_cleaning(part, now):
                candidates.append(part)
        cleaned = 0
        for part in sorted(candidates, key=lambda p: p.dirty_ratio, reverse=True):
            if self._stopping.is_set():
                break
            try:
                if self._clean_part(part, now) is not None:
                    cleaned += 1
            except (CorruptMessageError, InvalidRecordError, UnsupportedVersionError) as exc:
                log.error(
                    "event=log_uncleanable dir=%s error=%r action=skip_until_restart",
                    part.log.directory,
                    str(exc),
                )
                self._uncleanable.add(part.log.directory)
            except KafkaError as exc:
                log.error("event=log_cleaning_failed dir=%s error=%r", part.log.directory, str(exc))
        return cleaned

    def clean(self, partition_log: Log, now_ms: int | None = None) -> CleanResult | None:
        """Clean one log now, whatever its dirty ratio; None when there is nothing to clean or the clean
        was abandoned. Storage errors and corrupt batches raise (KafkaError)."""
        now = self._now_ms() if now_ms is None else now_ms
        part = self.cleanable_part(partition_log, now)
        return None if part is None else self._clean_part(part, now)

    # -- choosing -------------------------------------------------------------------------------------

    def cleanable_part(self, partition_log: Log, now_ms: int) -> CleanablePart | None:
        """The log's dirty range and ratio (None when it has no closed segment)."""
        segments, active_base, log_start, token = partition_log.segments_for_cleaning()
        if not segments:
            return None
        upper = active_base
        if partition_log.cleaner_upper_bound is not None:
            upper = min(upper, partition_log.cleaner_upper_bound())
        directory, topic, partition = partition_log.directory, partition_log.topic, partition_log.partition
        checkpoint = read_cleaner_checkpoint(directory, topic, partition)
        # A checkpoint outside the log (below a moved log start, beyond the end) is not trusted.
        valid = checkpoint is not None and log_start <= checkpoint <= active_base
        first_dirty = checkpoint if valid and checkpoint is not None else log_start
        upper = max(first_dirty, upper)
        lag = partition_log.config.min_compaction_lag_ms
        ends = [segment.base_offset for segment, _ in segments[1:]] + [active_base]
        dirty: list[ClosedSegment] = []
        clean_bytes = dirty_bytes = 0
        for (segment, file), end in zip(segments, ends, strict=True):
            if end <= first_dirty:
                clean_bytes += segment.size
            elif segment.base_offset < upper:
                if lag > 0 and now_ms - partition_log.segment_largest_timestamp(segment) < lag:
                    upper = max(first_dirty, segment.base_offset)  # too young: stop before it
                    break
                dirty.append((segment, file))
                dirty_bytes += segment.size
        total = clean_bytes + dirty_bytes
        ratio = dirty_bytes / total if total else 0.0
        return CleanablePart(
            partition_log, segments, active_base, log_start, first_dirty, upper, ratio, dirty, token
        )

    def _needs_cleaning(self, part: CleanablePart, now_ms: int) -> bool:
        config = part.log.config
        if part.dirty_segments:
            if part.dirty_ratio >= config.min_cleanable_dirty_ratio:
                return True
            oldest = part.log.segment_largest_timestamp(part.dirty_segments[0][0])
            if now_ms - oldest > config.max_compaction_lag_ms:
                return True
        return self._horizon_due(part.log, now_ms)

    def _horizon_due(self, partition_log: Log, now_ms: int) -> bool:
        horizon = self._horizons.get(partition_log.directory)
        return horizon is not None and horizon <= now_ms

    # -- cleaning -------------------------------------------------------------------------------------

    def _clean_part(self, part: CleanablePart, now_ms: int) -> CleanResult | None:
        with self._running:
            if self._stopping.is_set():
                return None
            try:
                result = self._do_clean(part, now_ms)
            except CleaningAbortedError as exc:
                log.info("event=log_cleaning_abandoned dir=%s reason=%r", part.log.directory, str(exc))
                return None
        if result is None:
            return None
        directory = part.log.directory
        if result.delete_horizon is None:
            self._horizons.pop(directory, None)
        else:
            self._horizons[directory] = result.delete_horizon
        log.info(
            "event=log_cleaned dir=%s first_dirty=%d map_end=%d keys=%d segments_replaced=%d "
            "segments_written=%d bytes_before=%d bytes_after=%d",
            directory,
            part.first_dirty,
            result.map_end,
            result.records_mapped,
            result.segments_replaced,
            result.segments_written,
            result.bytes_before,
            result.bytes_after,
        )
        return result

    def _do_clean(self, part: CleanablePart, now_ms: int) -> CleanResult | None:
        partition_log = part.log
        offsets, map_end = self._build_offset_map(part)
        if map_end <= part.first_dirty and not self._horizon_due(partition_log, now_ms):
            return None  # the dirty part holds nothing below the upper bound yet
        last_of_producer = self._last_batch_of_each_producer(partition_log, part.log_start)
        rules = BatchFilter(
            lambda digest, offset: offsets.get(digest, -1) <= offset,
            now_ms,
            partition_log.config.delete_retention_ms,
        )
        result = CleanResult(map_end, len(offsets), 0, 0, 0, 0)
        below = [closed for closed in part.segments if closed[0].base_offset < map_end]
        limit = partition_log.config.segment_bytes
        for group, group_end in _group_segments(below, part.segments, part.active_base, limit):
            self._check_running()
            new, horizon = self._write_group(partition_log, group, rules, last_of_producer, now_ms)
            old = [segment for segment, _ in group]
            swap = functools.partial(_swap_files, new, old, group_end)
            if not partition_log.replace_segments(old, new, part.token, swap):
                new.delete()
                raise CleaningAbortedError("the log changed while it was being cleaned")
            result.segments_replaced += len(old)
            result.segments_written += 1
            result.bytes_before += sum(segment.size for segment in old)
            result.bytes_after += new.size
            result.groups.append([segment.base_offset for segment in old])
            if horizon is not None:
                result.delete_horizon = min(horizon, result.delete_horizon or horizon)
        write_cleaner_checkpoint(
            partition_log.directory, partition_log.topic, partition_log.partition, map_end
        )
        return result

    def _build_offset_map(self, part: CleanablePart) -> tuple[dict[bytes, int], int]:
        """key digest -> latest offset over the dirty batches below the upper bound, and where it ends."""
        offsets: dict[bytes, int] = {}
        for segment, file in part.dirty_segments:
            for header, batch in iter_file_batches(file, segment.size, segment.base_offset):
                self._check_running()
                if header.last_offset < part.first_dirty:
                    continue
                if header.last_offset >= part.upper_bound:
                    return offsets, header.base_offset
                offsets.update(record_keys(batch, header))
                if len(offsets) >= self.max_map_keys:
                    # Full: this clean covers the log up to here, the next one goes on from here.
                    return offsets, header.next_offset
        return offsets, part.upper_bound

    def _last_batch_of_each_producer(self, partition_log: Log, log_start: int) -> dict[int, int]:
        """producer id -> base offset of its last batch in the whole log (headers only)."""
        last: dict[int, int] = {}
        for header in partition_log.iter_batch_headers(log_start):
            if header.producer_id != NO_PRODUCER_ID:
                last[header.producer_id] = header.base_offset
        return last

    def _write_group(
        self,
        partition_log: Log,
        group: list[ClosedSegment],
        rules: BatchFilter,
        last_of_producer: dict[int, int],
        now_ms: int,
    ) -> tuple[Segment, int | None]:
        """The group's records, filtered, in one new segment under `.cleaned` names, fsynced."""
        base = group[0][0].base_offset
        directory, config, cache = partition_log.directory, partition_log.config, partition_log.index_cache
        new = Segment.create(directory, base, now_ms, config, cache, CLEANED_SUFFIX)
        horizon: int | None = None
        try:
            run: list[bytes] = []
            metas: list[tuple[int, int, int, int]] = []
            run_bytes = 0
            for segment, file in group:
                for header, batch in iter_file_batches(file, segment.size, segment.base_offset):
                    self._check_running()
                    keep_empty = last_of_producer.get(header.producer_id) == header.base_offset
                    kept, batch_horizon = filter_batch(batch, header, rules, keep_empty)
                    if batch_horizon is not None:
                        horizon = min(batch_horizon, horizon or batch_horizon)
                    if kept is None:
                        continue
                    max_timestamp = header.max_timestamp if kept is batch else read_header(kept).max_timestamp
                    run.append(kept)
                    metas.append((len(kept), header.base_offset, header.last_offset, max_timestamp))
                    run_bytes += len(kept)
                    if run_bytes >= _WRITE_RUN_BYTES:
                        new.append(run, run_bytes, metas)
                        run, metas, run_bytes = [], [], 0
            if metas:
                new.append(run, run_bytes, metas)
            new.seal()
            new.sync()
        except BaseException:
            new.delete()
            raise
        return new, horizon

    def _check_running(self) -> None:
        if self._stopping.is_set():
            raise CleaningAbortedError("the cleaner is shutting down")

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)


def _group_segments(
    below: list[ClosedSegment], all_closed: list[ClosedSegment], active_base: int, max_bytes: int
) -> list[tuple[list[ClosedSegment], int]]:
    """Neighbouring segments in groups whose total size fits `max_bytes` and whose offsets fit one
    segment's relative offsets (Kafka's groupSegmentsBySize), each with the offset where it ends (the
    next segment's base offset)."""
    following = [segment.base_offset for segment, _ in all_closed[1:]] + [active_base]
    ends = {id(segment): end for (segment, _), end in zip(all_closed, following, strict=True)}
    groups: list[tuple[list[ClosedSegment], int]] = []
    for closed in below:
        segment = closed[0]
        end = ends[id(segment)]
        if groups:
            group, _ = groups[-1]
            size = sum(member.size for member, _ in group)
            if size + segment.size <= max_bytes and end - 1 - group[0][0].base_offset <= INT32_MAX:
                group.append(closed)
                groups[-1] = (group, end)
                continue
        groups.append(([closed], end))
    return groups


def _swap_files(new: Segment, old: list[Segment], end: int) -> None:
    """Commit the cleaned segment (rename to `.swap`), remove the old ones, give it the live names."""
    directory = new.log_path.parent
    swap_end = write_swap_end(directory, new.base_offset, end)
    new.rename_files(SWAP_SUFFIX)
    fsync_dir(directory)
    for segment in old:
        segment.delete()
    new.rename_files("")
    with storage_errors("remove", swap_end):
        swap_end.unlink()
    fsync_dir(directory)
