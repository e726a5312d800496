"""Segment rolling, retention, log start offset, truncation, flushing and configuration changes."""

from __future__ import annotations

import gc
import os
import random
import threading
from pathlib import Path

import pytest

from backbone.log import Log, LogConfig
from backbone.protocol.errors import OffsetOutOfRangeError
from tests.helpers.batches import BASE_TIMESTAMP, LogFactory, batch_of_size, batch_ranges, build_batch

pytestmark = pytest.mark.unit

HOUR = 3_600_000


def offsets_in(log: Log) -> list[int]:
    """Every offset the log holds, from its batches."""
    data = log.read(log.log_start_offset, 1 << 30).to_bytes()
    return [offset for base, last in batch_ranges(data) for offset in range(base, last + 1)]


def kilobyte_batch(timestamp: int = BASE_TIMESTAMP, epoch: int = -1) -> bytes:
    """1000 bytes, 3 records, all at `timestamp`."""
    return batch_of_size(1000, record_size=313, base_timestamp=timestamp, timestamp_step=0,
                         partition_leader_epoch=epoch)  # fmt: skip


# -- rolling -------------------------------------------------------------------------------------------


def test_segments_roll_at_segment_bytes_and_are_named_by_base_offset(make_log: LogFactory) -> None:
    log = make_log({"segment.bytes": "2500"})
    for _ in range(5):
        log.append(kilobyte_batch())
    assert log.segment_base_offsets() == [0, 6, 12]
    names = sorted(path.name for path in log.directory.iterdir())
    for base in (0, 6):  # closed segments have written their indexes
        for suffix in (".log", ".index", ".timeindex"):
            assert f"{base:020d}{suffix}" in names
    assert (log.directory / f"{12:020d}.log").stat().st_size == 1000


def test_segments_roll_when_batch_timestamps_span_segment_ms(make_log: LogFactory) -> None:
    log = make_log({"segment.ms": str(HOUR)})
    log.append(kilobyte_batch(BASE_TIMESTAMP))
    log.append(kilobyte_batch(BASE_TIMESTAMP + HOUR))  # exactly segment.ms later: still fits
    assert log.segment_base_offsets() == [0]
    log.append(kilobyte_batch(BASE_TIMESTAMP + HOUR + 1))
    assert log.segment_base_offsets() == [0, 6]


def test_without_timestamps_segments_roll_by_the_broker_clock(make_log: LogFactory) -> None:
    log = make_log({"segment.ms": str(HOUR)})
    log.append(build_batch(1, max_timestamp=-1))
    make_log.clock.advance(HOUR + 1)
    log.append(build_batch(1, max_timestamp=-1))
    assert log.segment_base_offsets() == [0, 1]


def test_segments_roll_when_an_index_is_full(make_log: LogFactory) -> None:
    # 24 index bytes: 3 offset entries, 2 time entries; every batch after a segment's first gets an entry.
    log = make_log({"segment.index.bytes": "24", "index.interval.bytes": "0"})
    for i in range(9):
        log.append(kilobyte_batch(BASE_TIMESTAMP + i))
    assert log.segment_base_offsets() == [0, 9, 18]
    for segment in log._segments:
        assert segment.offset_index.count <= 3 and segment.time_index.count <= 2
    assert offsets_in(log) == list(range(27))


def test_segments_roll_before_relative_offsets_overflow(make_log: LogFactory) -> None:
    log = make_log()
    log.append_as_follower(build_batch(1, base_offset=0))
    far = 2**31 + 5
    log.append_as_follower(build_batch(1, base_offset=far))
    assert log.segment_base_offsets() == [0, far]
    assert log.log_end_offset == far + 1
    assert offsets_in(log) == [0, far]


def test_an_empty_active_segment_is_replaced_not_left_behind(make_log: LogFactory) -> None:
    log = make_log()
    log.truncate_fully_and_start_at(100)
    log.append_as_follower(build_batch(2, base_offset=150))
    assert log.segment_base_offsets() == [150]
    assert not (log.directory / f"{100:020d}.log").exists()
    assert log.log_start_offset == 150  # nothing was ever below it
    reopened = make_log.reopen(log)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (150, 152)


# -- retention -----------------------------------------------------------------------------------------


