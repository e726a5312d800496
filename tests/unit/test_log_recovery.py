"""Opening a log after a clean shutdown or a crash: torn tails, garbage, damaged indexes and checkpoints."""

from __future__ import annotations

import os
import random
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from backbone.log import Log
from backbone.log.recovery import CLEAN_SHUTDOWN_FILE, LOG_START_FILE, RECOVERY_POINT_FILE
from backbone.protocol.record_batch import check_batch
from tests.helpers.batches import (
    BASE_TIMESTAMP,
    LogFactory,
    batch_of_size,
    batch_ranges,
    build_batch,
    iter_batches,
)

pytestmark = pytest.mark.unit

BATCH = 1000  # bytes per batch in these tests; 3 records each


@pytest.fixture
def make_log(tmp_path: Path) -> Iterator[LogFactory]:
    with LogFactory(tmp_path) as factory:
        yield factory


def batch(epoch: int = -1) -> bytes:
    return batch_of_size(BATCH, record_size=313, partition_leader_epoch=epoch)


def segment_path(log: Log, base: int, suffix: str = ".log") -> Path:
    return log.directory / f"{base:020d}{suffix}"


def assert_consistent(log: Log, offsets: int) -> None:
    """The log holds exactly offsets [start, offsets) in valid batches, and every offset reads correctly."""
    data = log.read(log.log_start_offset, 1 << 30).to_bytes()
    for _, one in iter_batches(data):
        check_batch(one)
    held = [o for base, last in batch_ranges(data) for o in range(base, last + 1)]
    assert held == list(range(log.log_start_offset, offsets))
    assert log.log_end_offset == offsets
    for offset in range(log.log_start_offset, offsets):
        base, last = batch_ranges(log.read(offset, 1).to_bytes())[0]
        assert base <= offset <= last


def crashed(make_log: LogFactory, properties: dict[str, str], batches: int) -> Log:
    """A log with `batches` appended and never closed (as if the broker died), its recovery point at 0."""
    log = make_log(properties)
    for _ in range(batches):
        log.append(batch())
    return log


# -- clean and unclean shutdowns -----------------------------------------------------------------------


def test_close_leaves_the_clean_shutdown_marker_and_open_removes_it(make_log: LogFactory) -> None:
    log = crashed(make_log, {}, 3)
    log.close()
    assert (log.directory / CLEAN_SHUTDOWN_FILE).exists()
    assert (log.directory / RECOVERY_POINT_FILE).read_text() == "0\n1\ntopic 0 9\n"
    reopened = make_log.reopen(log, close=False)
    assert reopened.had_clean_shutdown and not (log.directory / CLEAN_SHUTDOWN_FILE).exists()
    assert_consistent(reopened, 9)
    again = make_log.reopen(reopened, close=False)  # this time without a close: a crash
    assert not again.had_clean_shutdown
    assert_consistent(again, 9)
    assert again.recovery_point == 9  # recovered data is fsynced, the recovery point moves to the end


def test_segments_below_the_recovery_point_are_not_scanned(make_log: LogFactory) -> None:
    log = crashed(make_log, {"segment.bytes": "2000"}, 6)
    log.flush(6)  # segments 0 and 6 are below the recovery point
    first = segment_path(log, 0)
    damaged = bytearray(first.read_bytes())
    damaged[500] ^= 0xFF  # a CRC error in data Kafka would trust too
    first.write_bytes(bytes(damaged))
    reopened = make_log.reopen(log, close=False)
    assert first.read_bytes() == bytes(damaged)  # not scanned, so not truncated
    assert reopened.log_end_offset == 18


# -- torn and garbage tails ----------------------------------------------------------------------------

GOOD = batch()
TAILS = {
    "one_byte": GOOD[:1],
    "length_field_cut": GOOD[:11],
    "header_cut": GOOD[:60],
    "records_cut": GOOD[:500],
    "all_but_one_byte": GOOD[:-1],
    "zeros": b"\x00" * 4096,
    "random_garbage": random.Random(5).randbytes(3000),
    "crc_error": GOOD[:300] + bytes([GOOD[300] ^ 1]) + GOOD[301:],
    "huge_length": GOOD[:8] + struct.pack(">i", 2**31 - 1) + GOOD[12:],
    "magic_0": GOOD[:16] + b"\x00" + GOOD[17:],
    "offset_going_back": build_batch(3, base_offset=2),
}


@pytest.mark.parametrize("tail", sorted(TAILS))
def test_recovery_truncates_exactly_at_the_first_bad_byte(make_log: LogFactory, tail: str) -> None:
    log = crashed(make_log, {"index.interval.bytes": "0"}, 5)
    path = segment_path(log, 0)
    with path.open("ab") as file:
        file.write(TAILS[tail] + GOOD)  # a good batch after the bad bytes must not survive either
    reopened = make_log.reopen(log, close=False)
    assert path.stat().st_size == 5 * BATCH
    assert_consistent(reopened, 15)
    assert segment_path(log, 0, ".index").stat().st_size == 4 * 8  # rebuilt: batches 2..5 indexed
    assert reopened.append(batch()).first_offset == 15


