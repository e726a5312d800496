"""Many Avro values of one schema decoded at once into Arrow columns, each record's size checked.

fastavro decodes a record at a time into a Python dict: about 45,000 page views a second on one core here,
the hourly load's slowest part. Values that share a writer schema (the usual case: one schema id per
batch) are instead cut out of their Confluent framing (magic byte and schema id: 5 bytes), laid end to end
as the one block of an Avro object container file, and read by `polars_avro` (arrow-avro, compiled) into
columns with no Python object per record.

A block has no record boundaries, so a value with bytes left over followed by one short of as many would
read as two wrong records without any error. After the read, each record's encoded size is computed from
its decoded columns (Avro's binary encoding is a function of the values: zig-zag varints, length-prefixed
bytes, one branch index per union) and compared with its value's length: only when every record used
exactly its own bytes is the block's result taken. Otherwise (or for a type the size rule does not cover,
or when the read fails) the caller decodes record by record, which names each bad record.
"""

from __future__ import annotations

import io
import json
import os
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

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
    return polars_avro.read_avro(io.BytesIO(data)).to_arrow()


# -- each record's encoded size, from its decoded columns ------------------------------------------

_FIXED_SIZES = {"null": 0, "boolean": 1, "float": 4, "double": 8}
_VARINT_LIMITS = np.array([1 << (7 * k) for k in range(1, 10)], np.uint64)


class Unsupported(Exception):
    """A type the size rule does not cover: such schemas are decoded record by record."""


def _varint_sizes(numbers: np.ndarray) -> np.ndarray:
    """Bytes of each int64's zig-zag varint."""
    n = numbers.astype(np.int64)
    zigzag = ((n << 1) ^ (n >> 63)).astype(np.uint64)
    return 1 + (zigzag[:, None] >= _VARINT_LIMITS).sum(axis=1)


def _length_prefixed(lengths: np.ndarray) -> np.ndarray:
    return _varint_sizes(lengths) + lengths


def _ints(array: pa.Array) -> np.ndarray:
    if pa.types.is_timestamp(array.type) or pa.types.is_date(array.type):
        array = array.cast(pa.int64() if pa.types.is_timestamp(array.type) else pa.int32())
    return array.fill_null(0).to_numpy(zero_copy_only=False)


def encoded_sizes(schema: Any, array: pa.Array) -> np.ndarray:
    """Bytes each value of `array` takes in Avro's binary encoding of `schema` (a parsed schema)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if isinstance(schema, list):
        branches = [s for s in schema if s != "null"]
        if len(schema) != 2 or len(branches) != 1:
            raise Unsupported(f"union {schema}")
        present = array.is_valid().to_numpy(zero_copy_only=False)
        return 1 + np.where(present, encoded_sizes(branches[0], array), 0)
    kind = schema if isinstance(schema, str) else schema["type"]
    if isinstance(kind, (dict, list)):
        return encoded_sizes(kind, array)
    if kind in _FIXED_SIZES:
        return np.full(len(array), _FIXED_SIZES[kind], np.int64)
    if kind in ("int", "long"):
        return _varint_sizes(_ints(array))
    if kind in ("string", "bytes"):
        return _length_prefixed(pc.binary_length(array).fill_null(0).to_numpy(zero_copy_only=False))
    if kind == "fixed":
        return np.full(len(array), schema["size"], np.int64)
    if kind == "enum":
        if pa.types.is_dictionary(array.type):
            array = array.dictionary_decode()
        index = pc.index_in(array, value_set=pa.array(schema["symbols"], array.type))
        return _varint_sizes(index.fill_null(0).to_numpy(zero_copy_only=False))
    if kind == "record":
        sizes = np.zeros(len(array), np.int64)
        for position, field in enumerate(schema["fields"]):
            sizes += encoded_sizes(field["type"], array.field(position))
        return sizes
    if kind == "array":
        # One block (its count, then the items) when not empty, and the count 0 that ends the array.
        counts = np.diff(array.offsets.to_numpy()).astype(np.int64)
        item_sizes = encoded_sizes(schema["items"], array.flatten())
        totals = np.zeros(len(array), np.int64)
        nonempty = counts > 0
        starts = array.offsets.to_numpy()[:-1][nonempty] - array.offsets[0].as_py()
        if len(starts):
            totals[nonempty] = np.add.reduceat(item_sizes, starts)
        return np.where(nonempty, _varint_sizes(counts) + totals, 0) + 1
    raise Unsupported(f"type {kind}")


def table_sizes(schema: dict[str, Any], table: pa.Table) -> np.ndarray:
    """Each row's encoded size under the record schema `schema` (parsed)."""
    sizes = np.zeros(table.num_rows, np.int64)
    for field in schema["fields"]:
        sizes += encoded_sizes(field["type"], table.column(field["name"]))
    return sizes
