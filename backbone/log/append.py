"""The pure half of an append: validate a record set and work out what to write (nothing is written here).

A leader append rewrites only the first 16 bytes of each batch (base offset, length, partition leader
epoch), none of which the CRC covers; the rest of each batch goes from the caller's buffer to the file in one
`writev`, without a copy. Only LogAppendTime, which changes CRC-covered fields, copies the set.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from backbone.log.compaction import check_keys_present
from backbone.log.config import LogConfig
from backbone.log.segment import BatchMeta
from backbone.protocol.errors import (
    InvalidRecordError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
    UnsupportedVersionError,
)
from backbone.protocol.record_batch import (
    LENGTH_FIELD_END,
    BatchHeader,
    check_batch,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)

Records = bytes | bytearray | memoryview
Buffers = list[bytes | bytearray | memoryview]

# The first 16 bytes of a batch, rewritten on a leader append: base offset, batch length, leader epoch.
_BATCH_PREFIX = struct.Struct(">qii")


class AppendInfo(NamedTuple):
    """What an append did: the offsets it assigned (or kept), its timestamps and size."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    # The broker's time stamped on the batches when message.timestamp.type=LogAppendTime, else -1.
    log_append_time: int
    size: int
    record_count: int


# The buffers to write (in order), one BatchMeta per batch, and the result to report.
PreparedAppend = tuple[Buffers, list[BatchMeta], AppendInfo]


class UnexpectedAppendOffsetError(OffsetOutOfRangeError):
    """A follower append whose first offset is below the log end offset (the follower must truncate first)."""


def check_batches(records: Records) -> list[tuple[int, BatchHeader]]:
    """check_record_set, with the loop written out so a one-batch set (nearly every produce) costs one call.

    Same checks, same errors: every batch whole and valid (check_batch), nothing left over.
    """
    size = len(records)
    header = check_batch(records, 0, size)
    batches = [(0, header)]
    position = header.batch_length + LENGTH_FIELD_END
    while position < size:
        header = check_batch(records, position, size)
        batches.append((position, header))
        position += header.batch_length + LENGTH_FIELD_END
    return batches


def validate_producer_records(
    records: Records, config: LogConfig, name: str
) -> list[tuple[int, BatchHeader]]:
    """Check a producer's record set; raise the Kafka error for the first problem found.

    CorruptMessageError / UnsupportedVersionError / InvalidRecordError for a malformed set (check_batch,
    plus a record count that disagrees with the offset delta), MessageTooLargeError for a batch over
    max.message.bytes, RecordListTooLargeError for a set over segment.bytes; InvalidRecordError for a record
    without a key when the log is compacted (the only case where records are unpacked).
    """
    try:
        batches = check_batches(records)
    except UnsupportedVersionError as exc:
        # Produce v3+ carries record batch v2 only; Kafka answers another magic with INVALID_RECORD.
        raise InvalidRecordError(exc.message) from None
    limit = config.max_message_bytes
    for _, header in batches:
        if header.batch_length + LENGTH_FIELD_END > limit:
            raise MessageTooLargeError(
                f"batch of {header.size} bytes exceeds max.message.bytes={limit} of {name}"
            )
        if header.record_count != header.last_offset_delta + 1:
            raise InvalidRecordError(
                f"batch holds {header.record_count} records for {header.last_offset_delta + 1} offsets"
            )
    if len(records) > config.segment_bytes:
        raise RecordListTooLargeError(
            f"record set of {len(records)} bytes exceeds segment.bytes={config.segment_bytes} of {name}"
        )
    if config.compacts:
        check_keys_present(records, batches, name)  # the one place records are unpacked on produce
    return batches


def assign_offsets(
    records: Records,
    batches: list[tuple[int, BatchHeader]],
    first_offset: int,
    leader_epoch: int,
    log_append_time: int | None,
) -> PreparedAppend:
    """Offsets from `first_offset`, the leader epoch and (when given) LogAppendTime for each batch."""
    size = len(records)
    if log_append_time is None and len(batches) == 1:
        # The common case, kept short: one batch, its prefix rewritten, the rest written from `records`.
        header = batches[0][1]
        last = first_offset + header.last_offset_delta
        buffers: Buffers = [
            _BATCH_PREFIX.pack(first_offset, header.batch_length, leader_epoch),
            memoryview(records)[_BATCH_PREFIX.size :],
        ]
        info = AppendInfo._make((first_offset, last, header.max_timestamp, -1, size, header.record_count))
        return buffers, [(size, first_offset, last, header.max_timestamp)], info
    if log_append_time is not None:
        buffers = [_stamped_copy(records, batches, first_offset, leader_epoch, log_append_time)]
    else:
        buffers = []
        view = memoryview(records)
    metas: list[BatchMeta] = []
    offset = first_offset
    max_timestamp = -1
    record_count = 0
    for position, header in batches:
        last = offset + header.last_offset_delta
        batch_size = header.batch_length + LENGTH_FIELD_END
        if log_append_time is None:
            buffers.append(_BATCH_PREFIX.pack(offset, header.batch_length, leader_epoch))
            buffers.append(view[position + _BATCH_PREFIX.size : position + batch_size])
            batch_max = header.max_timestamp
        else:
            batch_max = log_append_time
        metas.append((batch_size, offset, last, batch_max))
        max_timestamp = max(max_timestamp, batch_max)
        record_count += header.record_count
        offset = last + 1
    append_time = -1 if log_append_time is None else log_append_time
    return (
        buffers,
        metas,
        AppendInfo(first_offset, offset - 1, max_timestamp, append_time, size, record_count),
    )


def _stamped_copy(
    records: Records, batches: list[tuple[int, BatchHeader]], first: int, leader_epoch: int, now_ms: int
) -> bytearray:
    buffer = bytearray(records)
    offset = first
    for position, header in batches:
        set_base_offset(buffer, position, offset)
        set_partition_leader_epoch(buffer, position, leader_epoch)
        set_log_append_time(buffer, position, now_ms)
        offset += header.last_offset_delta + 1
    return buffer


def prepare_follower_append(
    records: Records, checked: list[tuple[int, BatchHeader]] | None = None
) -> tuple[list[tuple[int, BatchHeader]], PreparedAppend]:
    """Check a leader's record set for a follower: valid batches with increasing offsets, kept as they are."""
    batches = check_batches(records) if checked is None else checked
    metas: list[BatchMeta] = []
    next_offset = batches[0][1].base_offset
    for _, header in batches:
        if header.base_offset < next_offset:
            raise InvalidRecordError(
                f"batch offsets go backwards at {header.base_offset} in a follower append"
            )
        metas.append((header.size, header.base_offset, header.last_offset, header.max_timestamp))
        next_offset = header.next_offset
    info = AppendInfo(
        batches[0][1].base_offset,
        batches[-1][1].last_offset,
        max(meta[3] for meta in metas),
        -1,
        len(records),
        sum(header.record_count for _, header in batches),
    )
    return batches, ([records], metas, info)
