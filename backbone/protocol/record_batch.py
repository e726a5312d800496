"""The fixed 61-byte header of a Kafka record batch (magic 2), as the broker sees it.

The broker never unpacks individual records: it reads and validates this header and the CRC, writes the
base offset (and the partition leader epoch) in place, which the CRC does not cover, and moves the batch
as opaque bytes. Encoding and decoding whole batches with their records is the client's business
(`backbone.protocol.records`); `encode_batch` puts a records section behind this header, for it and for
the log cleaner (`backbone.log.compaction`).

Layout (big-endian), offsets in bytes:
    0 base_offset int64 | 8 batch_length int32 | 12 partition_leader_epoch int32 | 16 magic int8 |
    17 crc uint32 | 21 attributes int16 | 23 last_offset_delta int32 | 27 base_timestamp int64 |
    35 max_timestamp int64 | 43 producer_id int64 | 51 producer_epoch int16 | 53 base_sequence int32 |
    57 record_count int32 | 61 records...
The CRC-32C covers everything from `attributes` to the end of the batch.
"""

from __future__ import annotations

import mmap
import struct
from typing import NamedTuple

from crc32c import crc32c

from backbone.protocol.errors import CorruptMessageError, InvalidRecordError, UnsupportedVersionError

HEADER_SIZE = 61
# batch_length counts the bytes after the base_offset and batch_length fields themselves.
LENGTH_FIELD_END = 12
MAGIC = 2
CRC_OFFSET = 17
CRC_START = 21
ATTRIBUTES_OFFSET = 21
MAX_TIMESTAMP_OFFSET = 35
PARTITION_LEADER_EPOCH_OFFSET = 12

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_LOG_APPEND = 0x08
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

HEADER_STRUCT = struct.Struct(">qiibIhiqqqhii")
_OFFSET = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_LENGTH_AND_MAGIC = struct.Struct(">qiib")


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies."""
        return self.batch_length + LENGTH_FIELD_END

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)

    @property
    def has_log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_LOG_APPEND)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


_new_tuple = tuple.__new__
_unpack_header = HEADER_STRUCT.unpack_from


def read_header(buf: bytes | bytearray | memoryview | mmap.mmap, pos: int = 0) -> BatchHeader:
    """Parse the header at `pos` without any validation (the caller knows 61 bytes are there)."""
    # tuple.__new__ directly: NamedTuple._make costs three times the unpack itself on this hot path.
    return _new_tuple(BatchHeader, _unpack_header(buf, pos))


def encode_batch(
    base_offset: int,
    partition_leader_epoch: int,
    magic: int,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    record_count: int,
    records: bytes | bytearray,
) -> bytes:
    """A whole batch: the header from these fields, its length and CRC-32C computed, then `records` (the
    records section as it is stored, so compressed when `attributes` names a codec)."""
    header = bytearray(
        HEADER_STRUCT.pack(
            base_offset,
            HEADER_SIZE - LENGTH_FIELD_END + len(records),
            partition_leader_epoch,
            magic,
            0,  # the CRC, computed below over everything after it
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            record_count,
        )
    )
    struct.pack_into(">I", header, CRC_OFFSET, crc32c(records, crc32c(memoryview(header)[CRC_START:])))
    return b"".join((header, records))


def peek_size(buf: bytes | bytearray | memoryview, pos: int = 0) -> int | None:
    """Total size of the batch starting at `pos`, or None when fewer than 17 bytes are left."""
    if len(buf) - pos < LENGTH_FIELD_END + 5:
        return None
    _, length, _, _ = _LENGTH_AND_MAGIC.unpack_from(buf, pos)
    return length + LENGTH_FIELD_END


def check_batch(
    buf: bytes | bytearray | memoryview | mmap.mmap, pos: int = 0, end: int | None = None
) -> BatchHeader:
    """Validate the batch at `pos` (size, magic, CRC, offset deltas) and return its header.

    `end` bounds the bytes the batch may occupy (default: the end of `buf`). Raises CorruptMessageError
    for a batch that is cut short, claims an impossible length or fails its CRC, and
    UnsupportedVersionError for a magic other than 2 (the only format this project stores).
    """
    end = len(buf) if end is None else end
    available = end - pos
    if available < HEADER_SIZE:
        raise CorruptMessageError(f"record batch needs {HEADER_SIZE} header bytes, got {available}")
    header = read_header(buf, pos)
    if header.magic != MAGIC:
        raise UnsupportedVersionError(f"record batch magic {header.magic} is not supported (only 2)")
    size = header.size
    if size < HEADER_SIZE or size > available:
        raise CorruptMessageError(f"record batch length {header.batch_length} does not fit {available} bytes")
    actual = crc32c(memoryview(buf)[pos + CRC_START : pos + size])
    if actual != header.crc:
        raise CorruptMessageError(
            f"record batch CRC mismatch: stored {header.crc:#010x}, computed {actual:#010x}"
        )
    if header.last_offset_delta < 0 or header.record_count < 0:
        raise InvalidRecordError("record batch has a negative offset delta or record count")
    # Compaction may leave gaps (fewer records than offsets) but never more records than offsets.
    if header.record_count > header.last_offset_delta + 1:
        raise InvalidRecordError(
            f"record batch holds {header.record_count} records for {header.last_offset_delta + 1} offsets"
        )
    return header


def check_record_set(buf: bytes | bytearray | memoryview) -> list[tuple[int, BatchHeader]]:
    """Validate a record set (one or more whole batches back to back); return (position, header) pairs.

    A produce request's records field is such a set. Anything left over that is not a whole, valid batch
    makes the whole set invalid: nothing of it may be written.
    """
    batches: list[tuple[int, BatchHeader]] = []
    pos = 0
    end = len(buf)
    if end == 0:
        raise CorruptMessageError("empty record set")
    while pos < end:
        header = check_batch(buf, pos, end)
        batches.append((pos, header))
        pos += header.size
    return batches


def set_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    """Write the base offset in place; the CRC does not cover it."""
    _OFFSET.pack_into(buf, pos, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    """Write the partition leader epoch in place; the CRC does not cover it."""
    _INT32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def set_log_append_time(buf: bytearray | memoryview, pos: int, timestamp_ms: int) -> None:
    """Stamp the batch with the broker's time (LogAppendTime) and recompute its CRC.

    Both the attributes and max_timestamp are covered by the CRC, so it must be written again.
    """
    header = read_header(buf, pos)
    struct.pack_into(">h", buf, pos + ATTRIBUTES_OFFSET, header.attributes | TIMESTAMP_TYPE_LOG_APPEND)
    _INT64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, timestamp_ms)
    crc = crc32c(memoryview(buf)[pos + CRC_START : pos + header.size])
    struct.pack_into(">I", buf, pos + CRC_OFFSET, crc)
