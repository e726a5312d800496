"""One log segment: `<base offset>.log` (batches back to back) with its `.index` and `.timeindex`.

A segment never holds its data in memory. Appends are single `writev` calls; reads find positions through
the sparse offset index and a short forward scan of batch headers read with `pread`; recovery validates every
batch (size, magic, CRC, offsets) through a read-only memory map.
"""

from __future__ import annotations

import functools
import logging
import mmap
import os
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

from backbone.log.config import LogConfig
from backbone.log.files import SegmentFile, storage_error, storage_errors, write_all
from backbone.log.index import INT32_MAX, IndexCache, OffsetIndex, TimeIndex
from backbone.protocol.errors import (
    CorruptMessageError,
    InvalidRecordError,
    KafkaStorageError,
    UnsupportedVersionError,
)
from backbone.protocol.record_batch import HEADER_SIZE, MAGIC, BatchHeader, check_batch, read_header

log = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
# Header scans read this much at a time: one page holds several small batches' headers.
_SCAN_BLOCK = 4096

# (size, base offset, last offset, max timestamp) of one batch being appended.
BatchMeta = tuple[int, int, int, int]


class CorruptSegmentError(KafkaStorageError):
    """A segment's bytes do not form a chain of batches where they must (KAFKA_STORAGE_ERROR)."""


class SegmentDamagedError(KafkaStorageError):
    """A failed write could not be undone: the segment may end in a torn batch until it is recovered."""


class IndexEntryMismatchError(CorruptSegmentError):
    """An index entry does not point at the batch it names (the index is rebuilt and the lookup retried)."""


_Method = TypeVar("_Method", bound=Callable[..., Any])


def _rebuild_index_on_mismatch(method: _Method) -> _Method:
    """Run a lookup; if an index entry proves wrong, rebuild the segment's indexes and run it once more."""

    @functools.wraps(method)
    def lookup(self: Segment, *args: Any) -> Any:
        try:
            return method(self, *args)
        except IndexEntryMismatchError as exc:
            log.warning("event=index_rebuild path=%s reason=%r", self.log_path, str(exc))
            self.recover(None, truncate=False)
            return method(self, *args)

    return cast(_Method, lookup)


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


