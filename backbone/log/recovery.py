"""Opening a partition directory: find the segments, recover what a crash may have torn, read checkpoints.

After a clean shutdown (the `.clean_shutdown` marker is present) the data is trusted, but the indexes are
not: every index file must at least hold whole entries, is validated in full when first loaded, and the
active segment's tail is re-read from its last index entry. Without the marker, every segment from the one
holding the recovery point onwards is scanned batch by batch (size, magic, CRC, increasing offsets), cut at
the first bad byte, and its indexes are rebuilt; segments after a cut are deleted, as Kafka does. What was
recovered is then fsynced so the recovery point can move to the log end. Before any of this, a segment swap
of the log cleaner that a crash interrupted is finished or undone (`backbone.log.cleaner_files`).
"""

from __future__ import annotations

import logging
import os
import re
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from backbone.log.cleaner_files import finish_interrupted_swaps
from backbone.log.config import LogConfig
from backbone.log.epoch_cache import CHECKPOINT_NAME, LeaderEpochCache
from backbone.log.files import fsync_dir, read_offset_checkpoint, storage_errors
from backbone.log.index import IndexCache
from backbone.log.segment import Segment
from backbone.protocol.record_batch import BatchHeader

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".clean_shutdown"
RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_FILE = "log-start-offset-checkpoint"
_SEGMENT_FILE = re.compile(r"^(\d{20})\.(log|index|timeindex)$")


@dataclass
class LoadedLog:
    """Everything a Log needs from its directory."""

    segments: list[Segment]
    log_start_offset: int
    log_end_offset: int
    recovery_point: int
    epochs: LeaderEpochCache
    clean: bool
    # Whether the log start offset differs from its checkpoint (the log writes it).
    log_start_changed: bool
    # A directory created just now: nothing in it to recover or checkpoint yet.
    fresh: bool = False


def load_log(
    directory: Path, topic: str, partition: int, config: LogConfig, cache: IndexCache, now_ms: int
) -> LoadedLog:
    """Open and recover a partition directory.

    Recovery writes rebuilt index files and checkpoints, so it needs a little free space: on a full disk
    it raises KAFKA_STORAGE_ERROR naming the file it could not write, and changes no data.
    """
    segments: list[Segment] = []
    try:
        return _load(directory, topic, partition, config, cache, now_ms, segments)
    except BaseException:
        for segment in segments:  # release the files now, not when the traceback is collected
            segment.close()
        raise


def _load(
    directory: Path,
    topic: str,
    partition: int,
    config: LogConfig,
    cache: IndexCache,
    now_ms: int,
    segments: list[Segment],
) -> LoadedLog:
    if not directory.exists():
        return _create(directory, config, cache, now_ms, segments)
    _remove_temp_files(directory)
    finish_interrupted_swaps(directory)  # a crash during log compaction
    marker = directory / CLEAN_SHUTDOWN_FILE
    recovery_point = _read_offset(directory / RECOVERY_POINT_FILE, topic, partition)
    stored_start = _read_offset(directory / LOG_START_FILE, topic, partition)
    # A marker without a readable recovery point is not a clean shutdown we can trust.
    clean = marker.exists() and recovery_point is not None
    segments.extend(_discover(directory, config, cache))
    epochs, epochs_complete = LeaderEpochCache.load(directory / CHECKPOINT_NAME)
    on_batch = _epoch_collector(epochs)
    # Without a readable epoch checkpoint every batch header is read to rebuild it; otherwise only the
    # recovered batches are (they may carry epochs the checkpoint never saw).
    if clean:
        _load_after_clean_shutdown(segments)
        if not epochs_complete:
            _collect_epochs(segments, on_batch)
    else:
        _recover(directory, segments, recovery_point or 0, on_batch, collect_before=not epochs_complete)
    if not segments:
        segments.append(Segment.create(directory, stored_start or 0, now_ms, config, cache))
    log_start = max(stored_start or 0, segments[0].base_offset)
    log_end = segments[-1].next_offset
    if log_start > log_end:
        log.warning(
            "event=log_start_beyond_end dir=%s log_start_offset=%d log_end_offset=%d action=start_empty",
            directory,
            log_start,
            log_end,
        )
        for segment in segments:
            segment.delete()
        segments[:] = [Segment.create(directory, log_start, now_ms, config, cache)]
        log_end = log_start
    active = segments[-1]
    active.active = True
    cache.forget(active)
    epochs.truncate_from_end(log_end)
    epochs.truncate_from_start(log_start)
    if not epochs_complete:
        epochs.persist()
    epochs.persist_if_dirty()
    if marker.exists():
        # Removed (durably) before anything new is written, so a later crash is seen as one.
        with storage_errors("remove", marker):
            marker.unlink()
        fsync_dir(directory)
    return LoadedLog(
        segments=segments,
        log_start_offset=log_start,
        log_end_offset=log_end,
        recovery_point=min(recovery_point or 0, log_end) if clean else log_end,
        epochs=epochs,
        clean=clean,
        log_start_changed=log_start != stored_start,
    )