def test_corruption_in_the_middle_cuts_there_and_drops_later_segments(make_log: LogFactory) -> None:
    log = crashed(make_log, {"segment.bytes": "3000"}, 8)
    assert log.segment_base_offsets() == [0, 9, 18]
    middle = segment_path(log, 9)
    data = bytearray(middle.read_bytes())
    data[BATCH + 100] ^= 0x40  # inside the second batch of segment 9
    middle.write_bytes(bytes(data))
    reopened = make_log.reopen(log, close=False)
    assert middle.stat().st_size == BATCH
    assert reopened.segment_base_offsets() == [0, 9]
    assert not segment_path(log, 18).exists()
    assert_consistent(reopened, 12)


def test_a_segment_whose_first_batch_is_bad_is_emptied(make_log: LogFactory) -> None:
    log = crashed(make_log, {"segment.bytes": "2000"}, 3)
    last = segment_path(log, 6)
    last.write_bytes(b"\xff" * 100)
    reopened = make_log.reopen(log, close=False)
    assert reopened.segment_base_offsets() == [0, 6]
    assert last.stat().st_size == 0
    assert_consistent(reopened, 6)


# -- damaged indexes -----------------------------------------------------------------------------------


def _random_entries(path: Path) -> None:
    path.write_bytes(random.Random(1).randbytes(path.stat().st_size))


def _swap_first_two(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[8:16] + data[:8] + data[16:])


def _position_beyond_file(path: Path) -> None:
    path.write_bytes(path.read_bytes() + struct.pack(">ii", 10_000, 10**8))


def _shifted_position(path: Path) -> None:
    data = bytearray(path.read_bytes())
    relative, position = struct.unpack_from(">ii", data, 8)
    struct.pack_into(">ii", data, 8, relative, position + 1)  # still increasing, but not a batch start
    path.write_bytes(bytes(data))


def _wrong_offset(path: Path) -> None:
    data = bytearray(path.read_bytes())
    relative, position = struct.unpack_from(">ii", data, 8)
    struct.pack_into(">ii", data, 8, relative + 1, position)  # the position is right, the offset is not
    path.write_bytes(bytes(data))


INDEX_DAMAGE = {
    "missing": lambda path: path.unlink(),
    "empty": lambda path: path.write_bytes(b""),
    "partial_entry": lambda path: path.write_bytes(path.read_bytes()[:-3]),
    "random_bytes": _random_entries,
    "not_increasing": _swap_first_two,
    "position_beyond_file": _position_beyond_file,
    "not_a_batch_start": _shifted_position,
    "names_wrong_offset": _wrong_offset,
}


@pytest.mark.parametrize("damage", sorted(INDEX_DAMAGE))
@pytest.mark.parametrize("segment", [0, 12], ids=["closed_segment", "active_segment"])
def test_damaged_offset_indexes_are_rebuilt_even_after_a_clean_shutdown(
    make_log: LogFactory, damage: str, segment: int
) -> None:
    log = crashed(make_log, {"segment.bytes": "4000", "index.interval.bytes": "0"}, 8)
    assert log.segment_base_offsets() == [0, 12]
    log.close()
    index = segment_path(log, segment, ".index")
    good = index.read_bytes()
    INDEX_DAMAGE[damage](index)
    reopened = make_log.reopen(log, close=False)
    assert reopened.had_clean_shutdown
    assert_consistent(reopened, 24)
    reopened.close()
    assert index.read_bytes() == good  # written again, as it should be


def test_damaged_time_index_is_rebuilt(make_log: LogFactory) -> None:
    log = make_log({"segment.bytes": "4000", "index.interval.bytes": "0"})
    for i in range(8):  # batch i: offsets 3i..3i+2, timestamps T+10i..T+10i+2
        log.append(batch_of_size(BATCH, record_size=313, base_timestamp=BASE_TIMESTAMP + 10 * i))
    log.close()
    index = segment_path(log, 0, ".timeindex")
    good = index.read_bytes()
    index.write_bytes(struct.pack(">qiqi", BASE_TIMESTAMP + 50, 0, BASE_TIMESTAMP + 40, 3))  # going down
    reopened = make_log.reopen(log, close=False)
    for i in range(8):
        assert reopened.offset_for_timestamp(BASE_TIMESTAMP + 10 * i) == (3 * i, BASE_TIMESTAMP + 10 * i + 2)
    assert index.read_bytes() == good


# -- checkpoints and leftovers -------------------------------------------------------------------------


