"""The broker's view of a record batch: header parsing, validation and in-place edits."""

from __future__ import annotations

import pytest
from crc32c import crc32c
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from backbone.protocol import record_batch as rb
from backbone.protocol.errors import CorruptMessageError, InvalidRecordError, UnsupportedVersionError

pytestmark = pytest.mark.unit


def foreign_batch(count: int = 3, producer_id: int = -1, base_sequence: int = -1) -> bytearray:
    """A batch built by an independent implementation (kafka-python's record code)."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=base_sequence,
        batch_size=1 << 20,
    )
    for i in range(count):
        builder.append(i, timestamp=1_700_000_000_000 + i, key=b"k%d" % i, value=b"v" * 20, headers=[])
    return bytearray(builder.build())


def test_header_fields_match_the_other_implementation() -> None:
    buf = foreign_batch(count=5, producer_id=42, base_sequence=7)
    header = rb.check_batch(buf)
    theirs = DefaultRecordBatch(bytes(buf))
    assert header.size == len(buf)
    assert header.magic == 2
    assert header.record_count == 5
    assert header.last_offset_delta == 4
    assert header.base_timestamp == 1_700_000_000_000
    assert header.max_timestamp == 1_700_000_000_004
    assert header.producer_id == theirs.producer_id == 42
    assert header.base_sequence == 7
    assert header.last_sequence == 11
    assert header.crc == theirs.crc


def test_base_offset_and_leader_epoch_are_outside_the_crc() -> None:
    buf = foreign_batch()
    rb.set_base_offset(buf, 0, 1234)
    rb.set_partition_leader_epoch(buf, 0, 9)
    header = rb.check_batch(buf)
    assert header.base_offset == 1234
    assert header.partition_leader_epoch == 9
    assert header.next_offset == 1237
    assert [r.offset for r in DefaultRecordBatch(bytes(buf))] == [1234, 1235, 1236]


def test_log_append_time_rewrites_crc() -> None:
    buf = foreign_batch()
    rb.set_log_append_time(buf, 0, 1_800_000_000_000)
    header = rb.check_batch(buf)
    assert header.has_log_append_time
    assert header.max_timestamp == 1_800_000_000_000
    theirs = DefaultRecordBatch(bytes(buf))
    assert theirs.validate_crc()
    assert all(r.timestamp == 1_800_000_000_000 for r in theirs)


def test_bad_crc_is_corrupt_message() -> None:
    buf = foreign_batch()
    buf[-1] ^= 0xFF
    with pytest.raises(CorruptMessageError, match="CRC"):
        rb.check_batch(buf)


def test_wrong_magic_is_unsupported() -> None:
    buf = foreign_batch()
    buf[16] = 1
    with pytest.raises(UnsupportedVersionError, match="magic 1"):
        rb.check_batch(buf)


@pytest.mark.parametrize("delta", [-1, +1, 10_000])
def test_length_that_disagrees_with_bytes_is_corrupt(delta: int) -> None:
    buf = foreign_batch()
    length = rb.read_header(buf).batch_length
    buf[8:12] = (length + delta).to_bytes(4, "big", signed=True)
    with pytest.raises(CorruptMessageError):
        rb.check_record_set(buf)


def test_truncated_batch_is_corrupt() -> None:
    buf = foreign_batch()
    for cut in (0, 10, 60, len(buf) - 1):
        with pytest.raises(CorruptMessageError):
            rb.check_record_set(buf[:cut])


def test_more_records_than_offsets_is_invalid() -> None:
    buf = foreign_batch(count=3)
    buf[57:61] = (4).to_bytes(4, "big")
    buf[17:21] = crc32c(bytes(buf[21:])).to_bytes(4, "big")
    with pytest.raises(InvalidRecordError):
        rb.check_batch(buf)


def test_record_set_of_several_batches() -> None:
    first, second = foreign_batch(2), foreign_batch(4)
    batches = rb.check_record_set(first + second)
    assert [pos for pos, _ in batches] == [0, len(first)]
    assert [h.record_count for _, h in batches] == [2, 4]
    assert rb.peek_size(first + second, len(first)) == len(second)
    assert rb.peek_size(b"\x00" * 10) is None
