"""The record-level half of log compaction: walking a batch's records, the key check compacted topics make
on produce, and rewriting a batch with only the records the cleaner keeps.

The broker otherwise never looks inside batches; compaction has to, as Kafka's does. Records are walked as
byte spans, not decoded into values: a kept record is copied byte for byte (its headers and attributes
untouched), and only its timestamp delta is re-encoded when the batch's base timestamp changes.

A rewritten batch keeps its base offset, last offset delta (so the next offset and the producer's last
sequence stay what they were), partition leader epoch, producer id, epoch and base sequence, timestamp
type, flags and compression codec; gaps in the offset deltas are what compaction leaves. As in Kafka
(KIP-534), a batch with tombstones (records with a null value) is given a delete horizon the first time it
is cleaned: the base timestamp becomes now + delete.retention.ms and attribute bit 0x40 says so (record
timestamps, relative to the base, are unchanged); a clean after the horizon drops the tombstones.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

from backbone.protocol.compression import DEFAULT_MAX_DECOMPRESSED_SIZE, compress, decompress
from backbone.protocol.errors import CorruptMessageError, InvalidRecordError
from backbone.protocol.record_batch import (
    COMPRESSION_MASK,
    CONTROL_FLAG,
    HEADER_SIZE,
    TIMESTAMP_TYPE_LOG_APPEND,
    TRANSACTIONAL_FLAG,
    BatchHeader,
    encode_batch,
)
from backbone.protocol.varint import encode_varint, read_varint

DELETE_HORIZON_FLAG = 0x40
NO_TIMESTAMP = -1
# The flags an empty batch keeps (its records, and so its codec, are gone).
_EMPTY_BATCH_FLAGS = TIMESTAMP_TYPE_LOG_APPEND | TRANSACTIONAL_FLAG | CONTROL_FLAG


class RecordSpan(NamedTuple):
    """Where one record lies in a batch's (uncompressed) records section, and what the cleaner needs of it."""

    start: int  # its length varint
    body: int  # its attributes byte
    after_timestamp: int  # the offset delta: from here to `end` is copied as is
    end: int
    timestamp_delta: int
    offset_delta: int
    key: bytes | None
    tombstone: bool


def records_section(batch: bytes | bytearray | memoryview, header: BatchHeader) -> bytes:
    """The batch's records, uncompressed (the batch starts at 0 of `batch` and was checked whole)."""
    data = memoryview(batch)[HEADER_SIZE : header.size]
    codec = header.attributes & COMPRESSION_MASK
    return decompress(codec, data, DEFAULT_MAX_DECOMPRESSED_SIZE) if codec else bytes(data)


def iter_records(data: bytes, count: int) -> Iterator[RecordSpan]:
    """The `count` records of a records section; CorruptMessageError when they do not fill it exactly."""
    position = 0
    size = len(data)
    for _ in range(count):
        length, body = read_varint(data, position)
        end = body + length
        if length < 1 or end > size:
            raise CorruptMessageError(f"record of {length} bytes at {position} does not fit its batch")
        timestamp_delta, after_timestamp = read_varint(data, body + 1)
        offset_delta, cursor = read_varint(data, after_timestamp)
        key_length, cursor = read_varint(data, cursor)
        key = None
        if key_length >= 0:
            key = data[cursor : cursor + key_length]
            cursor += key_length
            if cursor > end:
                raise CorruptMessageError(f"record at {position} claims a key longer than itself")
        value_length, cursor = read_varint(data, cursor)
        if cursor + max(value_length, 0) > end:
            raise CorruptMessageError(f"record at {position} claims more bytes than it has")
        yield RecordSpan(
            position, body, after_timestamp, end, timestamp_delta, offset_delta, key, value_length < 0
        )
        position = end
    if position != size:
        raise CorruptMessageError(f"batch holds {size - position} bytes after its {count} records")


def check_keys_present(
    records: bytes | bytearray | memoryview, batches: Sequence[tuple[int, BatchHeader]], name: str
) -> None:
    """A compacted topic keeps records by key: records without one are refused, as Kafka's LogValidator
    refuses them: the first batch holding any fails as a whole with INVALID_RECORD, naming each keyless
    record by its index in the batch (`record_errors`, KIP-467), so a client fails only those records with
    INVALID_RECORD and the rest of the batch with an error saying another record caused it."""
    view = memoryview(records)
    message = f"Compacted topic cannot accept message without key in topic partition {name}."
    for position, header in batches:
        if header.is_control:
            continue
        data = records_section(view[position : position + header.size], header)
        keyless = tuple(
            (index, message)
            for index, record in enumerate(iter_records(data, header.record_count))
            if record.key is None
        )
        if keyless:
            shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in keyless[:3])
            raise InvalidRecordError(
                f"One or more records have been rejected due to {len(keyless)} record errors in total, "
                f"and only showing the first three errors at most: [{shown}]",
                record_errors=keyless,
            )


