"""The sparse per-segment indexes: `.index` (offset -> position) and `.timeindex` (timestamp -> offset).

File formats are Kafka's: big-endian fixed-size entries, offsets stored relative to the segment's base
offset. `.index` entries are (relative offset int32, file position int32), 8 bytes; `.timeindex` entries
are (timestamp int64, relative offset int32), 12 bytes. Unlike Kafka, an offset index entry names the *base*
offset of the batch at that position, so a lookup lands on the batch that holds the offset and the entry can
be checked against the batch header it points at.

Entries live in memory in two typed arrays (binary search runs in C through `bisect`); the file is a copy
written on roll, flush and close. An index is loaded lazily and validated as a whole when loaded (entries
strictly increasing, positions inside the data file): a file that fails is rebuilt from the log, never
trusted. Indexes of closed segments are evicted from memory through an `IndexCache` with a byte budget.
"""

from __future__ import annotations

import logging
import operator
import os
import struct
import threading
import weakref
from array import array
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import ClassVar

from backbone.log.files import storage_errors

log = logging.getLogger(__name__)

INT32_MAX = 2**31 - 1


# Entries are converted in chunks through one compiled struct each, at C speed and with bounded memory.
_CHUNK = 1024


@lru_cache(maxsize=16)
def _entries_struct(entry_format: str, count: int) -> struct.Struct:
    return struct.Struct(">" + entry_format * count)


def _unpack_entries(entry_format: str, data: bytes, count: int) -> list[int]:
    """The entries' fields, flattened: [key0, value0, key1, value1, ...]."""
    flat: list[int] = []
    chunk = _entries_struct(entry_format, _CHUNK)
    full, rest = divmod(count, _CHUNK)
    for i in range(full):
        flat.extend(chunk.unpack_from(data, i * chunk.size))
    if rest:
        flat.extend(_entries_struct(entry_format, rest).unpack_from(data, full * chunk.size))
    return flat


def _pack_entries(entry_format: str, flat: list[int], count: int) -> bytes:
    fields = len(entry_format)
    chunk = _entries_struct(entry_format, _CHUNK)
    parts = []
    for start in range(0, count, _CHUNK):
        n = min(_CHUNK, count - start)
        packer = chunk if n == _CHUNK else _entries_struct(entry_format, n)
        parts.append(packer.pack(*flat[start * fields : (start + n) * fields]))
    return b"".join(parts)


