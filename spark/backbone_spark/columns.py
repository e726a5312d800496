"""Fetched records to Arrow columns, without a Python object per record where the decoder allows it.

The consumer's decoder leaves most of a batch as uniform runs: records laid out alike, every field at the
same place in each (see `backbone.protocol.record_runs`). A run's keys and values are cut out of the
fetched bytes for the whole run at once (one strided numpy copy per column, straight into an Arrow
buffer), its offsets are a range and its timestamps a table lookup. The reader's consumer leaves the
other records (headers, sizes that vary) undecoded too (`record.regions`): a region's records are walked
all at once, field by field (`walk.Walk`), and each column is copied out of the fetched bytes by one Arrow
`take`; bytes that are not whole records raise CorruptMessageError. Records decoded already come as plain
tuples and are transposed (`zip(*records)`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from backbone.protocol.errors import CorruptMessageError
from backbone.protocol.record_regions import RecordRegion
from backbone.protocol.record_runs import UniformRun
from backbone.protocol.records import LazyRecords
from backbone_spark.walk import ALL, Rows, Walk

__all__ = ["ColumnBuilder"]

_HEADER = pa.struct([("key", pa.string()), ("value", pa.binary())])
HEADERS_ARROW = pa.list_(pa.field("element", _HEADER))


def _gather(buf: pa.Buffer, starts: np.ndarray, lengths: np.ndarray, kind: pa.DataType) -> pa.Array:
    """The bytes at `starts` of `lengths` (-1: null) in `buf`, one value each, as one Arrow column.

    The values lie in `buf` in order with other bytes between them, so `buf` read as an array of
    alternating values and gaps needs no copy; Arrow's `take` of every other item then copies the
    values out, one memcpy each.
    """
    n = len(starts)
    ends = starts + np.maximum(lengths, 0)
    bounds = np.empty(2 * n + 1, np.int32)  # a buffer of at most a fetch response: well below 2 GiB
    bounds[0:-1:2] = starts
    bounds[1:-1:2] = ends
    bounds[-1] = ends[-1] if n else 0
    validity = None
    nulls = lengths < 0
    if nulls.any():
        valid = np.ones(2 * n, bool)
        valid[0::2] = ~nulls
        validity = pa.array(valid).buffers()[1]
    alternating = pa.Array.from_buffers(kind, 2 * n, [validity, pa.py_buffer(bounds), buf])
    return alternating.take(pa.array(np.arange(0, 2 * n, 2)))


@dataclass
class RegionColumns:
    """A region's records as columns; `headers` is None when the reader did not ask for them."""

    offsets: np.ndarray
    timestamps: np.ndarray
    keys: pa.Array
    values: pa.Array
    headers: pa.Array | None

    def head(self, n: int) -> RegionColumns:
        return RegionColumns(
            self.offsets[:n],
            self.timestamps[:n],
            self.keys.slice(0, n),
            self.values.slice(0, n),
            self.headers.slice(0, n) if self.headers is not None else None,
        )


