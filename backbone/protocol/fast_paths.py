"""Hand-written codecs for the three hot messages: Produce request, Produce and Fetch responses.

kio's writer (see `codec`) is Python walking dataclass fields: the encoders here are 5-10x
faster. kio's reader is native, but it copies every records blob, so its cost grows with the
data: 20 partitions of 1 MiB take it ~10 ms, this decoder 20-40 us whatever the size. With
16 KiB batches kio's bare reader is up to ~1.7x faster than this one, but `codec` must guard it
with a schema walk on flexible versions, and guarded it is slower (ops/bench/codec_bench.py).
Every path here is checked byte for byte against kio for every version it accepts
(tests/unit/test_fast_paths.py).

- `decode_produce_request` (v3-v12): the records of each partition come back as memoryview
  slices of the request buffer, never copied; the broker validates and appends them as they are.
- `encode_produce_response` (v3-v12) builds the body in one buffer.
- `encode_fetch_response` (v4-v12) returns the body as a list of chunks: bytes for the
  response's own fields and, in place of each partition's records, whatever the caller supplied
  (bytes, a memoryview, or a file region: any object with a `length` attribute). Every length
  field is computed from those, so the broker can write the frame prefix and header
  (`frame_chunks`), the byte chunks, and `sendfile` the regions without ever holding the records
  in memory. Versions from 13 on name topics by ID and are not accepted.

Flexible versions (Produce 9+, Fetch 12+) use compact lengths and end every struct with a
tagged-field section. We write empty sections except Fetch's DivergingEpoch (tag 0) and
CurrentLeader (tag 1) when given and different from their defaults, which is when Kafka writes
them; Produce's v10+ leader hints and Fetch's SnapshotId (KRaft) are not produced. When reading,
unknown tags are skipped.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeAlias, runtime_checkable

from backbone.protocol.errors import UnsupportedVersionError
from backbone.protocol.framing import frame_prefix
from backbone.protocol.headers import (
    MalformedMessage,
    encode_response_header,
    encode_uvarint,
    read_uvarint,
    skip_tagged_fields,
)

__all__ = [
    "FETCH_VERSIONS",
    "PRODUCE_VERSIONS",
    "Chunk",
    "FetchPartitionResult",
    "ProducePartition",
    "ProducePartitionResult",
    "ProduceRequestData",
    "ProduceTopic",
    "RecordsRegion",
    "chunk_length",
    "decode_produce_request",
    "encode_fetch_response",
    "encode_produce_response",
    "frame_chunks",
]

PRODUCE_VERSIONS = range(3, 13)
FETCH_VERSIONS = range(4, 13)
_PRODUCE_FIRST_FLEXIBLE = 9
_FETCH_FIRST_FLEXIBLE = 12

Buffer: TypeAlias = bytes | bytearray | memoryview

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I16_I32 = struct.Struct(">hi")
_I16_I32_I32 = struct.Struct(">hii")
_I32_I16_I64 = struct.Struct(">ihq")
_I64 = struct.Struct(">q")
_I64_I64 = struct.Struct(">qq")
_I32_I64 = struct.Struct(">iq")
_I32_I32 = struct.Struct(">ii")
_EMPTY_TAGS = b"\x00"
_NULL_I16 = _I16.pack(-1)
_NULL_I32 = _I32.pack(-1)


def _check_version(version: int, accepted: range, what: str) -> None:
    if version not in accepted:
        raise UnsupportedVersionError(
            f"{what} fast path handles versions {accepted.start}-{accepted.stop - 1}, not {version}"
        )


# -- Produce request --------------------------------------------------------------------------


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
    _check_version(version, PRODUCE_VERSIONS, "Produce request")
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
    unpack_i16, unpack_i32, unpack_i32_i32 = _I16.unpack_from, _I32.unpack_from, _I32_I32.unpack_from
    (size,) = unpack_i16(buf, pos)
    pos += 2
    transactional_id = None
    if size >= 0:
        if pos + size > limit:
            raise MalformedMessage("transactional id runs past the end")
        transactional_id = str(buf[pos : pos + size], "utf-8")
        pos += size
    acks, timeout_ms, topic_count = _I16_I32_I32.unpack_from(buf, pos)
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
    unpack_i32 = _I32.unpack_from
    size, pos = read_uvarint(buf, pos)  # compact lengths are n + 1; 0 is null
    transactional_id = None
    if size:
        size -= 1
        if pos + size > limit:
            raise MalformedMessage("transactional id runs past the end")
        transactional_id = str(buf[pos : pos + size], "utf-8")
        pos += size
    acks, timeout_ms = _I16_I32.unpack_from(buf, pos)
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


# -- shared writers ---------------------------------------------------------------------------


def _length(flexible: bool, size: int, legacy: struct.Struct) -> bytes:
    """A length prefix (-1 for null): compact uvarint(n + 1) or `legacy`."""
    return encode_uvarint(size + 1) if flexible else legacy.pack(size)


def _string(flexible: bool, value: str | None) -> bytes:
    if value is None:
        return _length(flexible, -1, _I16)
    raw = value.encode("utf-8")
    return _length(flexible, len(raw), _I16) + raw


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
    _check_version(version, PRODUCE_VERSIONS, "Produce response")
    flexible = version >= _PRODUCE_FIRST_FLEXIBLE
    with_log_start = version >= 5
    with_errors = version >= 8
    out = bytearray(_length(flexible, len(topics), _I32))
    for name, partitions in topics:
        out += _string(flexible, name)
        out += _length(flexible, len(partitions), _I32)
        for part in partitions:
            out += _I32_I16_I64.pack(part.index, part.error_code, part.base_offset)
            out += _I64.pack(part.log_append_time_ms)
            if with_log_start:
                out += _I64.pack(part.log_start_offset)
            if with_errors:
                out += _length(flexible, len(part.record_errors), _I32)
                for batch_index, message in part.record_errors:
                    out += _I32.pack(batch_index)
                    out += _string(flexible, message)
                    if flexible:
                        out += _EMPTY_TAGS
                out += _string(flexible, part.error_message)
            if flexible:
                out += _EMPTY_TAGS
        if flexible:
            out += _EMPTY_TAGS
    out += _I32.pack(throttle_time_ms)
    if flexible:
        out += _EMPTY_TAGS
    return bytes(out)


# -- Fetch response ---------------------------------------------------------------------------


@runtime_checkable
class RecordsRegion(Protocol):
    """Records that stay where they are (a file region); only their length is needed here."""

    @property
    def length(self) -> int: ...


Records: TypeAlias = bytes | bytearray | memoryview | RecordsRegion
Chunk: TypeAlias = bytes | bytearray | memoryview | RecordsRegion


def chunk_length(chunk: Chunk) -> int:
    if isinstance(chunk, bytes | bytearray):
        return len(chunk)
    if isinstance(chunk, memoryview):
        return chunk.nbytes
    return chunk.length


@dataclass(slots=True)
class FetchPartitionResult:
    partition_index: int
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted_transactions: Sequence[tuple[int, int]] | None = None
    """(producer id, first offset) pairs; None is sent as a null array."""
    preferred_read_replica: int = -1
    records: Records | None = None
    diverging_epoch: tuple[int, int] | None = None
    """(epoch, end offset) when the follower's log diverged (v12+, KIP-595)."""
    current_leader: tuple[int, int] | None = None
    """(leader id, leader epoch) with NOT_LEADER/FENCED errors (v12+)."""