def filled(make_log: LogFactory, properties: dict[str, str], timestamps: list[int]) -> Log:
    """One 1000-byte batch per timestamp, two batches a segment."""
    log = make_log({"segment.bytes": "2000", **properties})
    for timestamp in timestamps:
        log.append(kilobyte_batch(timestamp))
    return log


def test_retention_ms_deletes_closed_segments_by_their_largest_timestamp(make_log: LogFactory) -> None:
    t = BASE_TIMESTAMP
    log = filled(make_log, {"retention.ms": str(10 * HOUR)}, [t, t + HOUR, t + 2 * HOUR, t + 20 * HOUR, t, t])
    assert log.segment_base_offsets() == [0, 6, 12]
    log.high_watermark = log.log_end_offset
    # Segment 0's newest batch is t+1h, segment 6's is t+20h: at t+12h only segment 0 has expired.
    assert log.delete_old_segments(now_ms=t + 12 * HOUR) == 1
    assert log.segment_base_offsets() == [6, 12]
    assert log.log_start_offset == 6 and log.high_watermark == log.log_end_offset
    assert (log.directory / "log-start-offset-checkpoint").read_text() == "0\n1\ntopic 0 6\n"
    # Everything expired: the active segment still stays.
    assert log.delete_old_segments(now_ms=t + 100 * HOUR) == 1
    assert log.segment_base_offsets() == [12]
    assert offsets_in(log) == list(range(12, 18))


def test_retention_bytes_keeps_at_least_retention_bytes(make_log: LogFactory) -> None:
    log = filled(make_log, {"retention.bytes": "5000"}, [BASE_TIMESTAMP] * 10)
    assert log.size_in_bytes == 10_000
    assert log.delete_old_segments(now_ms=BASE_TIMESTAMP) == 2
    assert log.size_in_bytes == 6000 and log.log_start_offset == 12


def test_compacted_topics_keep_old_segments(make_log: LogFactory) -> None:
    retention = {"retention.ms": "1", "retention.bytes": "1", "segment.bytes": "2000"}
    log = filled(make_log, retention, [1] * 6)
    # Filled first: a compacted log refuses these keyless records.
    log.update_config(LogConfig.from_properties({**retention, "cleanup.policy": "compact"}))
    assert log.delete_old_segments(now_ms=BASE_TIMESTAMP) == 0
    assert log.segment_base_offsets() == [0, 6, 12]


def test_retention_moves_the_epoch_cache_start(make_log: LogFactory) -> None:
    log = make_log({"segment.bytes": "2000", "retention.bytes": "0"})
    for epoch in (1, 1, 2, 2, 3):
        log.append(kilobyte_batch(), leader_epoch=epoch)
    log.delete_old_segments()
    assert log.log_start_offset == 12
    assert log.leader_epoch_cache.entries == [(3, 12)]


def test_increment_log_start_offset(make_log: LogFactory) -> None:
    log = filled(make_log, {}, [BASE_TIMESTAMP] * 6)
    with pytest.raises(OffsetOutOfRangeError, match="high watermark"):
        log.increment_log_start_offset(5)  # the high watermark is still 0
    log.high_watermark = 18
    assert log.increment_log_start_offset(7)
    assert not log.increment_log_start_offset(3)  # never moves back
    assert log.log_start_offset == 7 and log.segment_base_offsets() == [6, 12]
    assert offsets_in(log)[0] == 6  # reads start with the batch holding offset 7
    reopened = make_log.reopen(log)
    assert reopened.log_start_offset == 7


def test_high_watermark_is_kept_within_the_log(make_log: LogFactory) -> None:
    log = filled(make_log, {}, [BASE_TIMESTAMP] * 2)
    log.high_watermark = 100
    assert log.high_watermark == 6
    log.increment_log_start_offset(3)
    log.high_watermark = 0
    assert log.high_watermark == 3


# -- truncation ----------------------------------------------------------------------------------------


def test_truncate_to_removes_everything_from_the_offset(make_log: LogFactory) -> None:
    log = make_log({"segment.bytes": "2000", "index.interval.bytes": "0"})
    for epoch in (1, 1, 2, 2, 3, 3):
        log.append(kilobyte_batch(), leader_epoch=epoch)
    log.high_watermark = 18
    log.flush()
    assert log.truncate_to(9)
    assert log.log_end_offset == 9 and log.high_watermark == 9 and log.recovery_point == 9
    assert log.segment_base_offsets() == [0, 6]
    assert log.leader_epoch_cache.entries == [(1, 0), (2, 6)]
    assert (log.directory / f"{6:020d}.log").stat().st_size == 1000
    assert not (log.directory / f"{12:020d}.log").exists()
    info = log.append(kilobyte_batch(), leader_epoch=4)
    assert info.first_offset == 9
    assert offsets_in(log) == list(range(12))
    assert not log.truncate_to(100)  # at or beyond the end: nothing to do
    reopened = make_log.reopen(log)
    assert offsets_in(reopened) == list(range(12))