def region_columns(region: RecordRegion, with_headers: bool) -> RegionColumns:
    """Every record of `region` walked at once; raises CorruptMessageError where the bytes are not records
    (a field that runs past its record, a bad length, a record with bytes left over)."""
    data = np.frombuffer(region.buf, np.uint8)
    buf = pa.py_buffer(region.buf)
    begin = np.array(region.starts, np.int64)
    walk = Walk(data, begin, np.append(begin[1:], region.end))
    rows = ALL
    walk.ok &= walk.varint(rows) == walk.ends - walk.at  # the length varint: the rest of the record
    walk.advance(rows, 1)  # attributes, unused in magic 2
    timestamp_deltas = walk.varint(rows)
    offset_deltas = walk.varint(rows)
    key_lengths, key_starts = _bytes_field(walk, rows)
    value_lengths, value_starts = _bytes_field(walk, rows)
    header_counts = walk.varint(rows)
    walk.ok &= header_counts >= 0
    header_counts = np.where(walk.ok, header_counts, 0)
    # Headers level by level: the first header of every record that has one, then the second, ...
    list_ends = np.zeros(region.n + 1, np.int64)
    np.cumsum(header_counts, out=list_ends[1:])
    total = int(list_ends[-1])
    name_starts, name_lengths, data_starts, data_lengths = (np.zeros(total, np.int64) for _ in range(4))
    for level in range(int(header_counts.max(initial=0))):
        having = np.flatnonzero(header_counts > level)
        at = list_ends[having] + level
        name_lengths[at], name_starts[at] = _bytes_field(walk, having)
        walk.ok[having] &= name_lengths[at] >= 0  # a header's key is never null
        data_lengths[at], data_starts[at] = _bytes_field(walk, having)
    bad = ~(walk.ok & (walk.at == walk.ends))
    if bad.any():
        first = int(np.argmax(bad))
        raise CorruptMessageError(f"record {first} of a region of {region.n} is not a whole record")
    headers = None
    if with_headers:
        names = _gather(buf, name_starts, name_lengths, pa.string())
        try:
            names.validate(full=True)
        except pa.ArrowInvalid:  # not UTF-8: read as the decoder reads header keys
            names = pa.array(
                [bytes(b).decode("utf-8", "replace") for b in names.cast(pa.binary()).to_pylist()]
            )
        entries = pa.StructArray.from_arrays(
            [names, _gather(buf, data_starts, data_lengths, pa.binary())], fields=list(_HEADER)
        )
        headers = pa.ListArray.from_arrays(
            pa.array(list_ends, pa.int32()), entries, type=HEADERS_ARROW, mask=pa.array(header_counts == 0)
        )
    return RegionColumns(
        region.base_offset + offset_deltas,
        region.base_timestamp + timestamp_deltas,
        _gather(buf, key_starts, key_lengths, pa.binary()),
        _gather(buf, value_starts, value_lengths, pa.binary()),
        headers,
    )


def _bytes_field(walk: Walk, rows: Rows) -> tuple[np.ndarray, np.ndarray]:
    """(length, start) of a length-prefixed field at `rows`' positions (-1: null), moving past it."""
    lengths = walk.varint(rows)
    walk.ok[rows] &= lengths >= -1
    lengths = np.where(walk.ok[rows], lengths, 0)
    starts = walk.at[rows].copy()
    walk.advance(rows, np.maximum(lengths, 0))
    return lengths, starts


def _cut_column(rows: np.ndarray, at: int, size: int) -> pa.Array:
    """The `size` bytes at `at` of every row as a binary column (null where the field is null: -1)."""
    n = len(rows)
    if size < 0:
        return pa.nulls(n, pa.binary())
    data = np.ascontiguousarray(rows[:, at : at + size])
    ends = np.arange(0, (n + 1) * size, size, dtype=np.int32) if size else np.zeros(n + 1, np.int32)
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(ends), pa.py_buffer(data)])