def encode_fetch_response(
    version: int,
    topics: Sequence[tuple[str, Sequence[FetchPartitionResult]]],
    *,
    throttle_time_ms: int = 0,
    error_code: int = 0,
    session_id: int = 0,
) -> list[Chunk]:
    """The Fetch response body (v4-v12) as chunks; the records objects are passed through."""
    _check_version(version, FETCH_VERSIONS, "Fetch response")
    flexible = version >= _FETCH_FIRST_FLEXIBLE
    with_log_start = version >= 5
    with_replica = version >= 11
    chunks: list[Chunk] = []
    out = bytearray(_I32.pack(throttle_time_ms))
    if version >= 7:
        out += _I16_I32.pack(error_code, session_id)
    out += _length(flexible, len(topics), _I32)
    for name, partitions in topics:
        out += _string(flexible, name)
        out += _length(flexible, len(partitions), _I32)
        for part in partitions:
            out += _I32_I16_I64.pack(part.partition_index, part.error_code, part.high_watermark)
            out += _I64.pack(part.last_stable_offset)
            if with_log_start:
                out += _I64.pack(part.log_start_offset)
            aborted = part.aborted_transactions
            if aborted is None:
                out += _length(flexible, -1, _I32)
            else:
                out += _length(flexible, len(aborted), _I32)
                for producer_id, first_offset in aborted:
                    out += _I64_I64.pack(producer_id, first_offset)
                    if flexible:
                        out += _EMPTY_TAGS
            if with_replica:
                out += _I32.pack(part.preferred_read_replica)
            records = part.records
            if records is None:
                out += _length(flexible, -1, _I32)
            else:
                size = chunk_length(records)
                out += _length(flexible, size, _I32)
                if size:  # empty records stay out of the list: no zero-length writes
                    chunks.append(bytes(out))
                    chunks.append(records)
                    out = bytearray()
            if flexible:
                out += _partition_tags(part)
        if flexible:
            out += _EMPTY_TAGS
    if flexible:
        out += _EMPTY_TAGS
    if out:
        chunks.append(bytes(out))
    return chunks


def _partition_tags(part: FetchPartitionResult) -> bytes:
    tags = []
    if part.diverging_epoch is not None and part.diverging_epoch != (-1, -1):
        tags.append((0, _I32_I64.pack(*part.diverging_epoch) + _EMPTY_TAGS))
    if part.current_leader is not None and part.current_leader != (-1, -1):
        tags.append((1, _I32_I32.pack(*part.current_leader) + _EMPTY_TAGS))
    if not tags:
        return _EMPTY_TAGS
    out = bytearray(encode_uvarint(len(tags)))
    for tag, value in tags:
        out += encode_uvarint(tag) + encode_uvarint(len(value)) + value
    return bytes(out)


# Byte chunks are joined while the result stays this small: a small response goes out in one write (one
# system call, one wake-up of the reader) rather than one per chunk; larger ones are not copied.
_JOIN_LIMIT = 64 * 1024


def frame_chunks(correlation_id: int, header_version: int, body: Sequence[Chunk]) -> list[Chunk]:
    """Size prefix + response header + `body`; each byte chunk joined to the one before it while that
    stays within 64 KiB (a whole Produce response is one chunk), regions left as they are."""
    header = encode_response_header(correlation_id, header_version)
    size = len(header) + sum(chunk_length(chunk) for chunk in body)
    chunks: list[Chunk] = [frame_prefix(size) + header]
    for chunk in body:
        last = chunks[-1]
        if (
            isinstance(chunk, Buffer)
            and isinstance(last, bytes)
            and len(last) + chunk_length(chunk) <= _JOIN_LIMIT
        ):
            chunks[-1] = last + chunk
        else:
            chunks.append(chunk)
    return chunks
