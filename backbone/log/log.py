"""A partition's log: segments in offset order, with appends, reads, retention, truncation and recovery.

Layout of a partition directory `<topic>-<partition>`:
    00000000000000000000.log        batches back to back (record batch v2, as received)
    00000000000000000000.index      sparse offset index   (see backbone.log.index)
    00000000000000000000.timeindex  sparse time index
    leader-epoch-checkpoint         leader epoch cache (backbone.log.epoch_cache)
    recovery-point-offset-checkpoint  offset below which everything is fsynced
    log-start-offset-checkpoint     first offset a consumer may read (moved by retention and DeleteRecords)
    .clean_shutdown                 present only between a clean close and the next open

Kafka keeps the recovery point and log start offset checkpoints per log directory; this log keeps them per
partition directory (same text format, one entry), so a partition directory is self-contained and can be
opened on its own. Other files (such as a producer state snapshot) are left alone.

Thread safety: every public method takes the log's lock, so the broker may run `flush` or retention in a
worker thread while its event loop appends and reads; `flush` does its fsyncs outside the lock.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator
from pathlib import Path

from backbone.log.append import (
    AppendInfo,
    Records,
    UnexpectedAppendOffsetError,
    assign_offsets,
    prepare_follower_append,
    validate_producer_records,
)
from backbone.log.cleaner_files import lower_cleaner_checkpoint
from backbone.log.config import LogConfig
from backbone.log.epoch_cache import LeaderEpochCache
from backbone.log.files import (
    ReadResult,
    SegmentFile,
    fsync_dir,
    storage_errors,
    write_atomically,
    write_offset_checkpoint,
)
from backbone.log.index import DEFAULT_INDEX_CACHE, INT32_MAX, IndexCache
from backbone.log.reads import expired_segments, find_offset_for_timestamp, plan_read
from backbone.log.recovery import CLEAN_SHUTDOWN_FILE, LOG_START_FILE, RECOVERY_POINT_FILE, load_log
from backbone.log.segment import BatchMeta, Segment, SegmentDamagedError
from backbone.protocol.errors import KafkaStorageError, OffsetOutOfRangeError
from backbone.protocol.record_batch import BatchHeader

log = logging.getLogger(__name__)

_NOTHING_TO_READ = ReadResult(())


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def parse_partition_dir(name: str) -> tuple[str, int]:
    """(topic, partition) from a directory name `<topic>-<partition>`; ValueError when it is not one."""
    topic, sep, number = name.rpartition("-")
    if not sep or not topic or not number.isdigit():
        raise ValueError(f"{name!r} is not a partition directory name (<topic>-<partition>)")
    return topic, int(number)


class Log:
    """One partition's log. Open it with a directory named `<topic>-<partition>`; it recovers on open."""

    def __init__(
        self,
        directory: Path | str,
        config: LogConfig | None = None,
        *,
        clock: Callable[[], float] = time.time,
        index_cache: IndexCache = DEFAULT_INDEX_CACHE,
    ) -> None:
        self.directory = Path(directory)
        self.topic, self.partition = parse_partition_dir(self.directory.name)
        self.name = partition_dir_name(self.topic, self.partition)
        self._config = config or LogConfig()
        self._log_append_time = self._config.uses_log_append_time  # read on every append
        self._clock = clock
        self._cache = index_cache
        self._lock = threading.RLock()
        # Reentrant: close() holds it while it flushes. Taken before self._lock, never after.
        self._flush_lock = threading.RLock()
        self._closed = False
        self._offline: str | None = None
        started = time.monotonic()
        loaded = load_log(
            self.directory, self.topic, self.partition, self._config, index_cache, self._now_ms()
        )
        self._segments: list[Segment] = loaded.segments
        self._bases: list[int] = [segment.base_offset for segment in self._segments]
        self._log_start_offset = loaded.log_start_offset
        self._log_end_offset = loaded.log_end_offset
        self._recovery_point = loaded.recovery_point
        self._high_watermark = loaded.log_start_offset
        self._epochs: LeaderEpochCache = loaded.epochs
        self.had_clean_shutdown = loaded.clean
        # Set when a segment file was created since the last flush (the directory must be fsynced too).
        self._dir_dirty = False
        self._log_start_dirty = loaded.log_start_changed
        self._last_flush_ms = self._now_ms()
        # The lowest offset truncated to while a flush was fsyncing (data above it was not part of the flush).
        self._lowest_truncation: int | None = None
        # Counts truncations, so the cleaner can tell that segments it read may have changed since.
        self._truncations = 0
        # The offset the cleaner must not compact beyond (the broker passes its high watermark); None: the
        # active segment's base offset, the only bound there is anyway.
        self.cleaner_upper_bound: Callable[[], int] | None = None
        if not loaded.clean and not loaded.fresh:
            self._write_recovery_point()  # recovery moved it to the log end
        self._persist_log_start()
        log.info(
            "event=log_opened dir=%s clean=%s segments=%d log_start_offset=%d log_end_offset=%d seconds=%.3f",
            self.directory,
            loaded.clean,
            len(self._segments),
            self._log_start_offset,
            self._log_end_offset,
            time.monotonic() - started,
        )

    # -- state -----------------------------------------------------------------------------------------

    @property
    def config(self) -> LogConfig:
        return self._config

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def recovery_point(self) -> int:
        """Every offset below this is fsynced (persisted in recovery-point-offset-checkpoint)."""
        return self._recovery_point

    @property
    def high_watermark(self) -> int:
        """Set by the broker (which owns it); always kept within [log_start_offset, log_end_offset]."""
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, offset: int) -> None:
        with self._lock:
            self._high_watermark = min(max(offset, self._log_start_offset), self._log_end_offset)

    @property
    def index_cache(self) -> IndexCache:
        return self._cache

    @property
    def leader_epoch_cache(self) -> LeaderEpochCache:
        return self._epochs

    @property
    def size_in_bytes(self) -> int:
        with self._lock:
            return sum(segment.size for segment in self._segments)

    def segment_base_offsets(self) -> list[int]:
        with self._lock:
            return list(self._bases)

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _check_writable(self) -> None:
        if self._closed:
            raise KafkaStorageError(f"log {self.name} is closed")
        if self._offline is not None:
            raise KafkaStorageError(f"log {self.name} is offline: {self._offline}")

    # -- appends ---------------------------------------------------------------------------------------

    def append(
        self,
        records: Records,
        *,
        leader_epoch: int = 0,
        validated: list[tuple[int, BatchHeader]] | None = None,
    ) -> AppendInfo:
        """Validate a producer's record set, assign offsets from the log end, stamp the leader epoch, append.

        Raises, writing nothing: CorruptMessageError / UnsupportedVersionError / InvalidRecordError for a bad
        set, MessageTooLargeError for a batch over max.message.bytes, RecordListTooLargeError for a set over
        segment.bytes; KafkaStorageError (naming the file) when the disk refuses the write.
        `validated`: what validate_producer_records(records, log.config, log.name) returned, when the caller
        has already checked the set (the broker does, for idempotence), so it is not checked twice.
        """
        if validated is None:
            validated = validate_producer_records(records, self._config, self.name)
        batches = validated
        with self._lock:
            if self._closed or self._offline is not None:
                self._check_writable()
            now_ms = int(self._clock() * 1000)
            first = self._log_end_offset
            # A leader's epoch is new at most once per leader change; same epoch, nothing to record.
            if leader_epoch >= 0 and leader_epoch != self._epochs.latest_epoch:
                self._epochs.assign(leader_epoch, first)
            append_time = now_ms if self._log_append_time else None
            buffers, metas, info = assign_offsets(records, batches, first, leader_epoch, append_time)
            self._write(buffers, info.size, metas, now_ms)
            flush = self._log_end_offset - self._recovery_point >= self._config.flush_messages
        if flush:
            self.flush()
        return info

    def append_as_follower(
        self, records: Records, *, checked: list[tuple[int, BatchHeader]] | None = None
    ) -> AppendInfo:
        """Append a leader's batches as they are (offsets, epochs, timestamps kept).

        The first offset must be >= the log end offset (UnexpectedAppendOffsetError otherwise) and offsets
        must increase through the set (InvalidRecordError); gaps are allowed, as compacted logs have them.
        `checked`: what check_batches(records) returned, when the caller has already checked the set.
        """
        batches, (buffers, metas, info) = prepare_follower_append(records, checked)
        with self._lock:
            self._check_writable()
            if info.first_offset < self._log_end_offset:
                raise UnexpectedAppendOffsetError(
                    f"follower append at offset {info.first_offset} is below the log end offset "
                    f"{self._log_end_offset} of {self.name}"
                )
            for _, header in batches:
                epoch, latest = header.partition_leader_epoch, self._epochs.latest_epoch
                if epoch >= 0 and (latest is None or epoch > latest):
                    self._epochs.assign(epoch, header.base_offset)
            now_ms = self._now_ms()
            if info.last_offset - info.first_offset > INT32_MAX or info.size > self._config.segment_bytes:
                # Too wide for one segment: one write per batch, each of which may roll.
                view = memoryview(records)
                for (position, _), meta in zip(batches, metas, strict=True):
                    self._write([view[position : position + meta[0]]], meta[0], [meta], now_ms)
            else:
                self._write(buffers, info.size, metas, now_ms)
            flush = self._needs_count_flush()
        if flush:
            self.flush()
        return info

    def _write(
        self, buffers: list[bytes | bytearray | memoryview], size: int, metas: list[BatchMeta], now_ms: int
    ) -> None:
        first, last = metas[0][1], metas[-1][2]
        segment = self._segments[-1]
        max_timestamp = metas[0][3] if len(metas) == 1 else max(meta[3] for meta in metas)
        reason = segment.roll_reason(size, last, max_timestamp, now_ms)
        if reason or (segment.size == 0 and segment.base_offset != first):
            segment = self._roll(first, reason or "rebase_empty_segment", now_ms)
        try:
            segment.append(buffers, size, metas)
        except SegmentDamagedError as exc:
            self._offline = str(exc)
            log.error("event=log_offline dir=%s reason=%r", self.directory, str(exc))
            raise
        self._log_end_offset = last + 1

    def _roll(self, base_offset: int, reason: str, now_ms: int) -> Segment:
        """Start a new active segment at `base_offset` (an empty active segment is replaced, not kept)."""
        old = self._segments[-1]
        new = Segment.create(self.directory, base_offset, now_ms, self._config, self._cache)
        if old.size == 0:
            old.delete()
            self._segments.pop()
            self._bases.pop()
            if not self._segments:  # the log held nothing: it now starts where its first batch does
                self._segments.append(new)
                self._bases.append(base_offset)
                self._advance_log_start(base_offset)
                self._dir_dirty = True
                return new
        else:
            try:
                old.seal()
            except KafkaStorageError:
                new.delete()
                raise
        self._segments.append(new)
        self._bases.append(base_offset)
        self._dir_dirty = True
        log.info(
            "event=segment_rolled dir=%s base_offset=%d reason=%s segments=%d",
            self.directory,
            base_offset,
            reason,
            len(self._segments),
        )
        return new

    # -- reads -----------------------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None) -> ReadResult:
        """File regions of whole batches, starting with the batch that holds `offset`.

        At most `max_bytes`, except that the first batch is always returned whole (so a consumer always
        progresses). Batches whose last offset is >= `max_offset` (the broker passes the high watermark)
        are left out. A read continues into later segments, one region per segment, until `max_bytes` is
        used. Raises OffsetOutOfRangeError below the log start or above the log end offset; at the log end
        the result is empty.
        """
        # A reader caught up (most fetches of an idle partition) has nothing to read: answered without the
        # lock. The offsets are plain ints, so at worst they are a moment old, as if read a moment earlier.
        limit = self._log_end_offset if max_offset is None else min(max_offset, self._log_end_offset)
        if offset == limit and offset >= self._log_start_offset and not self._closed:
            return _NOTHING_TO_READ
        with self._lock:
            if self._closed:
                raise KafkaStorageError(f"log {self.name} is closed")
            if offset < self._log_start_offset or offset > self._log_end_offset:
                raise OffsetOutOfRangeError(
                    f"offset {offset} is outside [{self._log_start_offset}, {self._log_end_offset}] "
                    f"of {self.name}"
                )
            limit = self._log_end_offset if max_offset is None else min(max_offset, self._log_end_offset)
            if offset >= limit:
                return ReadResult(())
            regions = plan_read(self._segments, self._bases, offset, max_bytes, limit, self._log_end_offset)
            return ReadResult(regions)

    def iter_batch_headers(self, start_offset: int) -> Iterator[BatchHeader]:
        """Headers of the batches from the one holding `start_offset` to the log end (start clamped to the
        log start), reading 61 bytes a batch; for rebuilding state (producer ids) without the records.

        The lock is held while one segment's headers are read, not while the caller consumes them; batches
        appended meanwhile are included.
        """
        offset = start_offset
        while True:
            with self._lock:
                if self._closed:
                    raise KafkaStorageError(f"log {self.name} is closed")
                offset = max(offset, self._log_start_offset)
                if offset >= self._log_end_offset:
                    return
                i = max(0, bisect_right(self._bases, offset) - 1)
                segment = self._segments[i]
                found = segment.find_batch(offset)
                start = segment.size if found is None else found[0]
                headers = [header for _, header in segment.iter_headers(start, segment.size)]
                after = self._bases[i + 1] if i + 1 < len(self._bases) else self._log_end_offset
            yield from headers
            offset = max(after, headers[-1].next_offset) if headers else after

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first batch whose max timestamp is >= `timestamp`, or None.

        Batch granularity: the offset is the batch's base offset (or the log start offset inside it) and the
        timestamp its max timestamp; the broker does not look inside batches.
        """
        with self._lock:
            return find_offset_for_timestamp(self._segments, timestamp, self._log_start_offset)

    def max_timestamp_below(self, limit: int) -> tuple[int, int] | None:
        """(largest batch max timestamp, offset of the first batch carrying it) from the log start to below
        `limit` (ListOffsets MAX_TIMESTAMP under the high watermark), or None when there is no batch. Each
        segment reads only the headers after its last time-index entry below `limit`, not the whole log."""
        with self._lock:
            log_start = self._log_start_offset
            segments = self._segments
            best: tuple[int, int] | None = None
            for i, segment in enumerate(segments):
                if segment.base_offset >= limit:
                    break
                if i + 1 < len(segments) and segments[i + 1].base_offset <= log_start:
                    continue
                found = segment.max_timestamp_below(limit, log_start)
                if found is not None and (best is None or found[0] > best[0]):
                    best = found
            return best

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (largest epoch <= `epoch`, its end offset), or (-1, -1)."""
        with self._lock:
            return self._epochs.end_offset_for(epoch, self._log_end_offset)

    def assign_epoch(self, epoch: int, start_offset: int | None = None) -> None:
        """Record a new leader epoch starting at `start_offset` (default: the log end offset)."""
        with self._lock:
            self._check_writable()
            self._epochs.assign(epoch, self._log_end_offset if start_offset is None else start_offset)

    # -- durability ------------------------------------------------------------------------------------

    def flush(self, offset: int | None = None) -> None:
        """fsync everything below `offset` (default: the log end) and move the recovery point there.

        Index and checkpoint writes happen under the lock; the fsyncs themselves do not hold it, so appends
        and reads go on while a worker thread flushes.
        """
        with self._flush_lock:
            with self._lock:
                if self._closed:
                    raise KafkaStorageError(f"log {self.name} is closed")
                target = self._log_end_offset if offset is None else min(offset, self._log_end_offset)
                self._epochs.persist_if_dirty()
                self._persist_log_start()
                first = max(0, bisect_right(self._bases, self._recovery_point) - 1)
                last = bisect_left(self._bases, target)
                segments = self._segments[first:last] if target > self._recovery_point else []
                for segment in segments:
                    segment.write_indexes()
                syncers = [segment.syncer() for segment in segments]
                dir_dirty, self._dir_dirty = self._dir_dirty, False
                self._lowest_truncation = None
            try:
                for sync in syncers:
                    sync()
                if dir_dirty:
                    fsync_dir(self.directory)
            except KafkaStorageError:
                with self._lock:
                    self._dir_dirty = self._dir_dirty or dir_dirty
                raise
            with self._lock:
                if self._lowest_truncation is not None:
                    target = min(target, self._lowest_truncation)
                self._last_flush_ms = self._now_ms()
                if target > self._recovery_point:
                    self._recovery_point = target
                    self._write_recovery_point()

    def flush_if_needed(self, now_ms: int | None = None) -> bool:
        """The periodic flush: everything when flush.ms has passed, else segments rolled since the last flush.

        Kafka flushes a segment when it rolls; here the broker's scheduler does it through this method,
        off the append path. Returns whether it flushed.
        """
        with self._lock:
            if self._closed or self._offline is not None:
                return False
            now = self._now_ms() if now_ms is None else now_ms
            unflushed = self._log_end_offset > self._recovery_point
            due = unflushed and now - self._last_flush_ms >= self._config.flush_ms
            active_base = self._segments[-1].base_offset
        if due:
            self.flush()
            return True
        if active_base > self._recovery_point:
            self.flush(active_base)
            return True
        return False

    def _needs_count_flush(self) -> bool:
        return self._log_end_offset - self._recovery_point >= self._config.flush_messages

    def _write_recovery_point(self) -> None:
        write_offset_checkpoint(
            self.directory / RECOVERY_POINT_FILE, self.topic, self.partition, self._recovery_point
        )

    def _persist_log_start(self) -> None:
        if self._log_start_dirty:
            write_offset_checkpoint(
                self.directory / LOG_START_FILE, self.topic, self.partition, self._log_start_offset
            )
            self._log_start_dirty = False

    # -- retention and truncation ----------------------------------------------------------------------

    def delete_old_segments(self, now_ms: int | None = None) -> int:
        """Retention: delete the closed segments `expired_segments` picks (below the log start offset, past
        retention.ms or retention.bytes); return how many. Never the active segment."""
        with self._lock:
            if self._closed or self._offline is not None:
                return 0
            now = self._now_ms() if now_ms is None else now_ms
            expired = expired_segments(self._segments, self._log_start_offset, self._config, now)
            for segment, reason in expired:
                log.info(
                    "event=segment_expired dir=%s base_offset=%d size=%d reason=%s",
                    self.directory,
                    segment.base_offset,
                    segment.size,
                    reason,
                )
            if expired:
                self._delete_first_segments(len(expired))
            return len(expired)

    def _delete_first_segments(self, count: int) -> None:
        try:
            for _ in range(count):
                segment = self._segments.pop(0)
                self._bases.pop(0)
                segment.delete()
        finally:
            self._advance_log_start(self._bases[0])

    def _advance_log_start(self, offset: int) -> None:
        if offset <= self._log_start_offset:
            return
        self._log_start_offset = offset
        self._high_watermark = max(self._high_watermark, offset)
        self._log_start_dirty = True
        try:
            self._epochs.truncate_from_start(offset)
            self._persist_log_start()
        except KafkaStorageError as exc:
            # Retention must go on freeing space on a full disk; the checkpoints stay dirty and are written
            # by the next flush or close.
            log.error(
                "event=checkpoint_write_failed dir=%s error=%r action=retry_on_flush",
                self.directory,
                str(exc),
            )

    def increment_log_start_offset(self, offset: int) -> bool:
        """Move the log start offset up (DeleteRecords); it may not pass the high watermark.

        Segments wholly below the new start are deleted at once. Returns whether the start moved.
        """
        with self._lock:
            self._check_writable()
            if offset > self._high_watermark:
                raise OffsetOutOfRangeError(
                    f"cannot move the log start offset of {self.name} to {offset}: "
                    f"above the high watermark {self._high_watermark}"
                )
            if offset <= self._log_start_offset:
                return False
            self._log_start_offset = offset
            self._log_start_dirty = True
            self._epochs.truncate_from_start(offset)
            self._persist_log_start()
            below = bisect_right(self._bases, offset) - 1
            if below > 0:
                self._delete_first_segments(below)
            log.info("event=log_start_offset_moved dir=%s log_start_offset=%d", self.directory, offset)
            return True

    def truncate_to(self, offset: int) -> bool:
        """Remove every batch at and above `offset` (a follower diverged from its leader); durable on return.

        The batch holding `offset` goes entirely, so truncate at batch boundaries. Below the log start
        offset this is truncate_fully_and_start_at(offset). Returns whether anything was removed.
        """
        with self._lock:
            self._check_writable()
            if offset < 0:
                raise ValueError(f"cannot truncate {self.name} to a negative offset {offset}")
            if offset >= self._log_end_offset:
                return False
            if offset < self._log_start_offset:
                self._truncate_fully(offset)
                return True
            i = bisect_right(self._bases, offset) - 1
            for segment in reversed(self._segments[i + 1 :]):
                segment.delete()
            del self._segments[i + 1 :]
            del self._bases[i + 1 :]
            segment = self._segments[i]
            was_active, segment.active = segment.active, True
            self._cache.forget(segment)
            cut = segment.truncate_to(offset)
            if cut is None and not was_active and not segment.load_tail():
                raise KafkaStorageError(
                    f"{segment.log_path}: batches do not chain; reopen the log to recover"
                )
            new_end = offset if cut is None else min(offset, cut)
            segment.write_indexes()
            segment.syncer()()
            fsync_dir(self.directory)
            self._after_truncation(new_end)
            log.info("event=log_truncated dir=%s log_end_offset=%d", self.directory, new_end)
            return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop everything and restart the log empty at `offset` (a follower far behind its leader)."""
        with self._lock:
            self._check_writable()
            self._truncate_fully(offset)

    def _truncate_fully(self, offset: int) -> None:
        for segment in self._segments:
            segment.delete()
        self._segments, self._bases = [], []
        try:
            self._segments.append(
                Segment.create(self.directory, offset, self._now_ms(), self._config, self._cache)
            )
        except KafkaStorageError as exc:
            self._offline = f"no segment could be created after a full truncation: {exc}"
            raise
        self._bases.append(offset)
        self._log_start_offset = offset
        self._log_start_dirty = True
        self._epochs.clear()
        self._after_truncation(offset)
        fsync_dir(self.directory)
        # Nothing is below `offset` any more, so nothing is left to flush there.
        self._recovery_point = offset
        self._write_recovery_point()
        self._persist_log_start()
        log.info("event=log_truncated_fully dir=%s offset=%d", self.directory, offset)

    def _after_truncation(self, new_end: int) -> None:
        self._truncations += 1
        self._log_end_offset = new_end
        self._epochs.truncate_from_end(new_end)
        self._high_watermark = min(max(self._high_watermark, self._log_start_offset), new_end)
        if self._lowest_truncation is None or new_end < self._lowest_truncation:
            self._lowest_truncation = new_end
        if self._recovery_point > new_end:
            self._recovery_point = new_end
            self._write_recovery_point()
        lower_cleaner_checkpoint(self.directory, self.topic, self.partition, new_end)

    # -- compaction (backbone.log.cleaner) --------------------------------------------------------------

    def segments_for_cleaning(self) -> tuple[list[tuple[Segment, SegmentFile]], int, int, int]:
        """The closed segments with their open files, the active segment's base offset, the log start
        offset, and a token `replace_segments` checks to see that no truncation happened since."""
        with self._lock:
            self._check_writable()
            closed = [(segment, segment.file) for segment in self._segments[:-1]]
            return closed, self._bases[-1], self._log_start_offset, self._truncations

    def segment_largest_timestamp(self, segment: Segment) -> int:
        """Segment.largest_timestamp under the lock (it may load the segment's time index)."""
        with self._lock:
            return segment.largest_timestamp()

    def replace_segments(
        self, old: list[Segment], new: Segment, token: int, swap_files: Callable[[], None]
    ) -> bool:
        """Put `new` in place of the consecutive closed segments `old`, running `swap_files` (which moves
        the files) under the lock. False, changing nothing, when the log changed since `token` was taken
        (a truncation, retention deleting one of `old`, a close). If `swap_files` fails the log goes
        offline: its files are mid-swap until recovery finishes the swap."""
        with self._lock:
            if self._closed or self._offline is not None or token != self._truncations:
                return False
            first = next((i for i, segment in enumerate(self._segments) if segment is old[0]), None)
            end = len(old) if first is None else first + len(old)
            if (
                first is None
                or end >= len(self._segments)
                or any(a is not b for a, b in zip(self._segments[first:end], old, strict=True))
            ):
                return False
            try:
                swap_files()
            except KafkaStorageError as exc:
                self._offline = f"a compacted segment could not be swapped in: {exc}"
                log.error("event=log_offline dir=%s reason=%r", self.directory, self._offline)
                raise
            new.config = self._config
            self._segments[first:end] = [new]
            self._bases[first:end] = [new.base_offset]
            return True

    # -- configuration and lifecycle ------------------------------------------------------------------

    def update_config(self, config: LogConfig) -> None:
        """Apply a changed config: rolling, indexing and flushing follow it from the next append on,
        retention from its next run."""
        with self._lock:
            self._config = config
            self._log_append_time = config.uses_log_append_time
            for segment in self._segments:
                segment.config = config

    def close(self) -> None:
        """Flush everything, write the checkpoints and the `.clean_shutdown` marker, release the files.

        Regions handed out earlier stay readable until they are dropped.
        """
        with self._flush_lock, self._lock:
            if self._closed:
                return
            try:
                if self._offline is None:
                    self.flush()
                    self._epochs.persist()
                    self._log_start_dirty = True
                    self._persist_log_start()
                    write_atomically(self.directory / CLEAN_SHUTDOWN_FILE, b"")
            finally:
                for segment in self._segments:
                    segment.close()
                self._closed = True
            log.info("event=log_closed dir=%s log_end_offset=%d", self.directory, self._log_end_offset)

    def delete(self) -> None:
        """Close without flushing and remove the partition directory (regions handed out stay readable)."""
        with self._lock:
            for segment in self._segments:
                segment.close()
            self._closed = True
            with storage_errors("delete", self.directory):
                shutil.rmtree(self.directory)
            log.info("event=log_deleted dir=%s", self.directory)