def test_epoch_cache_is_rebuilt_from_batches_when_its_file_is_lost(make_log: LogFactory) -> None:
    log = make_log({"segment.bytes": "2000"})
    for epoch in (0, 0, 3, 3, 5):
        log.append(batch(), leader_epoch=epoch)
    expected = log.leader_epoch_cache.entries
    log.close()
    (log.directory / "leader-epoch-checkpoint").write_text("garbage\n")
    reopened = make_log.reopen(log, close=False)
    assert reopened.leader_epoch_cache.entries == expected == [(0, 0), (3, 6), (5, 12)]
    assert (log.directory / "leader-epoch-checkpoint").read_text() == "0\n3\n0 0\n3 6\n5 12\n"
    (log.directory / "leader-epoch-checkpoint").unlink()
    again = make_log.reopen(reopened, close=False)  # unclean this time
    assert again.leader_epoch_cache.entries == expected


def test_recovery_adds_epochs_found_in_batches_and_drops_entries_past_the_end(make_log: LogFactory) -> None:
    log = make_log()
    log.append(batch(), leader_epoch=1)
    checkpoint = log.directory / "leader-epoch-checkpoint"
    older = checkpoint.read_text()
    log.append(batch(), leader_epoch=2)
    log.assign_epoch(7, 100)  # an entry beyond what the log will hold
    checkpoint.write_text(older)  # as if the newer checkpoints never reached the disk
    reopened = make_log.reopen(log, close=False)
    assert reopened.leader_epoch_cache.entries == [(1, 0), (2, 3)]
    log2 = make_log(name="other-0")
    log2.append(batch(), leader_epoch=1)
    log2.assign_epoch(7, 100)
    reopened2 = make_log.reopen(log2, close=False)
    assert reopened2.leader_epoch_cache.entries == [(1, 0)]


def test_garbage_recovery_point_means_a_full_recovery(make_log: LogFactory) -> None:
    log = crashed(make_log, {"segment.bytes": "2000"}, 4)
    log.close()
    (log.directory / RECOVERY_POINT_FILE).write_text("what\n")
    with segment_path(log, 0).open("ab") as file:
        file.write(b"junk")  # only a full recovery notices this
    reopened = make_log.reopen(log, close=False)
    assert not reopened.had_clean_shutdown
    assert segment_path(log, 0).stat().st_size == 2 * BATCH
    # Segment 0 was cut (after its batches), so, as in Kafka, the segments after it were dropped.
    assert reopened.segment_base_offsets() == [0]
    assert_consistent(reopened, 6)


def test_leftovers_are_cleaned_and_foreign_files_kept(make_log: LogFactory) -> None:
    log = crashed(make_log, {}, 2)
    log.close()
    (log.directory / "leader-epoch-checkpoint.tmp").write_text("half")
    orphan = segment_path(log, 500, ".index")
    orphan.write_bytes(b"")
    snapshot = log.directory / f"{6:020d}.snapshot"
    snapshot.write_bytes(b"producer state")
    reopened = make_log.reopen(log, close=False)
    assert not (log.directory / "leader-epoch-checkpoint.tmp").exists() and not orphan.exists()
    assert snapshot.read_bytes() == b"producer state"
    assert_consistent(reopened, 6)


def test_log_start_beyond_the_recovered_end_restarts_the_log_there(make_log: LogFactory) -> None:
    log = crashed(make_log, {}, 4)
    log.high_watermark = 12
    log.increment_log_start_offset(10)
    path = segment_path(log, 0)
    os.truncate(path, BATCH)  # the disk lost everything after the first batch
    reopened = make_log.reopen(log, close=False)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (10, 10)
    assert (log.directory / LOG_START_FILE).read_text() == "0\n1\ntopic 0 10\n"
    assert reopened.append(batch()).first_offset == 10


def test_an_empty_directory_opens_as_an_empty_log(make_log: LogFactory) -> None:
    log = make_log()
    assert (log.log_start_offset, log.log_end_offset, log.size_in_bytes) == (0, 0, 0)
    assert log.read(0, 100).regions == ()
    assert segment_path(log, 0).exists()


def test_a_new_log_writes_and_fsyncs_nothing_but_its_segment(
    make_log: LogFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Creating a topic of many partitions creates that many logs at once: each must be cheap.
    fsyncs: list[int] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        fsyncs.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    log = make_log()
    assert fsyncs == []
    assert sorted(p.name for p in log.directory.iterdir()) == ["00000000000000000000.log"]
    monkeypatch.setattr(os, "fsync", real_fsync)
    crashed_at_once = make_log.reopen(log, close=False)
    assert not crashed_at_once.had_clean_shutdown
    assert_consistent(crashed_at_once, 0)
    assert crashed_at_once.append(batch()).first_offset == 0
    again = make_log.reopen(crashed_at_once)
    assert again.had_clean_shutdown
    assert_consistent(again, 3)
