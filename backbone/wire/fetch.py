"""Fetch, hand-written: the request as fetchers encode it (our consumer, the broker's replica fetchers), and
the response in both directions, encoded by the broker and decoded by the fetchers (v4-v12; versions from
13 on name topics by ID and are not accepted).

- `encode_fetch_request` builds the body in one buffer. kio's writer walks dataclasses in Python and took
  a tenth of a busy follower's time; every version is checked byte for byte against kio
  (tests/unit/test_client_wire.py).

- `encode_fetch_response` returns the body as a list of chunks (`backbone.wire.chunks`): bytes for the
  response's own fields and, in place of each partition's records, whatever the caller supplied (bytes, a
  memoryview, or a file region). Every length field is computed from those, so the broker can `sendfile`
  the regions without ever holding the records in memory.
- `decode_fetch_response` returns light dataclasses; a partition's records come back as a slice of the
  response buffer, not a copy (a memoryview when the response is one, as the connection hands it over);
  `backbone.protocol.records.decode_batch` copies it a batch at a time as it decodes, while the copy is
  hot in the CPU's cache. kio's reader would build a dataclass per partition and copy the records again.

Flexible versions (12+) use compact lengths and tagged-field sections. We write empty sections except
DivergingEpoch (tag 0) and CurrentLeader (tag 1) when given and different from their defaults, which is
when Kafka writes them (SnapshotId, KRaft's, is not produced); when reading, unknown tags are skipped and
CurrentLeader is read because it tells a consumer where a partition moved.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

from backbone.protocol.headers import MalformedMessage, encode_uvarint, read_uvarint
from backbone.wire import fields
from backbone.wire.chunks import Chunk, Records, chunk_length
from backbone.wire.fields import EMPTY_TAGS, Buffer, Reader, check_version, write_length, write_string

__all__ = [
    "FETCH_VERSIONS",
    "FetchPartitionResult",
    "FetchRequestPartition",
    "FetchResponseData",
    "FetchedPartition",
    "decode_fetch_response",
    "encode_fetch_request",
    "encode_fetch_response",
]

FETCH_VERSIONS = range(4, 13)
_FETCH_FIRST_FLEXIBLE = 12

# The formats are bound here, not imported by name: CPython 3.11 compiles `NAME.pack(...)` on a name bound by
# an import without its method-call fast path (LOAD_METHOD), which made these encoders ~20% slower.
I16_I32 = fields.I16_I32
I32 = fields.I32
I32_I16_I64 = fields.I32_I16_I64
I32_I32 = fields.I32_I32
I32_I64 = fields.I32_I64
I64 = fields.I64
I64_I64 = fields.I64_I64

_I32_I16_I64_I64 = struct.Struct(">ihqq")
_I32_I16_I64_I64_I64 = struct.Struct(">ihqqq")
_I32_I32_I32_I32_I8 = struct.Struct(">iiiib")
_I32_I32_I64 = struct.Struct(">iiq")
_I32_I64_I32 = struct.Struct(">iqi")
_I64_I32 = struct.Struct(">qi")

T = TypeVar("T")
K = TypeVar("K", bound=tuple[str, int])  # a partition: (topic, index), or a TopicPartition


# -- the fetcher's request ---------------------------------------------------------------------


class FetchRequestPartition(NamedTuple):
    """One partition of a Fetch request as a fetcher names it (a fetch session compares these rows)."""

    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1  # v9+; -1: the fetcher does not fence
    log_start_offset: int = -1  # v5+; a follower's, -1 for a consumer


def encode_fetch_request(
    version: int,
    *,
    replica_id: int,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    isolation_level: int,
    partitions: Mapping[K, FetchRequestPartition],
    session_id: int = 0,
    session_epoch: int = -1,
    forgotten: Iterable[K] = (),
    rack_id: str = "",
) -> bytes:
    """The Fetch request body (v4-v12) asking for `partitions`, keyed by (topic, index), and forgetting the
    `forgotten` ones (v7+). The last fetched epoch (v12+) is sent as -1: unknown."""
    check_version(version, FETCH_VERSIONS, "Fetch request")
    topics = _by_topic((key[0], asked) for key, asked in partitions.items())
    flexible = version >= _FETCH_FIRST_FLEXIBLE
    with_epoch = version >= 9
    with_log_start = version >= 5
    out = bytearray(_I32_I32_I32_I32_I8.pack(replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level))
    if version >= 7:
        out += I32_I32.pack(session_id, session_epoch)
    out += write_length(flexible, len(topics), I32)
    for name, asked_partitions in topics:
        out += write_string(flexible, name)
        out += write_length(flexible, len(asked_partitions), I32)
        for asked in asked_partitions:
            if with_epoch:
                out += _I32_I32_I64.pack(asked.partition, asked.current_leader_epoch, asked.fetch_offset)
            else:
                out += I32_I64.pack(asked.partition, asked.fetch_offset)
            if flexible:
                out += _I32_I64_I32.pack(-1, asked.log_start_offset, asked.partition_max_bytes)
                out += EMPTY_TAGS
            elif with_log_start:
                out += _I64_I32.pack(asked.log_start_offset, asked.partition_max_bytes)
            else:
                out += I32.pack(asked.partition_max_bytes)
        if flexible:
            out += EMPTY_TAGS
    if version >= 7:
        dropped = _by_topic(forgotten)
        out += write_length(flexible, len(dropped), I32)
        for name, indexes in dropped:
            out += write_string(flexible, name)
            out += write_length(flexible, len(indexes), I32)
            for index in indexes:
                out += I32.pack(index)
            if flexible:
                out += EMPTY_TAGS
    if version >= 11:
        out += write_string(flexible, rack_id)
    if flexible:
        out += EMPTY_TAGS
    return bytes(out)


def _by_topic(pairs: Iterable[tuple[str, T]]) -> list[tuple[str, list[T]]]:
    """(topic, item) pairs grouped by topic, in order of first appearance."""
    grouped: dict[str, list[T]] = {}
    for topic, item in pairs:
        grouped.setdefault(topic, []).append(item)
    return list(grouped.items())


# -- the broker's side --------------------------------------------------------------------------


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
    check_version(version, FETCH_VERSIONS, "Fetch response")
    flexible = version >= _FETCH_FIRST_FLEXIBLE
    with_log_start = version >= 5
    with_replica = version >= 11
    chunks: list[Chunk] = []
    out = bytearray(I32.pack(throttle_time_ms))
    if version >= 7:
        out += I16_I32.pack(error_code, session_id)
    out += write_length(flexible, len(topics), I32)
    for name, partitions in topics:
        out += write_string(flexible, name)
        out += write_length(flexible, len(partitions), I32)
        for part in partitions:
            out += I32_I16_I64.pack(part.partition_index, part.error_code, part.high_watermark)
            out += I64.pack(part.last_stable_offset)
            if with_log_start:
                out += I64.pack(part.log_start_offset)
            aborted = part.aborted_transactions
            out += write_length(flexible, -1 if aborted is None else len(aborted), I32)
            for producer_id, first_offset in aborted or ():
                out += I64_I64.pack(producer_id, first_offset)
                if flexible:
                    out += EMPTY_TAGS
            if with_replica:
                out += I32.pack(part.preferred_read_replica)
            records = part.records
            size = -1 if records is None else chunk_length(records)
            out += write_length(flexible, size, I32)
            if records is not None and size:  # empty records stay out of the list: no zero-length writes
                chunks.append(bytes(out))
                chunks.append(records)
                out = bytearray()
            if flexible:
                out += _partition_tags(part)
        if flexible:
            out += EMPTY_TAGS
    if flexible:
        out += EMPTY_TAGS
    if out:
        chunks.append(bytes(out))
    return chunks


def _partition_tags(part: FetchPartitionResult) -> bytes:
    tags = []
    if part.diverging_epoch is not None and part.diverging_epoch != (-1, -1):
        tags.append((0, I32_I64.pack(*part.diverging_epoch) + EMPTY_TAGS))
    if part.current_leader is not None and part.current_leader != (-1, -1):
        tags.append((1, I32_I32.pack(*part.current_leader) + EMPTY_TAGS))
    if not tags:
        return EMPTY_TAGS
    out = bytearray(encode_uvarint(len(tags)))
    for tag, value in tags:
        out += encode_uvarint(tag) + encode_uvarint(len(value)) + value
    return bytes(out)


# -- the client's side --------------------------------------------------------------------------


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
    check_version(version, FETCH_VERSIONS, "Fetch response")
    reader = Reader(buf, pos, version >= _FETCH_FIRST_FLEXIBLE)
    try:
        return _decode_fetch(reader, version)
    except (struct.error, IndexError, UnicodeDecodeError) as error:
        raise MalformedMessage(f"Fetch response v{version} is malformed: {error}") from error


def _decode_fetch(reader: Reader, version: int) -> FetchResponseData:
    (throttle,) = reader.unpack(I32)
    error_code, session_id = reader.unpack(I16_I32) if version >= 7 else (0, 0)
    topics = []
    for _ in range(max(reader.array_length(), 0)):
        name = reader.string() or ""
        partitions = [_decode_fetch_partition(reader, version) for _ in range(max(reader.array_length(), 0))]
        reader.tags()
        topics.append((name, partitions))
    reader.tags()
    return FetchResponseData(throttle, error_code, session_id, topics)


def _decode_fetch_partition(reader: Reader, version: int) -> FetchedPartition:
    if version >= 5:
        index, error_code, high_watermark, last_stable, log_start = reader.unpack(_I32_I16_I64_I64_I64)
    else:
        index, error_code, high_watermark, last_stable = reader.unpack(_I32_I16_I64_I64)
        log_start = -1
    count = reader.length(I32)
    aborted: list[tuple[int, int]] | None = None
    if count >= 0:
        aborted = []
        for _ in range(count):
            aborted.append(reader.unpack(I64_I64))  # type: ignore[arg-type]
            reader.tags()
    preferred = reader.unpack(I32)[0] if version >= 11 else -1
    size = reader.length(I32)
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


def _read_partition_tags(reader: Reader, result: FetchedPartition) -> None:
    count, reader.pos = read_uvarint(reader.buf, reader.pos)
    for _ in range(count):
        tag, reader.pos = read_uvarint(reader.buf, reader.pos)
        size, reader.pos = read_uvarint(reader.buf, reader.pos)
        end = reader.pos + size
        if end > len(reader.buf):
            raise MalformedMessage("tagged field runs past the end of the Fetch response")
        if tag == 1 and size >= I32_I32.size:  # CurrentLeader: leader id, leader epoch, tags
            leader_id, epoch = I32_I32.unpack_from(reader.buf, reader.pos)
            result.current_leader = (leader_id, epoch)
        reader.pos = end