def test_truncate_inside_a_batch_removes_the_whole_batch(make_log: LogFactory) -> None:
    log = make_log()
    log.append(kilobyte_batch())
    log.append(kilobyte_batch())
    log.truncate_to(4)
    assert log.log_end_offset == 3 and offsets_in(log) == [0, 1, 2]


def test_truncate_into_a_closed_segment_makes_it_active_again(make_log: LogFactory) -> None:
    log = make_log({"segment.bytes": "2000"})
    for _ in range(5):
        log.append(kilobyte_batch())
    reopened = make_log.reopen(log)  # closed segments now come from disk, not scanned
    reopened.truncate_to(3)
    assert reopened.segment_base_offsets() == [0] and reopened.log_end_offset == 3
    reopened.append(kilobyte_batch())
    assert offsets_in(reopened) == list(range(6))


def test_truncate_below_the_log_start_starts_over(make_log: LogFactory) -> None:
    log = filled(make_log, {}, [BASE_TIMESTAMP] * 4)
    log.high_watermark = 12
    log.increment_log_start_offset(6)
    log.truncate_to(2)
    assert (log.log_start_offset, log.log_end_offset) == (2, 2)
    assert log.segment_base_offsets() == [2]


def test_truncate_fully_and_start_at(make_log: LogFactory) -> None:
    log = filled(make_log, {}, [BASE_TIMESTAMP] * 4)
    log.truncate_fully_and_start_at(500)
    assert (log.log_start_offset, log.log_end_offset, log.recovery_point) == (500, 500, 500)
    assert log.segment_base_offsets() == [500] and log.leader_epoch_cache.entries == []
    assert sorted(p.name for p in log.directory.glob("*.log")) == [f"{500:020d}.log"]
    assert log.append(kilobyte_batch()).first_offset == 500
    reopened = make_log.reopen(log)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (500, 503)


# -- flushing ------------------------------------------------------------------------------------------


def test_by_default_appends_are_not_flushed(make_log: LogFactory) -> None:
    log = make_log()
    log.append(kilobyte_batch())
    assert log.recovery_point == 0
    log.flush()
    assert log.recovery_point == 3
    assert (log.directory / "recovery-point-offset-checkpoint").read_text() == "0\n1\ntopic 0 3\n"


def test_flush_messages_flushes_after_that_many_messages(make_log: LogFactory) -> None:
    log = make_log({"flush.messages": "5"})
    log.append(kilobyte_batch())
    assert log.recovery_point == 0
    log.append(kilobyte_batch())
    assert log.recovery_point == 6


def test_flush_if_needed_honours_flush_ms_and_flushes_rolled_segments(make_log: LogFactory) -> None:
    log = make_log({"flush.ms": "1000"})
    log.append(kilobyte_batch())
    assert not log.flush_if_needed()
    make_log.clock.advance(1000)
    assert log.flush_if_needed() and log.recovery_point == 3
    rolling = make_log({"segment.bytes": "2000"}, name="rolling-0")
    for _ in range(3):
        rolling.append(kilobyte_batch())
    assert rolling.flush_if_needed()  # the rolled segments, not the active one
    assert rolling.recovery_point == 6
    assert not rolling.flush_if_needed()


# -- configuration and epochs --------------------------------------------------------------------------


def test_update_config_applies_to_an_open_log(make_log: LogFactory) -> None:
    log = make_log()
    for _ in range(3):
        log.append(kilobyte_batch())
    assert log.segment_base_offsets() == [0]
    log.update_config(log.config.from_properties({"segment.bytes": "1500", "retention.bytes": "1000"}))
    log.append(kilobyte_batch())
    assert log.segment_base_offsets() == [0, 9]
    log.append(kilobyte_batch())
    assert log.segment_base_offsets() == [0, 9, 12]
    assert log.delete_old_segments() == 2  # 5000 bytes, 1000 kept: both closed segments go
    assert log.size_in_bytes == 1000


