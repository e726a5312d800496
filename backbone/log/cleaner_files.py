"""The files log compaction leaves in a partition directory, and finishing a swap a crash interrupted.

The cleaner writes a group's compacted segment as `<base>.log.cleaned` (with `.index.cleaned` and
`.timeindex.cleaned`), fsyncs it, writes `<base>.log.swap-end` (the offset where the replaced segments
end, which the new segment's last batch need not reach: its last records may all have gone), then renames
the index files and last the data file to `.swap`: the `.log.swap` rename is the commit point. It then
deletes the segments the new one replaces, renames the `.swap` files to the live names and removes the
`.swap-end` file. After a crash, recovery (`finish_interrupted_swaps`, run before the segments are listed)
rolls a committed swap forward and throws an uncommitted one away:
- `*.cleaned` files (and a `.swap-end` without its `.log.swap`) are removed: the old segments are intact;
- for each `<base>.log.swap`, the live segments with base offsets from `<base>` up to its `.swap-end`
  are removed, then it takes the live name; its indexes are rebuilt by the ordinary recovery, which finds
  them missing. (Without a readable `.swap-end`, Kafka's rule: up to the swap segment's own end.)

`cleaner-offset-checkpoint` holds the first dirty offset: below it the log has been cleaned.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path

from backbone.log.files import (
    SegmentFile,
    fsync_dir,
    read_offset_checkpoint,
    storage_errors,
    write_atomically,
)
from backbone.log.files import write_offset_checkpoint as _write_offset_checkpoint
from backbone.log.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, segment_name
from backbone.protocol.errors import CorruptMessageError, InvalidRecordError, UnsupportedVersionError
from backbone.protocol.record_batch import HEADER_SIZE, BatchHeader, check_batch, peek_size

log = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
SWAP_END_SUFFIX = LOG_SUFFIX + ".swap-end"
CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
_LOG_SWAP = re.compile(r"^(\d{20})\.log\.swap$")
_LIVE_LOG = re.compile(r"^(\d{20})\.log$")
# Segments are read this much at a time (a batch larger than this is read whole).
_READ_CHUNK = 4 * 1024 * 1024


def read_cleaner_checkpoint(directory: Path, topic: str, partition: int) -> int | None:
    """The first dirty offset; None when never cleaned or the file is unreadable (then all is dirty)."""
    try:
        return read_offset_checkpoint(directory / CLEANER_CHECKPOINT_FILE, topic, partition)
    except ValueError as exc:
        log.warning("event=checkpoint_invalid path=%s reason=%r action=clean_all", directory, str(exc))
        return None


def write_cleaner_checkpoint(directory: Path, topic: str, partition: int, offset: int) -> None:
    _write_offset_checkpoint(directory / CLEANER_CHECKPOINT_FILE, topic, partition, offset)


def lower_cleaner_checkpoint(directory: Path, topic: str, partition: int, offset: int) -> None:
    """After a truncation to `offset`: records appended there again are dirty, whatever was cleaned."""
    current = read_cleaner_checkpoint(directory, topic, partition)
    if current is not None and current > offset:
        write_cleaner_checkpoint(directory, topic, partition, offset)


def iter_file_batches(file: SegmentFile, size: int, base_offset: int) -> Iterator[tuple[BatchHeader, bytes]]:
    """(header, bytes) of each batch in the first `size` bytes of a segment file, each checked whole
    (size, magic, CRC, offsets increasing from `base_offset`); CorruptMessageError (or the error
    check_batch raises) where one is not valid."""
    expected = base_offset
    fd = file.fileno()
    buffer = b""
    buffer_start = 0
    position = 0
    while position < size:
        offset = position - buffer_start
        batch_size = peek_size(buffer, offset)
        if batch_size is None or offset + max(batch_size, HEADER_SIZE) > len(buffer):
            want = max(_READ_CHUNK, batch_size or 0)
            with storage_errors("read", file.path):
                buffer = os.pread(fd, min(want, size - position), position)
            buffer_start, offset = position, 0
            batch_size = peek_size(buffer, 0)
            if batch_size is None:
                raise CorruptMessageError(f"{file.path}: no whole batch at position {position}")
        header = check_batch(buffer, offset, min(len(buffer), offset + batch_size))
        if header.base_offset < expected:  # the CRC does not cover the base offset
            raise CorruptMessageError(
                f"{file.path}: batch at {position} goes back to offset {header.base_offset}"
            )
        expected = header.next_offset
        yield header, buffer[offset : offset + batch_size]
        position += batch_size


def finish_interrupted_swaps(directory: Path) -> None:
    """Roll committed swaps forward and remove uncommitted cleaner output (see the module docstring)."""
    with storage_errors("list", directory):
        names = os.listdir(directory)
    changed = False
    for name in names:
        if name.endswith(CLEANED_SUFFIX):
            log.warning("event=cleaner_leftover_removed path=%s", directory / name)
            _remove(directory / name)
            changed = True
    live = sorted(int(match[1]) for name in names if (match := _LIVE_LOG.match(name)))
    swaps = sorted(int(match[1]) for name in names if (match := _LOG_SWAP.match(name)))
    for base in swaps:
        end = max(_swap_end(directory, base), _recorded_swap_end(directory, base))
        replaced = [other for other in live if other == base or base < other < end]
        for other in replaced:
            for extension in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                _remove(directory / (segment_name(other) + extension))
        for extension in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            _remove(directory / (segment_name(base) + extension + SWAP_SUFFIX))
        swap = directory / (segment_name(base) + LOG_SUFFIX + SWAP_SUFFIX)
        with storage_errors("rename", swap):
            os.replace(swap, directory / (segment_name(base) + LOG_SUFFIX))
        log.warning(
            "event=interrupted_swap_completed dir=%s base_offset=%d replaced=%s", directory, base, replaced
        )
        changed = True
    for name in names:
        if name.endswith(SWAP_END_SUFFIX):
            _remove(directory / name)
        # Index swap files whose data file was already renamed (or never committed): indexes are rebuilt.
        if name.endswith(SWAP_SUFFIX) and not _LOG_SWAP.match(name) and (directory / name).exists():
            _remove(directory / name)
            changed = True
    if changed:
        fsync_dir(directory)


def write_swap_end(directory: Path, base: int, end: int) -> Path:
    """Record where the segments a swap at `base` replaces end (before the swap is committed)."""
    path = directory / (segment_name(base) + SWAP_END_SUFFIX)
    write_atomically(path, str(end).encode())
    return path


def _recorded_swap_end(directory: Path, base: int) -> int:
    path = directory / (segment_name(base) + SWAP_END_SUFFIX)
    try:
        return int(path.read_text(encoding="ascii"))
    except FileNotFoundError:
        return base
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        log.warning("event=swap_end_unreadable path=%s reason=%r", path, str(exc))
        return base


def _swap_end(directory: Path, base: int) -> int:
    """The offset after the last valid batch of a swap segment (its base when it holds none)."""
    path = directory / (segment_name(base) + LOG_SUFFIX + SWAP_SUFFIX)
    file = SegmentFile.open(path)
    try:
        with storage_errors("stat", path):
            size = os.fstat(file.fileno()).st_size
        end = base
        try:
            for header, _ in iter_file_batches(file, size, base):
                end = header.next_offset
        except (CorruptMessageError, UnsupportedVersionError, InvalidRecordError) as exc:
            # It was fsynced before the commit, so this should not happen; recovery cuts the bad tail.
            log.warning("event=swap_segment_invalid path=%s reason=%r", path, str(exc))
        return end
    finally:
        file.close()


def _remove(path: Path) -> None:
    with storage_errors("remove", path):
        path.unlink(missing_ok=True)
