"""Hand-written client-side codecs for the hot messages: Produce request out, Produce and Fetch responses in.

These are the client's counterparts of the broker's `backbone.protocol.fast_paths` (which decodes Produce
requests and encodes the responses) and are checked against it and against kio in the unit tests. They
avoid kio for the messages that carry records: kio's writer walks dataclasses field by field and copies
every records blob, and its Fetch reader builds a dataclass per partition and copies the records again.

- `encode_produce_request` (v3-v12) returns the body as chunks: the message's own fields as bytes with
  each partition's record batch passed through untouched, ready for `writelines`.
- `decode_produce_response` (v3-v12) and `decode_fetch_response` (v4-v12) return light dataclasses; a
  Fetch partition's records come back as a slice of the response buffer, not a copy (a memoryview when
  the response is one, as the connection hands it over); `backbone.protocol.records.decode_batch` copies
  it a batch at a time as it decodes, while the copy is hot in the CPU's cache.

Flexible versions (Produce 9+, Fetch 12+) use compact lengths and tagged-field sections; unknown tags are
skipped as the protocol requires, and Fetch's CurrentLeader tag (1) is read because it tells a consumer
where a partition moved.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

# The writers, formats and version check are the broker-side fast paths' own: one spelling of the wire
# rules for both directions.
from backbone.protocol.fast_paths import (
    _EMPTY_TAGS,
    _I16,
    _I16_I32,
    _I32,
    _I32_I32,
    _I64,
    _I64_I64,
    FETCH_VERSIONS,
    PRODUCE_VERSIONS,
    _check_version,
    _length,
    _string,
)
from backbone.protocol.headers import MalformedMessage, read_uvarint, skip_tagged_fields

__all__ = [
    "FETCH_VERSIONS",
    "PRODUCE_VERSIONS",
    "FetchResponseData",
    "FetchedPartition",
    "ProducedPartition",
    "decode_fetch_response",
    "decode_produce_response",
    "encode_produce_request",
]

_PRODUCE_FIRST_FLEXIBLE = 9
_FETCH_FIRST_FLEXIBLE = 12

_I32_I16_I64_I64 = struct.Struct(">ihqq")
_I32_I16_I64_I64_I64 = struct.Struct(">ihqqq")

Buffer = bytes | bytearray | memoryview


def encode_produce_request(
    version: int,
    acks: int,
    timeout_ms: int,
    topics: Sequence[tuple[str, Sequence[tuple[int, bytes | bytearray]]]],
    transactional_id: str | None = None,
) -> list[bytes | bytearray]:
    """The Produce request body as chunks; `topics` = [(name, [(partition, record batch bytes)])]."""
    _check_version(version, PRODUCE_VERSIONS, "Produce request")
    flexible = version >= _PRODUCE_FIRST_FLEXIBLE
    chunks: list[bytes | bytearray] = []
    out = bytearray(_string(flexible, transactional_id))
    out += _I16_I32.pack(acks, timeout_ms)
    out += _length(flexible, len(topics), _I32)
    for name, partitions in topics:
        out += _string(flexible, name)
        out += _length(flexible, len(partitions), _I32)
        for index, records in partitions:
            out += _I32.pack(index)
            out += _length(flexible, len(records), _I32)
            chunks.append(bytes(out))
            chunks.append(records)
            out = bytearray(_EMPTY_TAGS) if flexible else bytearray()
        if flexible:
            out += _EMPTY_TAGS
    if flexible:
        out += _EMPTY_TAGS
    if out:
        chunks.append(bytes(out))
    return chunks


# -- a small reader shared by the response decoders -------------------------------------------------


class _Reader:
    """Reads legacy or compact fields from a response body; any overrun raises MalformedMessage."""

    __slots__ = ("buf", "flexible", "pos")

    def __init__(self, buf: Buffer, pos: int, flexible: bool) -> None:
        self.buf = buf
        self.pos = pos
        self.flexible = flexible

    def unpack(self, fmt: struct.Struct) -> tuple[int, ...]:
        values = fmt.unpack_from(self.buf, self.pos)
        self.pos += fmt.size
        return values

    def length(self, legacy: struct.Struct) -> int:
        """An array, string or bytes length; -1 is null."""
        if self.flexible:
            raw, self.pos = read_uvarint(self.buf, self.pos)
            return raw - 1
        (size,) = legacy.unpack_from(self.buf, self.pos)
        self.pos += legacy.size
        return size

    def array_length(self) -> int:
        size = self.length(_I32)
        if size > len(self.buf) - self.pos:
            raise MalformedMessage(f"array of {size} elements in {len(self.buf) - self.pos} bytes")
        return size

    def string(self) -> str | None:
        size = self.length(_I16)
        if size < 0:
            return None
        end = self.pos + size
        if end > len(self.buf):
            raise MalformedMessage("string runs past the end of the response")
        value = str(self.buf[self.pos : end], "utf-8")
        self.pos = end
        return value

    def tags(self) -> None:
        if self.flexible:
            self.pos = skip_tagged_fields(self.buf, self.pos)


# -- Produce response ---------------------------------------------------------------------------


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
    _check_version(version, PRODUCE_VERSIONS, "Produce response")
    reader = _Reader(buf, pos, version >= _PRODUCE_FIRST_FLEXIBLE)
    try:
        return _decode_produce(reader, version)
    except (struct.error, IndexError, UnicodeDecodeError) as error:
        raise MalformedMessage(f"Produce response v{version} is malformed: {error}") from error


def _decode_produce(reader: _Reader, version: int) -> list[ProducedPartition]:
    results = []
    for _ in range(max(reader.array_length(), 0)):
        topic = reader.string() or ""
        for _ in range(max(reader.array_length(), 0)):
            index, error_code, base_offset, append_time = reader.unpack(_I32_I16_I64_I64)
            log_start = reader.unpack(_I64)[0] if version >= 5 else -1
            result = ProducedPartition(topic, index, error_code, base_offset, append_time, log_start)
            if version >= 8:
                for _ in range(max(reader.array_length(), 0)):
                    (batch_index,) = reader.unpack(_I32)
                    result.record_errors.append((batch_index, reader.string()))
                    reader.tags()
                result.error_message = reader.string()
            reader.tags()
            results.append(result)
        reader.tags()
    return results


# -- Fetch response -----------------------------------------------------------------------------


@dataclass(slots=True)
class FetchedPartition:
    partition: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: list[tuple[int, int]] | None
    """(producer id, first offset) of aborted transactions in the range (read_committed only)."""
    preferred_read_replica: int
    records: Buffer | None
    """A slice of the response buffer: a view keeps the whole response frame alive while it is held."""
    current_leader: tuple[int, int] | None = None
    """(leader id, leader epoch) a broker names with NOT_LEADER/FENCED errors (v12+)."""


@dataclass(slots=True)
class FetchResponseData:
    throttle_time_ms: int
    error_code: int
    session_id: int
    topics: list[tuple[str, list[FetchedPartition]]]


def decode_fetch_response(version: int, buf: Buffer, pos: int = 0) -> FetchResponseData:
    """A Fetch response body (v4-v12); each partition's records are a slice of `buf`, not a copy."""
    _check_version(version, FETCH_VERSIONS, "Fetch response")
    reader = _Reader(buf, pos, version >= _FETCH_FIRST_FLEXIBLE)
    try:
        return _decode_fetch(reader, version)
    except (struct.error, IndexError, UnicodeDecodeError) as error:
        raise MalformedMessage(f"Fetch response v{version} is malformed: {error}") from error