class Segment:
    """Data file plus indexes; the append state (next offset, max timestamp) is exact for the active one.

    Segments loaded closed at startup are not scanned: their size comes from the file system, their largest
    timestamp from the time index on first use, and `next_offset` is only set for the active segment.
    """

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        size: int,
        now_ms: int,
        config: LogConfig,
        cache: IndexCache,
        suffix: str = "",
    ) -> None:
        self.base_offset = base_offset
        self.size = size
        name = segment_name(base_offset)
        # `suffix` names the files of a segment the cleaner is still writing (`.cleaned`, see rename_files).
        self.log_path = directory / (name + LOG_SUFFIX + suffix)
        self.offset_index = OffsetIndex(directory / (name + INDEX_SUFFIX + suffix), base_offset)
        self.time_index = TimeIndex(directory / (name + TIME_INDEX_SUFFIX + suffix), base_offset)
        self.offset_index.reloader = self._reload_indexes
        self.time_index.reloader = self._reload_indexes
        self.active = False
        self.created_ms = now_ms
        # The owning log's config (the log replaces it on update_config); see the setter.
        self.config = config
        self._cache = cache
        self._file: SegmentFile | None = None
        self._largest_timestamp: int | None = None
        self._reset_state()

    @property
    def config(self) -> LogConfig:
        return self._config

    @config.setter
    def config(self, config: LogConfig) -> None:
        # Copied into plain attributes: the append path reads them for every batch.
        self._config = config
        self._segment_bytes = config.segment_bytes
        self._segment_ms = config.segment_ms
        self._index_interval = config.index_interval_bytes
        self._max_offset_entries = config.max_offset_index_entries
        self._max_time_entries = config.max_time_index_entries

    def _reset_state(self) -> None:
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = self.base_offset
        # Max timestamp of the first batch: time-based rolling measures from it, as Kafka does.
        self.first_batch_timestamp: int | None = None
        self.bytes_since_index_entry = 0

    # -- lifecycle -------------------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        directory: Path,
        base_offset: int,
        now_ms: int,
        config: LogConfig,
        cache: IndexCache,
        suffix: str = "",
    ) -> Segment:
        """A new, empty, active segment (an empty leftover file of the same name is reused)."""
        segment = cls(directory, base_offset, 0, now_ms, config, cache, suffix)
        try:
            segment._file = SegmentFile.open(segment.log_path, create=True)
        except KafkaStorageError as exc:
            if not isinstance(exc.__cause__, FileExistsError) or segment.log_path.stat().st_size != 0:
                raise
            segment._file = SegmentFile.open(segment.log_path)
        segment.offset_index.reset()
        segment.time_index.reset()
        segment.active = True
        return segment

    @classmethod
    def open_existing(
        cls, directory: Path, base_offset: int, config: LogConfig, cache: IndexCache
    ) -> Segment:
        """A segment found on disk; nothing is read until it is used."""
        segment = cls(directory, base_offset, 0, int(time.time() * 1000), config, cache)
        with storage_errors("stat", segment.log_path):
            segment.size = segment.log_path.stat().st_size
        return segment

    @property
    def file(self) -> SegmentFile:
        file = self._file
        if file is None:
            file = self._file = SegmentFile.open(self.log_path)
        return file

    def indexes_look_sane(self) -> bool:
        """Cheap startup check: both index files exist and hold whole entries."""
        return self.offset_index.file_size_ok() and self.time_index.file_size_ok()

    def _reload_indexes(self) -> None:
        """Load both indexes from their files (the cache may have evicted them); rebuild them if not sane."""
        offset_index, time_index = self.offset_index, self.time_index
        if not (offset_index.loaded or offset_index.load(self.size)) or not (
            time_index.loaded or time_index.load(self.size)
        ):
            log.warning("event=index_rebuild path=%s reason=invalid_index_file", self.log_path)
            self.recover(None, truncate=False)
        elif not self._offset_index_complete():
            log.warning("event=index_rebuild path=%s reason=index_file_short", self.log_path)
            self.recover(None, truncate=False)
        self._touch()

    def _offset_index_complete(self) -> bool:
        """Whether no entry is missing after the last one (a file cut at an entry boundary looks sane).

        Walks the batches after the last entry: with a complete index that is about one index interval.
        """
        if (
            self.offset_index.count >= self._max_offset_entries
            or self.time_index.count >= self._max_time_entries
        ):
            return True
        since = 0
        try:
            for _, header in self._headers_from(self.offset_index.last(), self.size):
                if since > self._index_interval:
                    return False
                since += header.size
        except CorruptSegmentError as exc:
            log.warning("event=index_check_failed path=%s reason=%r", self.log_path, str(exc))
            return False
        return True

    def _touch(self) -> None:
        """Tell the cache a closed segment's indexes are in use (unloaded ones register when reloaded)."""
        if not self.active and self.offset_index.loaded and self.time_index.loaded:
            self._cache.touch(self, (self.offset_index, self.time_index))

    def seal(self) -> None:
        """Stop being the active segment: note the final max timestamp and write the indexes out."""
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.write_indexes()  # may fail (disk full): the segment then simply stays active
        self._largest_timestamp = self.max_timestamp
        self.active = False
        self._touch()

    def write_indexes(self) -> None:
        self.offset_index.persist(fsync=False)
        self.time_index.persist(fsync=False)

    def syncer(self) -> Callable[[], None]:
        """A function that fsyncs the data and index files, safe to call without the log's lock.

        It holds the open data file, so it works even if the segment is deleted meanwhile. Call
        write_indexes first.
        """
        file, indexes = self.file, (self.offset_index, self.time_index)

        def sync() -> None:
            with storage_errors("fsync", file.path):
                os.fsync(file.fileno())
            for index in indexes:
                index.sync()

        return sync

    def sync(self) -> None:
        self.syncer()()

    def close(self) -> None:
        """Forget the files; an open region still keeps the data file readable."""
        self._cache.forget(self)
        self._file = None

    def rename_files(self, suffix: str) -> None:
        """Rename the index files, then the data file, to their names with `suffix` ("" for the live names).

        The data file goes last: the cleaner commits a swap by that rename. Open handles stay valid.
        """
        name = segment_name(self.base_offset)
        directory = self.log_path.parent
        for index, extension in ((self.offset_index, INDEX_SUFFIX), (self.time_index, TIME_INDEX_SUFFIX)):
            target = directory / (name + extension + suffix)
            with storage_errors("rename", index.path):
                os.replace(index.path, target)
            index.path = target
        target = directory / (name + LOG_SUFFIX + suffix)
        with storage_errors("rename", self.log_path):
            os.replace(self.log_path, target)
        self.log_path = target
        if self._file is not None:
            self._file.path = target

    def delete(self) -> None:
        """Remove the files (regions already handed out stay readable through their open descriptor)."""
        with storage_errors("delete segment", self.log_path):
            self.log_path.unlink(missing_ok=True)
        self.close()
        self.offset_index.delete_file()
        self.time_index.delete_file()

    def largest_batch_timestamp(self) -> int:
        """The largest max timestamp of the segment's batches (-1 when they carry none)."""
        if self.active:
            return self.max_timestamp
        if self._largest_timestamp is None:
            self._largest_timestamp = self.time_index.last()[0]
            self._touch()
        return self._largest_timestamp

    def largest_timestamp(self) -> int:
        """Largest batch timestamp (file modification time when batches carry none), for retention.ms."""
        timestamp = self.largest_batch_timestamp()
        if timestamp >= 0:
            return timestamp
        with storage_errors("stat", self.log_path):
            return int(self.log_path.stat().st_mtime * 1000)

    # -- appends ---------------------------------------------------------------------------------------

    def roll_reason(self, size: int, last_offset: int, max_timestamp: int, now_ms: int) -> str:
        """Why an append of these batches must go to a new segment ('' when it fits here)."""
        if last_offset - self.base_offset > INT32_MAX:
            return "relative_offset_overflow"
        current = self.size
        if current == 0:
            return ""
        if current + size > self._segment_bytes:
            return "segment_bytes"
        if (
            self.offset_index.count >= self._max_offset_entries
            or self.time_index.count >= self._max_time_entries
        ):
            return "index_full"
        first = self.first_batch_timestamp
        waited = max_timestamp - first if first is not None and first >= 0 else now_ms - self.created_ms
        if waited > self._segment_ms:
            return "segment_ms"
        return ""

    def append(
        self,
        buffers: Sequence[bytes | bytearray | memoryview],
        size: int,
        batches: Sequence[BatchMeta],
    ) -> None:
        """Write the batches (one writev) and index them; on failure the file is cut back to its old size."""
        fd = (self._file or self.file).fileno()
        try:
            write_all(fd, buffers, size)
        except OSError as exc:
            self._undo_write(fd, exc)
        position = self.size
        for batch_size, base_offset, last_offset, max_timestamp in batches:
            self._track(position, batch_size, base_offset, last_offset, max_timestamp)
            position += batch_size
        self.size = position

    def _undo_write(self, fd: int, exc: OSError) -> None:
        try:
            os.ftruncate(fd, self.size)
        except OSError as undo_exc:
            raise SegmentDamagedError(
                f"append to {self.log_path} failed ({exc.strerror}) and cutting it back to {self.size} bytes "
                f"failed too ({undo_exc.strerror}); the log must be reopened to recover"
            ) from exc
        raise storage_error("append to", self.log_path, exc) from exc

    def _track(
        self, position: int, size: int, base_offset: int, last_offset: int, max_timestamp: int
    ) -> None:
        """Account for one batch now in the file at `position` (the same rules for appends and recovery).

        Like Kafka, a batch gets an index entry when more than index.interval.bytes were written since the
        last entry (so the first batch of a segment never needs one), unless an index is full.
        """
        if self.first_batch_timestamp is None:
            self.first_batch_timestamp = max_timestamp
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = base_offset
        since = self.bytes_since_index_entry
        if (
            since > self._index_interval
            and self.offset_index.count < self._max_offset_entries
            and self.time_index.count < self._max_time_entries
        ):
            self.offset_index.append(base_offset - self.base_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            since = 0
        self.bytes_since_index_entry = since + size
        self.next_offset = last_offset + 1

    # -- reads -----------------------------------------------------------------------------------------

    def iter_headers(
        self, start: int, end: int, entry_offset: int | None = None
    ) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each batch from `start` (a batch boundary) up to `end`.

        Reads a block at a time; raises CorruptSegmentError where the bytes are not a plausible batch.
        With `entry_offset` (the offset an index entry gives for `start`), a first batch that is not there
        raises IndexEntryMismatchError: the index, not the data, is wrong.
        """
        fd = self.file.fileno()
        block = b""
        block_start = start
        position = start
        while position < end:
            offset = position - block_start
            if offset + HEADER_SIZE > len(block):
                with storage_errors("read", self.log_path):
                    block = os.pread(fd, max(HEADER_SIZE, min(_SCAN_BLOCK, end - position)), position)
                block_start, offset = position, 0
            header = read_header(block, offset) if len(block) - offset >= HEADER_SIZE else None
            if (
                header is None
                or header.magic != MAGIC
                or header.size < HEADER_SIZE
                or position + header.size > end
            ):
                error = (
                    IndexEntryMismatchError
                    if position == start and entry_offset is not None
                    else CorruptSegmentError
                )
                raise error(f"{self.log_path}: no valid batch at position {position} (segment end {end})")
            if position == start and entry_offset is not None and header.base_offset != entry_offset:
                raise IndexEntryMismatchError(
                    f"{self.log_path}: index names offset {entry_offset} at position {start}, "
                    f"the batch there starts at {header.base_offset}"
                )
            yield position, header
            position += header.size

    def _headers_from(self, entry: tuple[int, int], end: int) -> Iterator[tuple[int, BatchHeader]]:
        """iter_headers from an index entry (offset, position), checking the entry."""
        offset, position = entry
        return self.iter_headers(position, end, offset if position > 0 else None)

    @_rebuild_index_on_mismatch
    def find_batch(self, offset: int, end: int | None = None) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch (before `end`) whose last offset is >= `offset`."""
        self._touch()
        for position, header in self._headers_from(
            self.offset_index.lookup(offset), self.size if end is None else end
        ):
            if header.last_offset >= offset:
                return position, header
        return None

    @_rebuild_index_on_mismatch
    def last_boundary_within(self, start: int, limit: int, end: int) -> int:
        """The largest batch boundary b with start <= b <= min(limit, end) (b == start if nothing fits)."""
        if end <= limit:
            return end
        entry = self.offset_index.floor_entry_at(limit)
        headers = self._headers_from(entry, end) if entry[1] > start else self.iter_headers(start, end)
        for batch_position, header in headers:
            if batch_position + header.size > limit:
                return batch_position
        return end

    @_rebuild_index_on_mismatch
    def find_timestamp(self, timestamp: int, min_offset: int) -> tuple[int, int] | None:
        """(offset, max timestamp) of the first batch from `min_offset` whose max timestamp >= `timestamp`."""
        self._touch()
        start_offset = max(self.time_index.lookup(timestamp), min_offset)
        for _, header in self._headers_from(self.offset_index.lookup(start_offset), self.size):
            if header.max_timestamp >= timestamp and header.last_offset >= min_offset:
                return max(header.base_offset, min_offset), header.max_timestamp
        return None

    def max_timestamp_below(self, limit: int, min_offset: int) -> tuple[int, int] | None:
        """(largest max timestamp, offset of the first batch carrying it) of the batches holding offsets in
        [`min_offset`, `limit`), or None. The time index's last entry below `limit` names the largest
        timestamp of every batch before it, so only the headers from there to `limit` are read."""
        self._touch()
        _, values = self.time_index.entries()
        entry = bisect_left(values, limit - self.base_offset) - 1
        start = max(self.base_offset, min_offset)
        if entry >= 0:
            start = max(start, self.base_offset + values[entry])
        best: tuple[int, int] | None = None
        for _, header in self._headers_from(self.offset_index.lookup(start), self.size):
            if header.base_offset >= limit:
                break
            if header.last_offset >= start and (best is None or header.max_timestamp > best[0]):
                best = (header.max_timestamp, max(header.base_offset, min_offset))
        return best

    # -- truncation and recovery ----------------------------------------------------------------------

    def truncate_to(self, offset: int) -> int | None:
        """Remove the batch holding `offset` and all later ones; return its base offset (None if none)."""
        found = self.find_batch(offset)
        if found is None:
            return None
        position, header = found
        with storage_errors("truncate", self.log_path):
            os.ftruncate(self.file.fileno(), position)
        self.size = position
        self.offset_index.truncate_to_position(position)
        self.time_index.truncate_to_offset(header.base_offset)
        if not self.load_tail():
            raise CorruptSegmentError(f"{self.log_path}: batches before position {position} do not chain")
        return header.base_offset

    def load_tail(self) -> bool:
        """Restore the append state from the indexes and the headers after the last index entry.

        Used for the active segment after a clean shutdown and after truncation. False when the bytes do
        not end in a clean chain of batches: the caller must then recover the segment.
        """
        self._reset_state()
        try:
            entry_offset, start = entry = self.offset_index.last()
            self.max_timestamp, self.offset_of_max_timestamp = self.time_index.last()
            self.bytes_since_index_entry = self.size - start
            expected = entry_offset
            since = 0
            index_room = self.offset_index.count < self._max_offset_entries and (
                self.time_index.count < self._max_time_entries
            )
            for _, header in self._headers_from(entry, self.size):
                # A batch older than its predecessor, or one that should have had an index entry.
                if header.base_offset < expected or (index_room and since > self._index_interval):
                    return False
                since += header.size
                if header.max_timestamp > self.max_timestamp:
                    self.max_timestamp = header.max_timestamp
                    self.offset_of_max_timestamp = header.base_offset
                expected = self.next_offset = header.next_offset
            if self.size:
                self.first_batch_timestamp = next(self.iter_headers(0, self.size))[1].max_timestamp
        except CorruptSegmentError as exc:
            log.warning("event=segment_tail_invalid path=%s reason=%s", self.log_path, exc)
            return False
        return True

    def recover(
        self,
        expected_offset: int | None,
        on_batch: Callable[[BatchHeader], None] | None = None,
        *,
        truncate: bool = True,
    ) -> int:
        """Validate every batch, rebuild both indexes and the append state; return the bytes cut off.

        The file is cut at the first byte that does not start a valid batch (bad size, magic or CRC, an
        offset below `expected_offset` or the previous batch's). With truncate=False such a byte raises
        CorruptSegmentError instead (used when rebuilding an index at read time).
        """
        fd = self.file.fileno()
        with storage_errors("stat", self.log_path):
            size = os.fstat(fd).st_size
        self._cache.forget(self)  # the arrays are replaced: counted again when done
        self.offset_index.reset()
        self.time_index.reset()
        self._reset_state()
        expected = self.base_offset if expected_offset is None else max(expected_offset, self.base_offset)
        valid, problem = self._scan_valid(fd, size, expected, on_batch)
        if valid < size:
            if not truncate:
                raise CorruptSegmentError(f"{self.log_path}: invalid data at position {valid}: {problem}")
            log.warning(
                "event=segment_truncated path=%s position=%d removed_bytes=%d reason=%r",
                self.log_path,
                valid,
                size - valid,
                problem,
            )
            with storage_errors("truncate", self.log_path):
                os.ftruncate(fd, valid)
        self.size = valid
        self.write_indexes()
        self._largest_timestamp = self.max_timestamp
        self._touch()
        return size - valid

    def _scan_valid(
        self,
        fd: int,
        size: int,
        expected: int,
        on_batch: Callable[[BatchHeader], None] | None,
    ) -> tuple[int, str]:
        """Walk the batches through a memory map; return (end of the valid prefix, why it ended there)."""
        if size == 0:
            return 0, ""
        position = 0
        with storage_errors("map", self.log_path), mmap.mmap(fd, size, prot=mmap.PROT_READ) as view:
            view.madvise(mmap.MADV_SEQUENTIAL)
            while position < size:
                try:
                    header = check_batch(view, position, size)
                except (CorruptMessageError, UnsupportedVersionError, InvalidRecordError) as exc:
                    return position, str(exc)
                if header.base_offset < expected:
                    return position, f"offset {header.base_offset} below expected {expected}"
                if header.last_offset - self.base_offset > INT32_MAX:
                    return position, f"offset {header.last_offset} overflows the segment's relative offsets"
                self._track(
                    position, header.size, header.base_offset, header.last_offset, header.max_timestamp
                )
                if on_batch is not None:
                    on_batch(header)
                expected = header.next_offset
                position += header.size
        return position, ""