@dataclass
class ColumnBuilder:
    """Accumulates records of one partition as Arrow column pieces; `finish` makes the columns."""

    headers: bool
    offsets: list[pa.Array] = field(default_factory=list)
    timestamps: list[pa.Array] = field(default_factory=list)
    keys: list[pa.Array] = field(default_factory=list)
    values: list[pa.Array] = field(default_factory=list)
    header_lists: list[pa.Array] = field(default_factory=list)
    kinds: list[pa.Array] = field(default_factory=list)
    rows: int = 0

    def add(self, kind: int, records: Sequence[Any], until: int) -> bool:
        """Add `records` (plain tuples or a LazyRecords) of timestamp type `kind` below offset `until`;
        True when the range ends inside them (later records are not wanted)."""
        parts: Iterable[Any] = records.parts if isinstance(records, LazyRecords) else (records,)
        for part in parts:
            if not len(part):  # an empty cut
                continue
            if isinstance(part, UniformRun):
                keep = min(part.n, until - part.first_offset)
                if keep > 0:
                    self._add_run(kind, part.cut(0, keep) if keep < part.n else part)
                if keep < part.n:
                    return True
            elif isinstance(part, RecordRegion):
                columns = region_columns(part, self.headers)
                keep = int(np.searchsorted(columns.offsets, until))
                if keep:
                    self._add_columns(kind, columns.head(keep) if keep < part.n else columns)
                if keep < part.n:
                    return True
            else:
                columns = tuple(zip(*part, strict=True))
                ended = columns[0][-1] >= until
                if ended:
                    keep = sum(1 for offset in columns[0] if offset < until)
                    columns = tuple(column[:keep] for column in columns)
                if columns and columns[0]:
                    self._add_tuples(kind, columns)
                if ended:
                    return True
        return False

    def _add_run(self, kind: int, run: UniformRun) -> None:
        layout, n = run.layout, run.n
        rows = np.frombuffer(run.buf, np.uint8, count=n * layout.stride, offset=run.pos)
        rows = rows.reshape(n, layout.stride)
        at = layout.timestamp_at
        if layout.timestamp_width == 1:
            varints = rows[:, at].astype(np.intp)
        else:  # the little-endian 16-bit reading that `run.timestamps` is keyed by
            varints = rows[:, at].astype(np.intp) | (rows[:, at + 1].astype(np.intp) << 8)
        table = np.zeros(1 << (8 * layout.timestamp_width), np.int64)
        table[list(run.timestamps)] = list(run.timestamps.values())
        self.offsets.append(pa.array(np.arange(run.first_offset, run.first_offset + n, dtype=np.int64)))
        self.timestamps.append(pa.array(table[varints]))
        self.keys.append(_cut_column(rows, layout.key_at, layout.key_size))
        self.values.append(_cut_column(rows, layout.value_at, layout.value_size))
        if self.headers:
            self.header_lists.append(pa.nulls(n, HEADERS_ARROW))
        self.kinds.append(pa.repeat(pa.scalar(kind, pa.int32()), n))
        self.rows += n

    def _add_columns(self, kind: int, columns: RegionColumns) -> None:
        n = len(columns.offsets)
        self.offsets.append(pa.array(columns.offsets))
        self.timestamps.append(pa.array(columns.timestamps))
        self.keys.append(columns.keys)
        self.values.append(columns.values)
        if columns.headers is not None:
            self.header_lists.append(columns.headers)
        self.kinds.append(pa.repeat(pa.scalar(kind, pa.int32()), n))
        self.rows += n

    def _add_tuples(self, kind: int, columns: tuple[tuple[Any, ...], ...]) -> None:
        n = len(columns[0])
        self.offsets.append(pa.array(columns[0], pa.int64()))
        self.timestamps.append(pa.array(columns[1], pa.int64()))
        self.keys.append(pa.array(columns[2], pa.binary()))
        self.values.append(pa.array(columns[3], pa.binary()))
        if self.headers:
            self.header_lists.append(pa.array([list(h) if h else None for h in columns[4]], HEADERS_ARROW))
        self.kinds.append(pa.repeat(pa.scalar(kind, pa.int32()), n))
        self.rows += n

    def finish(self, topic: str, partition: int, schema: pa.Schema) -> pa.RecordBatch:
        """One record batch of everything added, in Spark's Kafka source's columns."""
        n = self.rows
        stamps = pa.concat_arrays(self.timestamps).view(pa.timestamp("ms", tz="UTC"))
        arrays = [
            pa.concat_arrays(self.keys),
            pa.concat_arrays(self.values),
            pa.repeat(pa.scalar(topic, pa.string()), n),
            pa.repeat(pa.scalar(partition, pa.int32()), n),
            pa.concat_arrays(self.offsets),
            stamps.cast(pa.timestamp("us", tz="UTC")),
            pa.concat_arrays(self.kinds),
        ]
        if self.headers:
            arrays.append(pa.concat_arrays(self.header_lists))
        return pa.RecordBatch.from_arrays(arrays, schema=schema)
