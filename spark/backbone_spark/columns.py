"""Fetched records to Arrow columns, without a Python object per record where the decoder allows it.

The consumer's decoder leaves most of a batch as uniform runs: records laid out alike, every field at the
same place in each (see `backbone.protocol.record_runs`). A run's keys and values are cut out of the
fetched bytes for the whole run at once (one strided numpy copy per column, straight into an Arrow
buffer), its offsets are a range and its timestamps a table lookup. Records outside runs (headers, sizes
that vary) come as plain tuples and are transposed (`zip(*records)`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from backbone.protocol.record_runs import UniformRun
from backbone.protocol.records import LazyRecords

__all__ = ["ColumnBuilder"]

_HEADER = pa.struct([("key", pa.string()), ("value", pa.binary())])
HEADERS_ARROW = pa.list_(pa.field("element", _HEADER))


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
            if isinstance(part, UniformRun):
                keep = min(part.n, until - part.first_offset)
                if keep > 0:
                    self._add_run(kind, part.cut(0, keep) if keep < part.n else part)
                if keep < part.n:
                    return True
            elif part:
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