def _create(
    directory: Path, config: LogConfig, cache: IndexCache, now_ms: int, segments: list[Segment]
) -> LoadedLog:
    """A new, empty log. No checkpoint is written (nor fsynced): without them a later open recovers from
    offset 0, which for a log with nothing in it is exact, and the first flush writes them. Kafka's new
    logs write none either; this keeps creating a topic of many partitions cheap."""
    with storage_errors("create directory", directory):
        directory.mkdir(parents=True, exist_ok=True)
    segments.append(Segment.create(directory, 0, now_ms, config, cache))
    segments[0].active = True
    cache.forget(segments[0])
    epochs, _ = LeaderEpochCache.load(directory / CHECKPOINT_NAME)
    return LoadedLog(
        segments=segments,
        log_start_offset=0,
        log_end_offset=0,
        recovery_point=0,
        epochs=epochs,
        clean=False,
        log_start_changed=False,
        fresh=True,
    )


def _read_offset(path: Path, topic: str, partition: int) -> int | None:
    try:
        return read_offset_checkpoint(path, topic, partition)
    except ValueError as exc:
        log.warning("event=checkpoint_invalid path=%s reason=%r action=ignore", path, str(exc))
        return None


def _remove_temp_files(directory: Path) -> None:
    """Checkpoint temp files are left only by a crash mid-write; the real file is intact."""
    for path in directory.glob("*.tmp"):
        with storage_errors("remove", path):
            path.unlink(missing_ok=True)


def _discover(directory: Path, config: LogConfig, cache: IndexCache) -> list[Segment]:
    """The segments in the directory by base offset; index files without a data file are removed."""
    bases: set[int] = set()
    index_files: list[tuple[int, Path]] = []
    with storage_errors("list", directory):
        names = os.listdir(directory)
    for name in names:
        match = _SEGMENT_FILE.match(name)
        if match is None:
            continue
        if match[2] == "log":
            bases.add(int(match[1]))
        else:
            index_files.append((int(match[1]), directory / name))
    for base, path in index_files:
        if base not in bases:
            log.warning("event=orphan_index_removed path=%s", path)
            with storage_errors("remove", path):
                path.unlink(missing_ok=True)
    return [Segment.open_existing(directory, base, config, cache) for base in sorted(bases)]


def _load_after_clean_shutdown(segments: list[Segment]) -> None:
    for segment in segments[:-1]:
        _check_index_files(segment)
    if not segments:
        return
    last = segments[-1]
    last.active = True
    if not (last.offset_index.load(last.size) and last.time_index.load(last.size) and last.load_tail()):
        log.warning("event=segment_recovery path=%s reason=active_segment_inconsistent", last.log_path)
        last.recover(None)


def _check_index_files(segment: Segment) -> None:
    if not segment.indexes_look_sane():
        log.warning("event=index_rebuild path=%s reason=missing_or_partial_index_file", segment.log_path)
        segment.recover(None)


def _recover(
    directory: Path,
    segments: list[Segment],
    recovery_point: int,
    on_batch: Callable[[BatchHeader], None],
    *,
    collect_before: bool,
) -> None:
    """Scan every segment that may hold offsets at or after the recovery point; fsync what survives."""
    first = max(0, bisect_right([segment.base_offset for segment in segments], recovery_point) - 1)
    for segment in segments[:first]:
        _check_index_files(segment)
    if collect_before:
        _collect_epochs(segments[:first], on_batch)
    expected: int | None = None
    recovered: list[Segment] = []
    for i in range(first, len(segments)):
        segment = segments[i]
        log.info("event=segment_recovery path=%s recovery_point=%d", segment.log_path, recovery_point)
        removed = segment.recover(expected, on_batch)
        recovered.append(segment)
        expected = segment.next_offset
        if removed:
            for later in segments[i + 1 :]:
                log.warning("event=segment_deleted_after_truncation path=%s", later.log_path)
                later.delete()
            del segments[i + 1 :]
            break
    for segment in recovered:
        segment.sync()
    fsync_dir(directory)


def _epoch_collector(epochs: LeaderEpochCache) -> Callable[[BatchHeader], None]:
    """A batch callback that records each leader epoch newer than the cache's latest."""

    def on_batch(header: BatchHeader) -> None:
        epoch = header.partition_leader_epoch
        latest = epochs.latest_epoch
        if epoch >= 0 and (latest is None or epoch > latest):
            epochs.assign(epoch, header.base_offset, persist=False)

    return on_batch


def _collect_epochs(segments: list[Segment], on_batch: Callable[[BatchHeader], None]) -> None:
    for segment in segments:
        for _, header in segment.iter_headers(0, segment.size):
            on_batch(header)