def key_digest(key: bytes) -> bytes:
    """What the cleaner's offset map stores for a key: 16 bytes whatever its length, as Kafka's does."""
    return hashlib.md5(key, usedforsecurity=False).digest()


def record_keys(batch: bytes, header: BatchHeader) -> Iterator[tuple[bytes, int]]:
    """(key digest, offset) of each keyed record of a batch (none for a control batch)."""
    if header.is_control:
        return
    base = header.base_offset
    for record in iter_records(records_section(batch, header), header.record_count):
        if record.key is not None:
            yield key_digest(record.key), base + record.offset_delta


class BatchFilter(NamedTuple):
    """What the cleaner decides for the records of one batch."""

    # Whether the record at this offset, with this key digest, is the latest of its key.
    is_latest: Callable[[bytes, int], bool]
    now_ms: int
    delete_retention_ms: int


class FilteredBatch(NamedTuple):
    """The batch as the cleaned segment holds it: the same bytes, new bytes, or None (it goes)."""

    data: bytes | None
    # The delete horizon its tombstones wait for (None when it holds none).
    delete_horizon: int | None


def filter_batch(batch: bytes, header: BatchHeader, rules: BatchFilter, retain_empty: bool) -> FilteredBatch:
    """Keep the latest record of each key; drop keyless records, and tombstones past their delete horizon.

    `retain_empty`: the batch is the last of its producer, so it stays, emptied if need be, and the
    producer's sequence survives.
    """
    if header.is_control:  # no transactions here; such a batch is kept as it is
        return FilteredBatch(batch, None)
    data = records_section(batch, header)
    records = list(iter_records(data, header.record_count))
    has_horizon = bool(header.attributes & DELETE_HORIZON_FLAG)
    horizon_passed = has_horizon and rules.now_ms >= header.base_timestamp
    base = header.base_offset
    kept = [
        record
        for record in records
        if record.key is not None
        and rules.is_latest(key_digest(record.key), base + record.offset_delta)
        and not (record.tombstone and horizon_passed)
    ]
    tombstones = any(record.tombstone for record in kept)
    new_horizon = tombstones and not has_horizon
    horizon = None
    if tombstones:
        horizon = rules.now_ms + rules.delete_retention_ms if new_horizon else header.base_timestamp
    if len(kept) == len(records) and not new_horizon:
        return FilteredBatch(batch, horizon)
    if not kept:
        return FilteredBatch(_empty_batch(header) if retain_empty else None, None)
    return FilteredBatch(_rebuild(header, data, kept, horizon if new_horizon else None), horizon)


def _rebuild(header: BatchHeader, data: bytes, kept: list[RecordSpan], new_horizon: int | None) -> bytes:
    """The batch with only `kept` records; with `new_horizon`, that becomes its base timestamp."""
    old_base = header.base_timestamp
    if new_horizon is None:
        records = b"".join(data[record.start : record.end] for record in kept)
        base_timestamp, attributes = old_base, header.attributes
    else:
        parts = []
        for record in kept:
            body = b"".join(
                (
                    data[record.body : record.body + 1],
                    encode_varint(old_base + record.timestamp_delta - new_horizon),
                    data[record.after_timestamp : record.end],
                )
            )
            parts.append(encode_varint(len(body)))
            parts.append(body)
        records = b"".join(parts)
        base_timestamp, attributes = new_horizon, header.attributes | DELETE_HORIZON_FLAG
    if header.attributes & TIMESTAMP_TYPE_LOG_APPEND:
        max_timestamp = header.max_timestamp
    else:
        max_timestamp = max(old_base + record.timestamp_delta for record in kept)
    codec = header.attributes & COMPRESSION_MASK
    payload = compress(codec, records) if codec else records
    return _encode(header, attributes, base_timestamp, max_timestamp, len(kept), payload)


def _empty_batch(header: BatchHeader) -> bytes:
    """Kafka's empty batch: the header alone, keeping the offsets and the producer's fields."""
    attributes = header.attributes & _EMPTY_BATCH_FLAGS
    return _encode(header, attributes, NO_TIMESTAMP, header.max_timestamp, 0, b"")


def _encode(
    header: BatchHeader,
    attributes: int,
    base_timestamp: int,
    max_timestamp: int,
    record_count: int,
    payload: bytes,
) -> bytes:
    """`header`'s batch again with these fields and records; its offsets and producer fields are kept."""
    return encode_batch(
        header.base_offset,
        header.partition_leader_epoch,
        header.magic,
        attributes,
        header.last_offset_delta,
        base_timestamp,
        max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        record_count,
        payload,
    )