def _decode_fetch(reader: _Reader, version: int) -> FetchResponseData:
    (throttle,) = reader.unpack(_I32)
    error_code, session_id = reader.unpack(_I16_I32) if version >= 7 else (0, 0)
    topics = []
    for _ in range(max(reader.array_length(), 0)):
        name = reader.string() or ""
        partitions = [_decode_fetch_partition(reader, version) for _ in range(max(reader.array_length(), 0))]
        reader.tags()
        topics.append((name, partitions))
    reader.tags()
    return FetchResponseData(throttle, error_code, session_id, topics)


def _decode_fetch_partition(reader: _Reader, version: int) -> FetchedPartition:
    if version >= 5:
        index, error_code, high_watermark, last_stable, log_start = reader.unpack(_I32_I16_I64_I64_I64)
    else:
        index, error_code, high_watermark, last_stable = reader.unpack(_I32_I16_I64_I64)
        log_start = -1
    count = reader.length(_I32)
    aborted: list[tuple[int, int]] | None = None
    if count >= 0:
        aborted = []
        for _ in range(count):
            aborted.append(reader.unpack(_I64_I64))  # type: ignore[arg-type]
            reader.tags()
    preferred = reader.unpack(_I32)[0] if version >= 11 else -1
    size = reader.length(_I32)
    records = None
    if size >= 0:
        end = reader.pos + size
        if end > len(reader.buf):
            raise MalformedMessage("records run past the end of the Fetch response")
        # No copy: copying up to max.partition.fetch.bytes per partition and answer took ~5% of a consumer.
        records = reader.buf[reader.pos : end]
        reader.pos = end
    result = FetchedPartition(
        index, error_code, high_watermark, last_stable, log_start, aborted, preferred, records
    )
    if reader.flexible:
        _read_partition_tags(reader, result)
    return result


def _read_partition_tags(reader: _Reader, result: FetchedPartition) -> None:
    count, reader.pos = read_uvarint(reader.buf, reader.pos)
    for _ in range(count):
        tag, reader.pos = read_uvarint(reader.buf, reader.pos)
        size, reader.pos = read_uvarint(reader.buf, reader.pos)
        end = reader.pos + size
        if end > len(reader.buf):
            raise MalformedMessage("tagged field runs past the end of the Fetch response")
        if tag == 1 and size >= _I32_I32.size:  # CurrentLeader: leader id, leader epoch, tags
            leader_id, epoch = _I32_I32.unpack_from(reader.buf, reader.pos)
            result.current_leader = (leader_id, epoch)
        reader.pos = end