def test_assign_epoch_and_end_offset_for_epoch(make_log: LogFactory) -> None:
    log = make_log()
    log.append(kilobyte_batch(), leader_epoch=1)
    log.assign_epoch(4)  # a new leader records its epoch before its first append
    log.append(kilobyte_batch(), leader_epoch=4)
    assert log.end_offset_for_epoch(1) == (1, 3)
    assert log.end_offset_for_epoch(2) == (1, 3)
    assert log.end_offset_for_epoch(4) == (4, 6)
    assert log.end_offset_for_epoch(0) == (-1, -1)


# -- threads and resources -----------------------------------------------------------------------------


def test_flushing_in_a_worker_thread_while_appending_and_reading(make_log: LogFactory) -> None:
    log = make_log({"segment.bytes": "20000"})
    stop = threading.Event()
    errors: list[BaseException] = []
    flushes = 0

    def flusher() -> None:
        nonlocal flushes
        try:
            while not stop.is_set() and flushes < 10_000:
                log.flush()
                assert log.recovery_point <= log.log_end_offset
                flushes += 1
        except BaseException as exc:  # handed to the test thread, which fails with it
            errors.append(exc)

    worker = threading.Thread(target=flusher)
    worker.start()
    try:
        for i in range(300):
            log.append(kilobyte_batch())
            if i % 50 == 49:
                log.truncate_to(log.log_end_offset - 3)  # truncation racing the flush
            assert batch_ranges(log.read(max(0, log.log_end_offset - 3), 2000).to_bytes())
    finally:
        stop.set()
        worker.join(timeout=30)
    assert not worker.is_alive() and errors == [] and flushes > 0
    log.flush()
    assert log.recovery_point == log.log_end_offset == 300 * 3 - 6 * 3
    assert offsets_in(make_log.reopen(log, close=False)) == list(range(log.log_end_offset))


def descriptors_under(directory: Path) -> int:
    """How many of this process's file descriptors point into `directory`."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except FileNotFoundError:  # the descriptor listdir itself used is gone already
            continue
        count += target.startswith(str(directory))
    return count


def test_close_releases_every_file_descriptor(make_log: LogFactory) -> None:
    log = make_log({"segment.bytes": "2000"})
    for _ in range(6):
        log.append(kilobyte_batch())
    region = log.read(0, 1).regions[0]
    assert descriptors_under(log.directory) >= 3
    log.close()
    assert descriptors_under(log.directory) == 1  # the region still holds its segment file open
    del region
    gc.collect()
    assert descriptors_under(log.directory) == 0


# -- the largest timestamp below an offset (ListOffsets MAX_TIMESTAMP) ---------------------------------------


def brute_force_max_timestamp(log: Log, limit: int) -> tuple[int, int] | None:
    best = None
    for header in log.iter_batch_headers(log.log_start_offset):
        if header.base_offset >= limit:
            break
        if best is None or header.max_timestamp > best[0]:
            best = (header.max_timestamp, max(header.base_offset, log.log_start_offset))
    return best


@pytest.mark.parametrize("seed", range(6))
def test_the_largest_timestamp_below_an_offset_matches_reading_every_header(
    make_log: LogFactory, seed: int
) -> None:
    rng = random.Random(seed)
    # Small segments and index entries every batch or so: several segments, several time-index entries each.
    log = make_log({"segment.bytes": "2500", "index.interval.bytes": str(rng.choice([1, 500, 3000]))})
    base = BASE_TIMESTAMP
    for _ in range(40):
        # Mostly growing timestamps, with some going back and some repeating an earlier maximum.
        base += rng.choice([0, 1, 5, 50])
        timestamp = base - rng.choice([0, 0, 0, 10, 100])
        log.append(build_batch(rng.randint(1, 3), base_timestamp=timestamp, max_timestamp=timestamp))
    assert len(log.segment_base_offsets()) > 3
    end = log.log_end_offset
    for log_start in (0, rng.randint(1, end // 2)):
        if log_start:
            log.high_watermark = end
            log.increment_log_start_offset(log_start)
        for limit in sorted({log.log_start_offset, *(rng.randint(0, end) for _ in range(12)), end}):
            assert log.max_timestamp_below(limit) == brute_force_max_timestamp(log, limit), (log_start, limit)
