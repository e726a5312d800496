"""Appends (leader and follower), rejection of bad input, and reads by offset and by timestamp."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from crc32c import crc32c
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from backbone.log import IndexCache, Log, UnexpectedAppendOffsetError
from backbone.protocol.errors import (
    CorruptMessageError,
    InvalidRecordError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
)
from backbone.protocol.record_batch import TIMESTAMP_TYPE_LOG_APPEND, check_batch
from tests.helpers.batches import (
    BASE_TIMESTAMP,
    LogFactory,
    batch_of_size,
    batch_ranges,
    build_batch,
    iter_batches,
    read_header_fields,
)

pytestmark = pytest.mark.unit


def all_batches(log: Log) -> bytes:
    return log.read(log.log_start_offset, 1 << 30).to_bytes()


def directory_snapshot(log: Log) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(log.directory.iterdir()) if path.is_file()}


# -- leader appends ------------------------------------------------------------------------------------


def test_append_assigns_offsets_and_stamps_the_leader_epoch(make_log: LogFactory) -> None:
    log = make_log()
    infos = [log.append(build_batch(5, base_offset=999), leader_epoch=3) for _ in range(3)]
    assert [(info.first_offset, info.last_offset) for info in infos] == [(0, 4), (5, 9), (10, 14)]
    assert log.log_end_offset == 15
    data = all_batches(log)
    assert batch_ranges(data) == [(0, 4), (5, 9), (10, 14)]
    for _, batch in iter_batches(data):
        assert read_header_fields(batch)[2] == 3  # partition leader epoch
        check_batch(batch)  # the CRC still holds: it does not cover what was rewritten
        assert DefaultRecordBatch(batch).validate_crc()
    assert log.leader_epoch_cache.entries == [(3, 0)]


def test_append_info_reports_timestamps_size_and_count(make_log: LogFactory) -> None:
    log = make_log()
    batch = build_batch(4, base_timestamp=BASE_TIMESTAMP, timestamp_step=10)
    info = log.append(batch)
    assert info.max_timestamp == BASE_TIMESTAMP + 30
    assert info.log_append_time == -1
    assert info.size == len(batch) and info.record_count == 4


def test_a_record_set_of_several_batches_is_one_append(make_log: LogFactory) -> None:
    log = make_log()
    records = build_batch(2) + build_batch(3) + build_batch(1)
    info = log.append(records)
    assert (info.first_offset, info.last_offset, info.record_count) == (0, 5, 6)
    assert batch_ranges(all_batches(log)) == [(0, 1), (2, 4), (5, 5)]


def test_log_append_time_stamps_the_broker_clock(make_log: LogFactory) -> None:
    log = make_log({"message.timestamp.type": "LogAppendTime"})
    make_log.clock.now_ms = BASE_TIMESTAMP + 12345
    info = log.append(build_batch(3) + build_batch(2))
    assert info.log_append_time == BASE_TIMESTAMP + 12345 == info.max_timestamp
    for _, batch in iter_batches(all_batches(log)):
        fields = read_header_fields(batch)
        assert fields[5] & TIMESTAMP_TYPE_LOG_APPEND and fields[8] == BASE_TIMESTAMP + 12345
        check_batch(batch)  # the CRC was recomputed


def test_batches_from_kafka_python_are_stored_and_read_back(make_log: LogFactory) -> None:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=42, producer_epoch=1,
        base_sequence=7, batch_size=1 << 20,
    )  # fmt: skip
    for i in range(5):
        builder.append(i, timestamp=BASE_TIMESTAMP + i, key=b"k%d" % i, value=b"value-%d" % i, headers=[])
    log = make_log()
    log.append(build_batch(3))
    log.append(bytes(builder.build()), leader_epoch=0)
    stored = log.read(3, 1 << 20).to_bytes()
    batch = DefaultRecordBatch(stored)
    assert batch.validate_crc() and batch.producer_id == 42
    assert [(record.offset, record.value) for record in batch] == [(3 + i, b"value-%d" % i) for i in range(5)]


# -- bad input is rejected and nothing is written -------------------------------------------------------


def _flip(data: bytes, position: int) -> bytes:
    return data[:position] + bytes([data[position] ^ 0xFF]) + data[position + 1 :]


def _with_magic(data: bytes, magic: int) -> bytes:
    return data[:16] + bytes([magic]) + data[17:]


def _with_length(data: bytes, delta: int) -> bytes:
    length = int.from_bytes(data[8:12], "big") + delta
    return data[:8] + length.to_bytes(4, "big") + data[12:]


GOOD = build_batch(3)
BAD_INPUTS = {
    "crc_flipped_in_records": (_flip(GOOD, 100), CorruptMessageError),
    "crc_flipped_in_header": (_flip(GOOD, 30), CorruptMessageError),
    "magic_1": (_with_magic(GOOD, 1), InvalidRecordError),
    "magic_3": (_with_magic(GOOD, 3), InvalidRecordError),
    "length_longer_than_bytes": (_with_length(GOOD, 10), CorruptMessageError),
    "length_shorter_than_bytes": (_with_length(GOOD, -10), CorruptMessageError),
    "cut_short": (GOOD[:-1], CorruptMessageError),
    "header_only": (GOOD[:40], CorruptMessageError),
    "empty": (b"", CorruptMessageError),
    "trailing_garbage": (GOOD + b"\x00" * 20, CorruptMessageError),
    "second_batch_corrupt": (GOOD + _flip(GOOD, 100), CorruptMessageError),
    "count_changed_without_new_crc": (GOOD[:57] + (2).to_bytes(4, "big") + GOOD[61:], CorruptMessageError),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_record_sets_are_rejected_and_nothing_is_written(make_log: LogFactory, case: str) -> None:
    log = make_log()
    log.append(build_batch(2))
    before = directory_snapshot(log)
    data, error = BAD_INPUTS[case]
    with pytest.raises(error):
        log.append(data)
    assert log.log_end_offset == 2
    assert directory_snapshot(log) == before
    assert batch_ranges(all_batches(log)) == [(0, 1)]


def test_record_count_that_disagrees_with_the_offset_delta_is_invalid(make_log: LogFactory) -> None:
    # A valid CRC over a header claiming 2 records for 3 offsets (built with the right CRC).
    batch = bytearray(build_batch(3))
    batch[57:61] = (2).to_bytes(4, "big")
    batch[17:21] = crc32c(bytes(batch[21:])).to_bytes(4, "big")
    log = make_log()
    with pytest.raises(InvalidRecordError, match="2 records for 3 offsets"):
        log.append(bytes(batch))
    assert log.log_end_offset == 0 and log.size_in_bytes == 0


def test_batch_over_max_message_bytes_is_too_large(make_log: LogFactory) -> None:
    log = make_log({"max.message.bytes": "1000"})
    with pytest.raises(MessageTooLargeError, match=r"max\.message\.bytes=1000"):
        log.append(batch_of_size(1001))
    log.append(batch_of_size(1000))
    assert log.log_end_offset > 0


def test_record_set_over_segment_bytes_is_a_record_list_too_large(make_log: LogFactory) -> None:
    log = make_log({"segment.bytes": "3000"})
    with pytest.raises(RecordListTooLargeError, match=r"segment\.bytes=3000"):
        log.append(batch_of_size(2000) + batch_of_size(2000))
    assert log.size_in_bytes == 0


# -- follower appends ----------------------------------------------------------------------------------


def test_follower_append_keeps_the_leaders_offsets_and_epochs(make_log: LogFactory) -> None:
    log = make_log()
    records = build_batch(3, base_offset=0, partition_leader_epoch=1) + build_batch(
        2, base_offset=3, partition_leader_epoch=2
    )
    info = log.append_as_follower(records)
    assert (info.first_offset, info.last_offset) == (0, 4)
    assert all_batches(log) == records  # byte for byte
    assert log.leader_epoch_cache.entries == [(1, 0), (2, 3)]
    # Gaps (compacted leaders) are fine; going back is not.
    log.append_as_follower(build_batch(1, base_offset=10, partition_leader_epoch=2))
    assert log.log_end_offset == 11
    with pytest.raises(UnexpectedAppendOffsetError, match="below the log end offset 11"):
        log.append_as_follower(build_batch(1, base_offset=10))
    with pytest.raises(InvalidRecordError, match="backwards"):
        log.append_as_follower(build_batch(2, base_offset=20) + build_batch(1, base_offset=21))
    assert log.log_end_offset == 11


def test_follower_append_wider_than_a_segment_is_split(make_log: LogFactory) -> None:
    log = make_log({"segment.bytes": "2500"})
    records = b"".join(batch_of_size(1000, base_offset=i * 10) for i in range(5))
    log.append_as_follower(records)
    assert len(log.segment_base_offsets()) >= 3
    assert batch_ranges(all_batches(log)) == batch_ranges(records)


# -- reads ---------------------------------------------------------------------------------------------


@pytest.fixture
def ten_batches(make_log: LogFactory) -> Log:
    """Offsets 0..29 in ten 3-record batches of 1000 bytes, three batches a segment, sparse indexes."""
    log = make_log({"segment.bytes": "3500", "index.interval.bytes": "1500"})
    for _ in range(10):
        log.append(batch_of_size(1000, record_size=313))
    assert log.segment_base_offsets() == [0, 9, 18, 27]
    return log


def first_batch_range(log: Log, offset: int) -> tuple[int, int]:
    return batch_ranges(log.read(offset, 1).to_bytes())[0]


def test_read_starts_at_the_batch_holding_the_offset(ten_batches: Log) -> None:
    per_batch = 3
    for offset in range(ten_batches.log_end_offset):
        base = offset // per_batch * per_batch
        assert first_batch_range(ten_batches, offset) == (base, base + per_batch - 1)


def test_read_returns_whole_batches_within_max_bytes_but_always_one(ten_batches: Log) -> None:
    assert ten_batches.read(0, 1).size == 1000  # min one batch
    assert ten_batches.read(0, 2999).size == 2000
    assert ten_batches.read(0, 3000).size == 3000
    result = ten_batches.read(7, 10_000)
    assert result.size == 8000 and len(result.regions) == 4  # spans segments, one region each
    assert [base for base, _ in batch_ranges(result.to_bytes())] == list(range(6, 30, 3))


def test_read_stops_before_the_batch_holding_max_offset(ten_batches: Log) -> None:
    assert batch_ranges(ten_batches.read(0, 10_000, max_offset=12).to_bytes())[-1] == (9, 11)
    assert batch_ranges(ten_batches.read(0, 10_000, max_offset=11).to_bytes())[-1] == (6, 8)
    assert batch_ranges(ten_batches.read(0, 10_000, max_offset=9).to_bytes())[-1] == (6, 8)
    assert ten_batches.read(9, 10_000, max_offset=11).regions == ()
    assert ten_batches.read(0, 10_000, max_offset=0).regions == ()


def test_read_at_the_log_end_is_empty_and_outside_is_out_of_range(ten_batches: Log) -> None:
    assert ten_batches.read(ten_batches.log_end_offset, 100).regions == ()
    with pytest.raises(OffsetOutOfRangeError, match="outside"):
        ten_batches.read(ten_batches.log_end_offset + 1, 100)
    ten_batches.high_watermark = 30
    ten_batches.increment_log_start_offset(10)
    with pytest.raises(OffsetOutOfRangeError):
        ten_batches.read(9, 100)
    assert first_batch_range(ten_batches, 10) == (9, 11)  # the batch holding the start offset


def test_regions_are_file_regions_ready_for_sendfile(ten_batches: Log, tmp_path: Path) -> None:
    result = ten_batches.read(0, 2500)
    target = tmp_path / "sent"
    with target.open("wb") as out:
        for region in result.regions:
            os.sendfile(out.fileno(), region.fileno(), region.position, region.length)
    assert target.read_bytes() == result.to_bytes()
    buffer = bytearray(700)
    region = result.regions[0]
    assert region.readinto(buffer, 1600) == 400 and bytes(buffer[:400]) == region.read()[1600:]


def test_a_region_stays_readable_after_retention_deletes_its_segment(ten_batches: Log) -> None:
    region = ten_batches.read(0, 1).regions[0]
    expected = region.read()
    ten_batches.high_watermark = ten_batches.log_end_offset
    ten_batches.increment_log_start_offset(18)  # segments 0 and 9 are deleted at once
    assert ten_batches.segment_base_offsets() == [18, 27]
    assert not (ten_batches.directory / "00000000000000000000.log").exists()
    assert region.read() == expected


def test_reading_one_segment_loads_no_other_segments_index(ten_batches: Log, make_log: LogFactory) -> None:
    reopened = make_log.reopen(ten_batches)
    segments = reopened._segments
    assert not any(segment.offset_index.loaded for segment in segments[:-1])
    reopened.read(10, 1)
    assert [segment.offset_index.loaded for segment in segments] == [False, True, False, True]


# -- timestamps ----------------------------------------------------------------------------------------


def test_offset_for_timestamp_finds_the_first_batch_reaching_it(make_log: LogFactory) -> None:
    log = make_log({"segment.bytes": "2500", "index.interval.bytes": "0"})
    for i in range(6):  # batch i holds offsets 2i, 2i+1 with timestamps T+100i, T+100i+1
        log.append(build_batch(2, base_timestamp=BASE_TIMESTAMP + 100 * i, record_size=400))
    assert len(log.segment_base_offsets()) > 1
    assert log.offset_for_timestamp(0) == (0, BASE_TIMESTAMP + 1)
    assert log.offset_for_timestamp(BASE_TIMESTAMP + 101) == (2, BASE_TIMESTAMP + 101)
    assert log.offset_for_timestamp(BASE_TIMESTAMP + 102) == (4, BASE_TIMESTAMP + 201)
    assert log.offset_for_timestamp(BASE_TIMESTAMP + 501) == (10, BASE_TIMESTAMP + 501)
    assert log.offset_for_timestamp(BASE_TIMESTAMP + 502) is None
    reopened = make_log.reopen(log)  # closed segments answer from their time index
    assert reopened.offset_for_timestamp(BASE_TIMESTAMP + 301) == (6, BASE_TIMESTAMP + 301)


def test_offset_for_timestamp_with_timestamps_out_of_order(make_log: LogFactory) -> None:
    log = make_log({"index.interval.bytes": "0"})
    for base in (500, 100, 900, 300):
        log.append(build_batch(1, base_timestamp=BASE_TIMESTAMP + base))
    assert log.offset_for_timestamp(BASE_TIMESTAMP + 200) == (0, BASE_TIMESTAMP + 500)
    assert log.offset_for_timestamp(BASE_TIMESTAMP + 600) == (2, BASE_TIMESTAMP + 900)


def test_offset_for_timestamp_respects_the_log_start(make_log: LogFactory) -> None:
    log = make_log()
    log.append(build_batch(10, base_timestamp=BASE_TIMESTAMP))
    log.high_watermark = 10
    log.increment_log_start_offset(4)
    assert log.offset_for_timestamp(0) == (4, BASE_TIMESTAMP + 9)


# -- helpers the broker uses ---------------------------------------------------------------------------


def test_iter_batch_headers_walks_every_segment_from_the_batch_holding_the_offset(ten_batches: Log) -> None:
    assert [h.base_offset for h in ten_batches.iter_batch_headers(7)] == list(range(6, 30, 3))
    assert [h.base_offset for h in ten_batches.iter_batch_headers(-5)][:2] == [0, 3]  # clamped to the start
    assert list(ten_batches.iter_batch_headers(30)) == []
    headers = ten_batches.iter_batch_headers(24)
    assert next(headers).base_offset == 24
    ten_batches.append(batch_of_size(1000, record_size=313))  # appended while iterating: included
    assert [h.base_offset for h in headers] == [27, 30]


def test_append_can_take_an_already_validated_set(make_log: LogFactory) -> None:
    from backbone.log.append import validate_producer_records

    log = make_log()
    records = build_batch(4)
    checked = validate_producer_records(records, log.config, log.name)
    assert log.append(records, validated=checked).last_offset == 3
    assert batch_ranges(all_batches(log)) == [(0, 3)]


def test_index_memory_stays_within_the_cache_budget(make_log: LogFactory) -> None:
    cache = IndexCache(max_bytes=200)  # a few segments' worth of entries
    log = make_log({"segment.bytes": "3000", "index.interval.bytes": "0"}, cache=cache)
    for _ in range(60):
        log.append(batch_of_size(1000, record_size=313))
    assert len(log.segment_base_offsets()) == 20
    for offset in range(0, log.log_end_offset, 2):
        assert first_batch_range(log, offset)[0] == offset // 3 * 3
        assert cache.bytes_held <= 200
    loaded = sum(segment.offset_index.loaded for segment in log._segments[:-1])
    assert 0 < loaded < 19  # evicted indexes were reloaded on use, and evicted again