class SparseIndex:
    """An ordered list of (key, value) entries kept in two arrays and mirrored in a file."""

    ENTRY_FORMAT: ClassVar[str]
    KEY_TYPE: ClassVar[str]
    VALUE_TYPE: ClassVar[str]
    ENTRY_SIZE: ClassVar[int]

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        # Both arrays in one attribute, so a reader in another thread sees both or neither.
        self._arrays: tuple[array[int], array[int]] | None = None
        # Entries [0, _persisted) are in the file; the file may also hold stale bytes past them (_trim).
        self._persisted = 0
        self._trim = False
        # Brings the arrays back after the cache evicted them: a weak reference to the owning segment's
        # method, so the (process-wide) cache never keeps a segment and its open file alive.
        self._reloader: weakref.WeakMethod[Callable[[], None]] | None = None
        # Number of entries, kept up to date even while the arrays are evicted (read on every append).
        self.count = 0

    # -- state -----------------------------------------------------------------------------------------

    @property
    def reloader(self) -> Callable[[], None] | None:
        return None if self._reloader is None else self._reloader()

    @reloader.setter
    def reloader(self, method: Callable[[], None]) -> None:
        self._reloader = weakref.WeakMethod(method)

    @property
    def loaded(self) -> bool:
        return self._arrays is not None

    def entries(self) -> tuple[array[int], array[int]]:
        """The (keys, values) arrays, reloaded through the owner if they were evicted."""
        arrays = self._arrays
        if arrays is None:
            reload = self.reloader
            if reload is not None:
                reload()
                arrays = self._arrays
        if arrays is None:
            raise RuntimeError(f"index {self.path} is not loaded")
        return arrays

    def __len__(self) -> int:
        return self.count

    @property
    def memory_bytes(self) -> int:
        arrays = self._arrays
        if arrays is None:
            return 0
        keys, values = arrays
        return len(keys) * (keys.itemsize + values.itemsize)

    def reset(self) -> None:
        """Start empty (a new segment, or a rebuild); the file is rewritten on the next persist."""
        self._arrays = (array(self.KEY_TYPE), array(self.VALUE_TYPE))
        self._persisted = 0
        self._trim = True
        self.count = 0

    def unload(self) -> bool:
        """Drop the arrays to save memory if the file holds all of them; return whether it did."""
        arrays = self._arrays
        if arrays is None or self._persisted != len(arrays[0]) or self._trim:
            return arrays is None
        self._arrays = None
        return True

    def file_size_ok(self) -> bool:
        """Cheap check at open: the file exists and holds whole entries."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return False
        return size % self.ENTRY_SIZE == 0

    def load(self, data_size: int) -> bool:
        """Read and validate the file; False (and nothing loaded) when it is missing or not sane."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return False
        count, rest = divmod(len(data), self.ENTRY_SIZE)
        if rest:
            log.warning("event=index_invalid path=%s reason=partial_entry size=%d", self.path, len(data))
            return False
        flat = _unpack_entries(self.ENTRY_FORMAT, data, count)
        keys = array(self.KEY_TYPE, flat[0::2])
        values = array(self.VALUE_TYPE, flat[1::2])
        reason = self._invalid_reason(keys, values, data_size)
        if reason:
            log.warning("event=index_invalid path=%s reason=%s entries=%d", self.path, reason, count)
            return False
        self._arrays = (keys, values)
        self._persisted = self.count = count
        self._trim = False
        return True

    def _invalid_reason(self, keys: array[int], values: array[int], data_size: int) -> str | None:
        raise NotImplementedError

    # -- changes ---------------------------------------------------------------------------------------

    def append(self, key: int, value: int) -> None:
        keys, values = self._arrays or self.entries()
        keys.append(key)
        values.append(value)
        self.count += 1

    def truncate_entries(self, count: int) -> None:
        """Keep the first `count` entries."""
        keys, values = self.entries()
        if count < len(keys):
            del keys[count:]
            del values[count:]
            self.count = count
            if self._persisted > count:
                self._persisted = count
                self._trim = True

    def persist(self, fsync: bool) -> None:
        """Write the entries the file does not hold yet (idempotent: a failed write is simply redone)."""
        arrays = self._arrays
        if arrays is None:
            # Evicted, which only happens to a complete file: at most an fsync is left to do.
            if fsync:
                self.sync()
            return
        keys, values = arrays
        count = len(keys)
        if self._persisted == count and not self._trim and not fsync:
            return
        pending = count - self._persisted
        with storage_errors("write index", self.path):
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                if pending:
                    flat = [0] * (2 * pending)
                    flat[0::2] = keys[self._persisted :]
                    flat[1::2] = values[self._persisted :]
                    data = _pack_entries(self.ENTRY_FORMAT, flat, pending)
                    os.pwrite(fd, data, self._persisted * self.ENTRY_SIZE)
                if self._trim:
                    os.ftruncate(fd, count * self.ENTRY_SIZE)
                if fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
        self._persisted = count
        self._trim = False

    def sync(self) -> None:
        """fsync the index file (if it exists: an index never persisted has nothing to sync)."""
        with storage_errors("fsync index", self.path):
            try:
                fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                return
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def delete_file(self) -> None:
        with storage_errors("delete index", self.path):
            self.path.unlink(missing_ok=True)


