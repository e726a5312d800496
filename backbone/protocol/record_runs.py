"""Uniform runs: records laid out alike, checked a column at a time and made straight from a struct.

Most batches are mostly runs of records that differ only in their timestamp and offset deltas (a producer
writing values of one size without headers). `uniform_run` finds such a run with a few C-level bytes
operations per field instead of a Python loop over every byte, two to four times the speed of the
general loop in `records.py`; a `UniformRun` makes its records each time it is read (see LazyRecords).
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from backbone.protocol.varint import SHORT_VARINTS

if TYPE_CHECKING:
    from backbone.protocol.records import Record

# Below about this many records, checking a run costs more than the general loop would.
MIN_RUN = 16
# Offset deltas below this take a one-byte varint, below the next a two-byte one.
_ONE_BYTE_VARINTS = 64
_TWO_BYTE_VARINTS = 8192
# The varints of offset deltas 0, 1, 2, ..., as columns: in a run of records with deltas d, d + 1, ...
# they are _OFFSET_DELTAS_1[d : d + n] as one-byte varints, or _OFFSET_DELTAS_2_LOW[d : d + n] and
# _OFFSET_DELTAS_2_HIGH[d : d + n] as two-byte ones (for d < 64 that is a valid but padded encoding).
_OFFSET_DELTAS_1 = bytes(2 * i for i in range(_ONE_BYTE_VARINTS))
_OFFSET_DELTAS_2_LOW = bytes((2 * i) & 0x7F | 0x80 for i in range(_TWO_BYTE_VARINTS))
_OFFSET_DELTAS_2_HIGH = bytes((2 * i) >> 7 for i in range(_TWO_BYTE_VARINTS))
# Bytes translated to whether their varint continues (1) or ends there (0).
_CONTINUES = bytes(b >> 7 for b in range(0x100))
_SINGLE_BYTES = tuple(bytes((b,)) for b in range(0x100))


class RunLayout(NamedTuple):
    """Where the fields of a record lie relative to its start, for uniform runs."""

    stride: int
    """The record's whole size, its length varint included: the distance between records of a run."""
    fixed: tuple[tuple[int, int], ...]
    """(position, byte) of every byte that is the same in each record of the run: those of the length,
    key length, value length and header count varints."""
    timestamp_at: int
    timestamp_width: int
    offset_at: int
    offset_width: int
    offset_delta: int
    """The first record's; the run's records have the next ones, one each."""
    key_size: int
    """-1: null."""
    value_size: int
    fields: struct.Struct
    """Unpacks a record into its timestamp delta's varint and its key and value where not null."""
    key_at: int
    value_at: int
    """Where the key's and the value's bytes start (meaningless for a null one): for readers that cut a
    whole run's keys or values out at once (column by column) instead of record by record."""


@dataclass(slots=True, eq=False)
class UniformRun:
    """A uniform run of records: where they lie, and what it takes to make them, each time they are read."""

    buf: bytes
    pos: int
    n: int
    layout: RunLayout
    timestamps: dict[int, int]
    """The absolute timestamp of each timestamp-delta varint in the run, as the struct reads it."""
    first_offset: int

    @property
    def end(self) -> int:
        """The position after the run in its buffer."""
        return self.pos + self.n * self.layout.stride

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[Record]:
        layout = self.layout
        table = self.timestamps
        offsets = range(self.first_offset, self.first_offset + self.n)
        # The struct cuts every record's fields out in C; the generator builds the records around them.
        fields = layout.fields.iter_unpack(memoryview(self.buf)[self.pos : self.end])
        if layout.key_size < 0:
            if layout.value_size < 0:
                return ((o, table[t], None, None, ()) for o, (t,) in zip(offsets, fields, strict=True))
            return ((o, table[t], None, v, ()) for o, (t, v) in zip(offsets, fields, strict=True))
        if layout.value_size < 0:
            return ((o, table[t], k, None, ()) for o, (t, k) in zip(offsets, fields, strict=True))
        return ((o, table[t], k, v, ()) for o, (t, k, v) in zip(offsets, fields, strict=True))

    def __getitem__(self, index: int) -> Record:
        """Record `index` (0 <= index < len)."""
        return next(iter(self.cut(index, index + 1)))

    def record_timestamps(self) -> list[int]:
        """Each record's timestamp, without making the records."""
        table = self.timestamps
        fields = self.layout.fields.iter_unpack(memoryview(self.buf)[self.pos : self.end])
        return [table[unpacked[0]] for unpacked in fields]

    def cut(self, start: int, stop: int) -> UniformRun:
        """Records [start, stop) of the run (0 <= start <= stop <= len)."""
        pos = self.pos + start * self.layout.stride
        return UniformRun(
            self.buf, pos, stop - start, self.layout, self.timestamps, self.first_offset + start
        )


