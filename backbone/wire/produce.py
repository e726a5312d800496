"""Produce in both directions, hand-written: the request (encoded by the client, decoded by the broker) and
the response (encoded by the broker, decoded by the client), v3-v12.

kio's writer (see `backbone.protocol.codec`) is Python walking dataclass fields: the encoders here are 5-10x
faster. kio's reader is native, but it copies every records blob, so its cost grows with the data: 20
partitions of 1 MiB take it ~10 ms, this decoder 20-40 us whatever the size. With 16 KiB batches kio's bare
reader is up to ~1.7x faster than this one, but `codec` must guard it with a schema walk on flexible
versions, and guarded it is slower (ops/bench/codec_bench.py). Every path here is checked byte for byte
against kio for every version it accepts (tests/unit/test_fast_paths.py, tests/unit/test_client_wire.py).

- `encode_produce_request` returns the body as chunks: the message's own fields as bytes with each
  partition's record batch passed through untouched, ready for `writelines`.
- `decode_produce_request`: the records of each partition come back as memoryview slices of the request
  buffer, never copied; the broker validates and appends them as they are.
- `encode_produce_response` builds the body in one buffer; `decode_produce_response` returns light
  dataclasses.

Flexible versions (9+) end every struct with a tagged-field section: we write empty ones (Produce's v10+
leader hints are not produced) and skip unknown tags when reading.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

from backbone.protocol.headers import MalformedMessage, encode_uvarint, read_uvarint, skip_tagged_fields
from backbone.wire import fields
from backbone.wire.fields import EMPTY_TAGS, Buffer, Reader, check_version, write_length, write_string

__all__ = [
    "PRODUCE_VERSIONS",
    "ProducePartition",
    "ProducePartitionResult",
    "ProduceRequestData",
    "ProduceTopic",
    "ProducedPartition",
    "decode_produce_request",
    "decode_produce_response",
    "encode_produce_request",
    "encode_produce_response",
]

PRODUCE_VERSIONS = range(3, 13)
_PRODUCE_FIRST_FLEXIBLE = 9

# The formats are bound here, not imported by name: CPython 3.11 compiles `NAME.pack(...)` on a name bound by
# an import without its method-call fast path (LOAD_METHOD), which made these encoders ~20% slower.
I16 = fields.I16
I16_I32 = fields.I16_I32
I16_I32_I32 = fields.I16_I32_I32
I32 = fields.I32
I32_I32 = fields.I32_I32
I64 = fields.I64

_I32_I16_I64_I64 = struct.Struct(">ihqq")
_I32_I16_I64_I64_I64 = struct.Struct(">ihqqq")
# v8+: no record errors and a null error message, by whether the version is flexible.
_NO_ERRORS = {True: encode_uvarint(1) + encode_uvarint(0), False: I32.pack(0) + I16.pack(-1)}
# What ends nearly every partition's answer from v8 on: no record errors, a null message and, flexible, no
# tags. The decoder recognises it in one comparison and skips it whole instead of reading field by field.
_PLAIN_TAIL = {True: _NO_ERRORS[True] + EMPTY_TAGS, False: _NO_ERRORS[False]}


# -- Produce request --------------------------------------------------------------------------


def encode_produce_request(
    version: int,
    acks: int,
    timeout_ms: int,
    topics: Sequence[tuple[str, Sequence[tuple[int, bytes | bytearray]]]],
    transactional_id: str | None = None,
) -> list[bytes | bytearray]:
    """The Produce request body as chunks; `topics` = [(name, [(partition, record batch bytes)])]."""
    check_version(version, PRODUCE_VERSIONS, "Produce request")
    flexible = version >= _PRODUCE_FIRST_FLEXIBLE
    chunks: list[bytes | bytearray] = []
    out = bytearray(write_string(flexible, transactional_id))
    out += I16_I32.pack(acks, timeout_ms)
    out += write_length(flexible, len(topics), I32)
    for name, partitions in topics:
        out += write_string(flexible, name)
        out += write_length(flexible, len(partitions), I32)
        for index, records in partitions:
            out += I32.pack(index)
            out += write_length(flexible, len(records), I32)
            chunks.append(bytes(out))
            chunks.append(records)
            out = bytearray(EMPTY_TAGS) if flexible else bytearray()
        if flexible:
            out += EMPTY_TAGS
    if flexible:
        out += EMPTY_TAGS
    if out:
        chunks.append(bytes(out))
    return chunks


@dataclass(slots=True)
class ProducePartition:
    index: int
    records: memoryview | None
    """A slice of the request buffer (not a copy); None when the client sent null records."""


@dataclass(slots=True)
class ProduceTopic:
    name: str
    partitions: list[ProducePartition]


@dataclass(slots=True)
class ProduceRequestData:
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topics: list[ProduceTopic]


def decode_produce_request(buf: Buffer, version: int, pos: int = 0) -> ProduceRequestData:
    """The Produce request body at `buf[pos:]` (v3-v12), records as zero-copy slices."""
    check_version(version, PRODUCE_VERSIONS, "Produce request")
    view = memoryview(buf).cast("B")
    decode = _decode_produce_flexible if version >= _PRODUCE_FIRST_FLEXIBLE else _decode_produce_legacy
    try:
        # Bytes after the last field are ignored, as Kafka ignores them (see codec).
        request, _end = decode(view, pos)
    except (struct.error, IndexError) as error:
        raise MalformedMessage(f"Produce request v{version} is truncated") from error
    except UnicodeDecodeError as error:
        raise MalformedMessage(f"string in Produce request is not valid UTF-8: {error}") from error
    return request


# The two decoders below are written out flat (no helper calls per field) because this runs for
# every Produce request: per-partition work is one unpack and one slice. Reads past the end raise
# struct.error or IndexError, which the caller turns into MalformedMessage; slices, which would
# silently come back short, are bounds-checked by hand.


def _decode_produce_legacy(buf: memoryview, pos: int) -> tuple[ProduceRequestData, int]:
    limit = len(buf)
    unpack_i16, unpack_i32, unpack_i32_i32 = I16.unpack_from, I32.unpack_from, I32_I32.unpack_from
    (size,) = unpack_i16(buf, pos)
    pos += 2
    transactional_id = None
    if size >= 0:
        if pos + size > limit:
            raise MalformedMessage("transactional id runs past the end")
        transactional_id = str(buf[pos : pos + size], "utf-8")
        pos += size
    acks, timeout_ms, topic_count = I16_I32_I32.unpack_from(buf, pos)
    pos += 10
    if topic_count < 0:
        raise MalformedMessage("null topic array in Produce request")
    topics = []
    for _ in range(topic_count):
        (size,) = unpack_i16(buf, pos)
        pos += 2
        if size < 0 or pos + size > limit:
            raise MalformedMessage("bad topic name length in Produce request")
        name = str(buf[pos : pos + size], "utf-8")
        pos += size
        (partition_count,) = unpack_i32(buf, pos)
        pos += 4
        if partition_count < 0:
            raise MalformedMessage("null partition array in Produce request")
        partitions = []
        for _ in range(partition_count):
            index, size = unpack_i32_i32(buf, pos)
            pos += 8
            records = None
            if size >= 0:
                end = pos + size
                if end > limit:
                    raise MalformedMessage("records run past the end of the Produce request")
                records = buf[pos:end]
                pos = end
            partitions.append(ProducePartition(index, records))
        topics.append(ProduceTopic(name, partitions))
    return ProduceRequestData(transactional_id, acks, timeout_ms, topics), pos


def _decode_produce_flexible(buf: memoryview, pos: int) -> tuple[ProduceRequestData, int]:
    limit = len(buf)
    unpack_i32 = I32.unpack_from
    size, pos = read_uvarint(buf, pos)  # compact lengths are n + 1; 0 is null
    transactional_id = None
    if size:
        size -= 1
        if pos + size > limit:
            raise MalformedMessage("transactional id runs past the end")
        transactional_id = str(buf[pos : pos + size], "utf-8")
        pos += size
    acks, timeout_ms = I16_I32.unpack_from(buf, pos)
    pos += 6
    topic_count, pos = read_uvarint(buf, pos)
    if not topic_count:
        raise MalformedMessage("null topic array in Produce request")
    topics = []
    for _ in range(topic_count - 1):
        size = buf[pos]
        if size < 0x80:
            pos += 1
        else:
            size, pos = read_uvarint(buf, pos)
        size -= 1
        if size < 0 or pos + size > limit:
            raise MalformedMessage("bad topic name length in Produce request")
        name = str(buf[pos : pos + size], "utf-8")
        pos += size
        partition_count, pos = read_uvarint(buf, pos)
        if not partition_count:
            raise MalformedMessage("null partition array in Produce request")
        partitions = []
        for _ in range(partition_count - 1):
            (index,) = unpack_i32(buf, pos)
            pos += 4
            # The records' compact length, a varint read inline (at most 5 bytes).
            byte = buf[pos]
            size = byte & 0x7F
            shift = 7
            pos += 1
            while byte & 0x80:
                if shift > 28:
                    raise MalformedMessage("varint longer than 5 bytes")
                byte = buf[pos]
                size |= (byte & 0x7F) << shift
                shift += 7
                pos += 1
            records = None
            if size:
                end = pos + size - 1
                if end > limit:
                    raise MalformedMessage("records run past the end of the Produce request")
                records = buf[pos:end]
                pos = end
            pos = pos + 1 if buf[pos] == 0 else skip_tagged_fields(buf, pos)
            partitions.append(ProducePartition(index, records))
        pos = pos + 1 if buf[pos] == 0 else skip_tagged_fields(buf, pos)
        topics.append(ProduceTopic(name, partitions))
    pos = pos + 1 if buf[pos] == 0 else skip_tagged_fields(buf, pos)
    return ProduceRequestData(transactional_id, acks, timeout_ms, topics), pos


# -- Produce response -------------------------------------------------------------------------


@dataclass(slots=True)
class ProducePartitionResult:
    index: int
    error_code: int = 0
    base_offset: int = -1
    log_append_time_ms: int = -1
    """-1 unless the topic uses LogAppendTime."""
    log_start_offset: int = -1
    record_errors: Sequence[tuple[int, str | None]] = ()
    """(batch index, message) for the records that failed the batch (v8+, KIP-467)."""
    error_message: str | None = None


def encode_produce_response(
    version: int,
    topics: Sequence[tuple[str, Sequence[ProducePartitionResult]]],
    throttle_time_ms: int = 0,
) -> bytes:
    """The Produce response body (v3-v12) for `topics` = [(name, [partition result, ...])]."""
    check_version(version, PRODUCE_VERSIONS, "Produce response")
    flexible = version >= _PRODUCE_FIRST_FLEXIBLE
    with_log_start = version >= 5
    with_errors = version >= 8
    no_errors = _NO_ERRORS[flexible]
    out = bytearray(write_length(flexible, len(topics), I32))
    for name, partitions in topics:
        out += write_string(flexible, name)
        out += write_length(flexible, len(partitions), I32)
        for part in partitions:
            if with_log_start:
                out += _I32_I16_I64_I64_I64.pack(
                    part.index,
                    part.error_code,
                    part.base_offset,
                    part.log_append_time_ms,
                    part.log_start_offset,
                )
            else:
                out += _I32_I16_I64_I64.pack(
                    part.index, part.error_code, part.base_offset, part.log_append_time_ms
                )
            if with_errors and not part.record_errors and part.error_message is None:
                out += no_errors  # nearly every answer: one append instead of four calls
            elif with_errors:
                out += write_length(flexible, len(part.record_errors), I32)
                for batch_index, message in part.record_errors:
                    out += I32.pack(batch_index)
                    out += write_string(flexible, message)
                    if flexible:
                        out += EMPTY_TAGS
                out += write_string(flexible, part.error_message)
            if flexible:
                out += EMPTY_TAGS
        if flexible:
            out += EMPTY_TAGS
    out += I32.pack(throttle_time_ms)
    if flexible:
        out += EMPTY_TAGS
    return bytes(out)


@dataclass(slots=True)
class ProducedPartition:
    topic: str
    partition: int
    error_code: int
    base_offset: int
    log_append_time_ms: int
    log_start_offset: int
    error_message: str | None = None
    record_errors: list[tuple[int, str | None]] = field(default_factory=list)


def decode_produce_response(version: int, buf: Buffer, pos: int = 0) -> list[ProducedPartition]:
    """Every partition result of a Produce response body (v3-v12)."""
    check_version(version, PRODUCE_VERSIONS, "Produce response")
    reader = Reader(buf, pos, version >= _PRODUCE_FIRST_FLEXIBLE)
    try:
        return _decode_produce(reader, version)
    except (struct.error, IndexError, UnicodeDecodeError) as error:
        raise MalformedMessage(f"Produce response v{version} is malformed: {error}") from error


def _decode_produce(reader: Reader, version: int) -> list[ProducedPartition]:
    results = []
    buf = reader.buf
    with_log_start = version >= 5
    plain_tail = _PLAIN_TAIL[reader.flexible]
    tail_size = len(plain_tail)
    for _ in range(max(reader.array_length(), 0)):
        topic = reader.string() or ""
        for _ in range(max(reader.array_length(), 0)):
            if with_log_start:
                index, error_code, base_offset, append_time, log_start = reader.unpack(_I32_I16_I64_I64_I64)
            else:
                index, error_code, base_offset, append_time = reader.unpack(_I32_I16_I64_I64)
                log_start = -1
            result = ProducedPartition(topic, index, error_code, base_offset, append_time, log_start)
            results.append(result)
            if version < 8:  # nothing follows (and nothing before v9 is flexible)
                continue
            if buf[reader.pos : reader.pos + tail_size] == plain_tail:
                reader.pos += tail_size
                continue
            for _ in range(max(reader.array_length(), 0)):
                (batch_index,) = reader.unpack(I32)
                result.record_errors.append((batch_index, reader.string()))
                reader.tags()
            result.error_message = reader.string()
            reader.tags()
        reader.tags()
    return results