class OffsetIndex(SparseIndex):
    """Relative base offset of a batch -> its position in the `.log` file."""

    ENTRY_FORMAT = "ii"
    KEY_TYPE = "i"
    VALUE_TYPE = "i"
    ENTRY_SIZE = 8

    def lookup(self, offset: int) -> tuple[int, int]:
        """(base offset, position) of the last indexed batch starting at or before `offset`.

        Without such an entry: (segment base offset, 0), the start of the segment.
        """
        keys, values = self.entries()
        i = bisect_right(keys, offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + keys[i], values[i]

    def floor_entry_at(self, position: int) -> tuple[int, int]:
        """(base offset, position) of the last indexed batch at or before `position` ((base, 0) if none)."""
        keys, values = self.entries()
        i = bisect_right(values, position) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + keys[i], values[i]

    def last(self) -> tuple[int, int]:
        keys, values = self.entries()
        if not keys:
            return self.base_offset, 0
        return self.base_offset + keys[-1], values[-1]

    def truncate_to_position(self, position: int) -> None:
        """Remove entries pointing at or past `position`."""
        _, values = self.entries()
        self.truncate_entries(bisect_right(values, position - 1))

    def _invalid_reason(self, keys: array[int], values: array[int], data_size: int) -> str | None:
        if not keys:
            return None
        if keys[0] < 0 or values[0] < 0:
            return "negative_entry"
        if not all(map(operator.lt, keys, keys[1:])):
            return "offsets_not_increasing"
        if not all(map(operator.lt, values, values[1:])):
            return "positions_not_increasing"
        if values[-1] >= data_size:
            return f"position_{values[-1]}_beyond_log_size_{data_size}"
        return None


class TimeIndex(SparseIndex):
    """Largest timestamp so far -> relative base offset of the first batch that reached it."""

    ENTRY_FORMAT = "qi"
    KEY_TYPE = "q"
    VALUE_TYPE = "i"
    ENTRY_SIZE = 12

    def lookup(self, timestamp: int) -> int:
        """Offset to start a timestamp search from: every batch before it has a smaller max timestamp."""
        keys, values = self.entries()
        i = bisect_right(keys, timestamp) - 1
        return self.base_offset + (values[i] if i >= 0 else 0)

    def last(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry, (-1, base offset) when empty."""
        keys, values = self.entries()
        if not keys:
            return -1, self.base_offset
        return keys[-1], self.base_offset + values[-1]

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Append unless the timestamp does not grow (entries stay strictly increasing)."""
        keys, values = self._arrays or self.entries()
        if not keys or timestamp > keys[-1]:
            keys.append(timestamp)
            values.append(offset - self.base_offset)
            self.count += 1

    def truncate_to_offset(self, offset: int) -> None:
        """Remove entries naming `offset` or later."""
        _, values = self.entries()
        self.truncate_entries(bisect_left(values, offset - self.base_offset))

    def _invalid_reason(self, keys: array[int], values: array[int], data_size: int) -> str | None:
        if not keys:
            return None
        if values[0] < 0:
            return "negative_offset"
        if not all(map(operator.lt, keys, keys[1:])):
            return "timestamps_not_increasing"
        if not all(map(operator.le, values, values[1:])):
            return "offsets_decreasing"
        return None


class IndexCache:
    """Bounds the memory held by loaded indexes of closed segments, evicting the least recently used.

    Closed segments register their loaded indexes and touch the cache on every use; the active segment
    never registers (it is always needed). Eviction drops the arrays (an index whose file is incomplete
    keeps them, untracked until its next use); they are read and validated again on the next use.
    """

    def __init__(self, max_bytes: int = 256 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        # Owner id -> (its indexes, the bytes counted for them), least recently used first.
        self._entries: OrderedDict[int, tuple[tuple[SparseIndex, ...], int]] = OrderedDict()
        self._watched: set[int] = set()
        self._bytes = 0

    @property
    def bytes_held(self) -> int:
        return self._bytes

    def touch(self, owner: object, indexes: tuple[SparseIndex, ...]) -> None:
        """Note a use of `owner`'s loaded indexes (registering them if new), evicting others if needed."""
        key = id(owner)
        with self._lock:
            if key in self._entries:  # every lookup comes here: keep it to a move
                self._entries.move_to_end(key)
                return
            if key not in self._watched:
                # An owner dropped without forget() (a log abandoned unclosed) leaves no entry behind.
                self._watched.add(key)
                weakref.finalize(owner, self._owner_gone, key)
            size = sum(index.memory_bytes for index in indexes)
            self._entries[key] = (indexes, size)
            self._bytes += size
            while self._bytes > self.max_bytes and len(self._entries) > 1:
                _, (evicted, evicted_size) = self._entries.popitem(last=False)
                self._bytes -= evicted_size
                for index in evicted:
                    index.unload()

    def forget(self, owner: object) -> None:
        """Stop counting `owner`'s indexes (it became active, was rebuilt, closed or deleted)."""
        with self._lock:
            self._drop(id(owner))

    def _owner_gone(self, key: int) -> None:
        with self._lock:
            self._watched.discard(key)
            self._drop(key)

    def _drop(self, key: int) -> None:
        held = self._entries.pop(key, None)
        if held is not None:
            self._bytes -= held[1]


DEFAULT_INDEX_CACHE = IndexCache()