def uniform_run(
    buf: bytes, pos: int, end: int, left: int, base_offset: int, base_timestamp: int
) -> UniformRun | None:
    """The uniform run of at most `left` records that starts at `pos`, or None when there is none of at
    least MIN_RUN records.

    A run is records laid out exactly like its first one (`_uniform_layout`) save for their timestamp
    deltas and their offset deltas, which go up by one: each field is at the same place in each record.
    A run ends at the latest where the offset delta's varint widens (delta 64, then 8192); records past
    delta 8191 (batches of more than 8192 records) are left to the general loop.
    """
    layout = _uniform_layout(buf, pos, end)
    if layout is None:
        return None
    room = (_ONE_BYTE_VARINTS if layout.offset_width == 1 else _TWO_BYTE_VARINTS) - layout.offset_delta
    n = _run_length(buf, pos, min(room, left, (end - pos) // layout.stride), layout)
    if n < MIN_RUN:
        return None
    stride = layout.stride
    stop = pos + n * stride
    at = pos + layout.timestamp_at
    # Timestamp deltas repeat: each distinct one is decoded once, into a table from the delta's varint
    # (read by the struct as one byte or a little-endian 16-bit number, just what SHORT_VARINTS is
    # indexed by) to the absolute timestamp.
    if layout.timestamp_width == 1:
        distinct: Iterable[int] = set(buf[at:stop:stride])
    else:
        distinct = set(
            map(int.__or__, buf[at:stop:stride], map((0x100).__mul__, buf[at + 1 : stop : stride]))
        )
    timestamps = {varint: base_timestamp + SHORT_VARINTS[varint] for varint in distinct}
    return UniformRun(buf, pos, n, layout, timestamps, base_offset + layout.offset_delta)


def _uniform_layout(buf: bytes, pos: int, end: int) -> RunLayout | None:
    """The layout of the record at `pos` if a uniform run can start with it, else None.

    The record must lie wholly before `end`, have no headers, one- or two-byte varints throughout, and
    the record after it must be as long. The first tests are the ones most unlike records fail, so that
    they are turned away cheaply.
    """
    short = SHORT_VARINTS
    try:
        b = buf[pos]
        if b < 0x80:
            p = pos + 1
            length = short[b]
            if buf[pos + 1 + length] != b:
                return None
        else:
            b2 = buf[pos + 1]
            if b2 >= 0x80:
                return None
            p = pos + 2
            length = short[b2 << 8 | b]
            if buf[pos + 2 + length] != b or buf[pos + 3 + length] != b2:
                return None
        stride = p - pos + length
        # A record without headers ends with their count, 0: a quick test that turns most records with
        # headers away here.
        if length <= 0 or pos + stride > end or buf[pos + stride - 1] != 0:
            return None
        fixed = [(at, buf[pos + at]) for at in range(p - pos)]
        p += 1  # attributes: unused in magic 2, and not looked at by the general loop either
        timestamp_at = p - pos
        if buf[p] < 0x80:
            timestamp_width = 1
        elif buf[p + 1] < 0x80:
            timestamp_width = 2
        else:
            return None
        p += timestamp_width
        offset_at = p - pos
        b = buf[p]
        if b < 0x80:
            offset_width, offset_delta = 1, short[b]
        elif buf[p + 1] < 0x80:
            offset_width, offset_delta = 2, short[buf[p + 1] << 8 | b]
        else:
            return None
        if offset_delta < 0:
            return None
        p += offset_width
        key = _layout_field(buf, pos, p, fixed)
        if key is None:
            return None
        key_size, p = key
        key_at = p - pos - max(key_size, 0)
        value = _layout_field(buf, pos, p, fixed)
        if value is None:
            return None
        value_size, p = value
        value_at = p - pos - max(value_size, 0)
        if buf[p] != 0:  # headers: rare enough to leave to the general loop
            return None
    except IndexError:
        return None
    fixed.append((p - pos, 0))
    if p + 1 - pos != stride:
        return None
    fields = _fields_struct(stride, timestamp_at, timestamp_width, key_at, key_size, value_at, value_size)
    return RunLayout(
        stride,
        tuple(fixed),
        timestamp_at,
        timestamp_width,
        offset_at,
        offset_width,
        offset_delta,
        key_size,
        value_size,
        fields,
        key_at,
        value_at,
    )


def _layout_field(buf: bytes, pos: int, p: int, fixed: list[tuple[int, int]]) -> tuple[int, int] | None:
    """The key or value at `p` of the record at `pos`: (its size, -1 for null; the position after it).

    The bytes of its length varint join `fixed`. None for what a uniform run does not take.
    """
    b = buf[p]
    if b < 0x80:
        size = SHORT_VARINTS[b]
        fixed.append((p - pos, b))
        p += 1
    else:
        b2 = buf[p + 1]
        if b2 >= 0x80:
            return None
        size = SHORT_VARINTS[b2 << 8 | b]
        fixed += ((p - pos, b), (p + 1 - pos, b2))
        p += 2
    if size < -1:
        return None
    return size, p + max(size, 0)


@functools.lru_cache(maxsize=256)
def _fields_struct(
    stride: int,
    timestamp_at: int,
    timestamp_width: int,
    key_at: int,
    key_size: int,
    value_at: int,
    value_size: int,
) -> struct.Struct:
    """The struct for `RunLayout.fields`. A topic's records come in a handful of layouts: they are kept."""
    parts = [f"<{timestamp_at}x", "B" if timestamp_width == 1 else "H"]
    at = timestamp_at + timestamp_width
    if key_size >= 0:
        parts.append(f"{key_at - at}x{key_size}s")
        at = key_at + key_size
    if value_size >= 0:
        parts.append(f"{value_at - at}x{value_size}s")
        at = value_at + value_size
    parts.append(f"{stride - at}x")
    return struct.Struct("".join(parts))


def _run_length(buf: bytes, pos: int, n: int, layout: RunLayout) -> int:
    """How many of the `n` records from `pos` on have `layout`: the length of the run, checked a column of
    bytes at a time.

    A column is the byte at one position of each record (`buf[pos + at : stop : stride]`); every test on
    it runs in C. A column's matching prefix ends at its first wrong byte, and the run is the shortest
    prefix of: the fixed bytes (sizes, so the records up to there are `stride` apart), the timestamp
    delta's varint width and the offset deltas d, d + 1, ... from the first record's d. Together they
    fix where every field of every record in the run lies.
    """
    stride = layout.stride
    stop = pos + n * stride
    for at, byte in layout.fixed:
        good = n - len(buf[pos + at : stop : stride].lstrip(_SINGLE_BYTES[byte]))
        if good < n:
            n, stop = good, pos + good * stride
    at = pos + layout.timestamp_at
    if layout.timestamp_width == 1:
        good = buf[at:stop:stride].translate(_CONTINUES).find(1)
    else:
        # The first byte of each must have its continuation bit set, the second must not.
        wrong = (
            buf[at:stop:stride].translate(_CONTINUES).find(0),
            buf[at + 1 : stop : stride].translate(_CONTINUES).find(1),
        )
        good = min((i for i in wrong if i >= 0), default=-1)
    if 0 <= good < n:
        n, stop = good, pos + good * stride
    at = pos + layout.offset_at
    delta = layout.offset_delta
    if layout.offset_width == 1:
        return _matching_prefix(buf[at:stop:stride], _OFFSET_DELTAS_1[delta : delta + n])
    return min(
        _matching_prefix(buf[at:stop:stride], _OFFSET_DELTAS_2_LOW[delta : delta + n]),
        _matching_prefix(buf[at + 1 : stop : stride], _OFFSET_DELTAS_2_HIGH[delta : delta + n]),
    )


def _matching_prefix(column: bytes, expected: bytes) -> int:
    """How many leading bytes of `column` are those of `expected` (as long)."""
    if column == expected:
        return len(column)
    # Only where compaction left gaps in the offset deltas: a Python loop, but up to the gap only.
    return next(i for i, (a, b) in enumerate(zip(column, expected, strict=True)) if a != b)
