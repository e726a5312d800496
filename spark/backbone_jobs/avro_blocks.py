"""Many Avro values of one schema decoded at once into Arrow columns, each record's bounds checked first.

fastavro decodes a record at a time into a Python dict: about 45,000 page views a second on one core here,
the hourly load's slowest part. Values that share a writer schema (the usual case: one schema id per
batch) are instead cut out of their Confluent framing (magic byte and schema id: 5 bytes), laid end to end
as the one block of an Avro object container file, and read by `polars_avro` (arrow-avro, compiled) into
columns with no Python object per record.

A block has no record boundaries, so the values are checked first: every record is walked from its own
value's start through its schema's fields at once (numpy, a field at a time: varints, lengths, union
branches, enum symbols, array blocks), and only when each ends exactly at its value's end is the block
read. Otherwise a value with bytes left over followed by one short of as many would read as two wrong
records without any error, and bytes left over at the end of the block make `polars_avro` 0.13 loop
forever (seen here). A batch that fails the walk, or whose read fails, is decoded record by record by the
caller, which names each bad record.
"""

from __future__ import annotations

import io
import json
import os
from typing import Any

import numpy as np
import pyarrow as pa

from backbone_spark.walk import ALL, Rows, Walk, subset

FRAMING = 5  # Confluent's wire format: magic byte 0, then the schema id (4 bytes, big-endian)
_SYNC = os.urandom(16)


def _zigzag_varint(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _container_header(schema: dict[str, Any]) -> bytes:
    meta = {"avro.schema": json.dumps(schema).encode(), "avro.codec": b"null"}
    out = bytearray(b"Obj\x01") + _zigzag_varint(len(meta))
    for key, value in meta.items():
        out += _zigzag_varint(len(key)) + key.encode() + _zigzag_varint(len(value)) + value
    return bytes(out + _zigzag_varint(0) + _SYNC)


def framed_body(values: pa.Array) -> tuple[int, bytes, np.ndarray] | None:
    """(the one schema id, the values without their framing end to end, each record's length), or None
    when the values are not all framed with one schema id (nulls, short or foreign values, mixed ids)."""
    if len(values) == 0 or values.null_count or not pa.types.is_binary(values.type):
        return None
    offsets = np.frombuffer(values.buffers()[1], np.int32)[values.offset : values.offset + len(values) + 1]
    lengths = np.diff(offsets) - FRAMING
    if (lengths < 0).any():
        return None
    data = np.frombuffer(values.buffers()[2], np.uint8)[offsets[0] : offsets[-1]]
    starts = offsets[:-1] - offsets[0]
    prefixes = data[starts[:, None] + np.arange(FRAMING)]
    ids = prefixes[:, 1:].astype(np.uint32) @ np.array([1 << 24, 1 << 16, 1 << 8, 1], np.uint32)
    if (prefixes[:, 0] != 0).any() or (ids != ids[0]).any():
        return None
    keep = np.ones(len(data), bool)
    keep[(starts[:, None] + np.arange(FRAMING)).ravel()] = False
    return int(ids[0]), data[keep].tobytes(), lengths


def read_block(schema: dict[str, Any], count: int, body: bytes) -> pa.Table:
    """`count` records of `schema` laid end to end, read as one container block. Raises on bad bytes."""
    import polars_avro  # the decoding workers' import, not every user of this package's

    data = _container_header(schema) + _zigzag_varint(count) + _zigzag_varint(len(body)) + body + _SYNC
    try:
        return polars_avro.read_avro(io.BytesIO(data)).to_arrow()
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as error:  # a Rust panic comes as pyo3's PanicException, a BaseException
        raise ValueError(f"the block did not read: {error!r}") from error


# -- where each record ends: every record walked at once, field by field -----------------------------

_PRIMITIVE_SIZES = {"null": 0, "boolean": 1, "float": 4, "double": 8}


class Unsupported(Exception):
    """A schema the walk does not know (a named type it has not seen): decoded record by record."""


class _AvroWalk(Walk):
    """Records walked through an Avro schema's fields. A record whose bytes run out, or hold what its
    schema forbids (a union branch or enum symbol that is not there, a negative length), is marked bad."""

    def __init__(self, data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
        super().__init__(data, starts, ends)
        self.named: dict[str, Any] = {}

    def skip(self, schema: Any, rows: Rows) -> None:
        """Move `rows` past one value of `schema` (parsed) each."""
        if isinstance(rows, slice):  # every record, while all are whole
            if not self.ok.all():
                rows = np.flatnonzero(self.ok)
        elif not len(rows := rows[self.ok[rows]]):
            return
        if isinstance(schema, list):
            branch = self.varint(rows)
            self.ok[rows] &= (branch >= 0) & (branch < len(schema))
            for index, choice in enumerate(schema):
                self.skip(choice, subset(rows, branch == index))
            return
        kind = schema if isinstance(schema, str) else schema["type"]
        if isinstance(kind, (dict, list)):
            self.skip(kind, rows)
        elif kind in _PRIMITIVE_SIZES:
            self.advance(rows, _PRIMITIVE_SIZES[kind])
        elif kind in ("int", "long"):
            self.varint(rows)
        elif kind in ("string", "bytes"):
            length = self.varint(rows)
            self.ok[rows] &= length >= 0
            self.advance(rows, np.maximum(length, 0))
        elif kind == "fixed":
            self.named[schema["name"]] = schema
            self.advance(rows, schema["size"])
        elif kind == "enum":
            self.named[schema["name"]] = schema
            symbol = self.varint(rows)
            self.ok[rows] &= (symbol >= 0) & (symbol < len(schema["symbols"]))
        elif kind == "record":
            self.named[schema["name"]] = schema
            for field in schema["fields"]:
                self.skip(field["type"], rows)
        elif kind in ("array", "map"):
            self._blocks(schema, rows)
        elif kind in self.named:
            self.skip(self.named[kind], rows)
        else:
            raise Unsupported(f"type {kind}")

    def _blocks(self, schema: Any, rows: Rows) -> None:
        """An array's or a map's blocks: a count (negative: then a byte size), the items; 0 ends."""
        if isinstance(rows, slice):
            rows = np.arange(len(self.at))
        while len(rows := rows[self.ok[rows]]):
            count = self.varint(rows)
            sized = count < 0
            if sized.any():
                self.varint(rows[sized])
            count = np.abs(count)
            # Every item takes a byte at least (but null ones): more items than bytes left is not a record.
            self.ok[rows] &= count <= self.ends[rows] - self.at[rows]
            count = np.where(self.ok[rows], count, 0)
            for item in range(int(count.max(initial=0))):
                taking = rows[count > item]
                if schema["type"] == "map":
                    self.skip("string", taking)
                    self.skip(schema["values"], taking)
                else:
                    self.skip(schema["items"], taking)
            rows = rows[count != 0]


def records_fill_their_values(schema: Any, body: bytes, lengths: np.ndarray) -> bool:
    """Whether each record of `schema` (parsed), read from its own value's start in `body`, ends exactly
    at its value's end: then the values read as one block are those records and nothing else."""
    ends = np.cumsum(lengths)
    walk = _AvroWalk(np.frombuffer(body, np.uint8), ends - lengths, ends)
    walk.skip(schema, ALL)
    return bool(walk.ok.all() and (walk.at == walk.ends).all())
