"""Log compaction: the cleaner keeps the latest record of each key, in place, crash-safely."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import backbone.log.cleaner as cleaner_module
from backbone.log import Log
from backbone.log.append import validate_producer_records
from backbone.log.cleaner import LogCleaner
from backbone.log.cleaner_files import CLEANER_CHECKPOINT_FILE, SWAP_SUFFIX, write_swap_end
from backbone.log.compaction import DELETE_HORIZON_FLAG
from backbone.log.config import LogConfig
from backbone.log.files import fsync_dir
from backbone.log.segment import Segment
from backbone.protocol.compression import Codec
from backbone.protocol.errors import InvalidRecordError
from backbone.protocol.record_batch import check_batch
from backbone.protocol.records import KEY, OFFSET, TIMESTAMP, VALUE, RecordBatchBuilder, decode_batches
from tests.helpers.batches import BASE_TIMESTAMP, LogFactory, iter_batches, read_header_fields

pytestmark = pytest.mark.unit

DAY = 86_400_000
# About three one-record batches per segment.
COMPACTED = {"cleanup.policy": "compact", "segment.bytes": "250"}


@pytest.fixture
def cleaner(make_log: LogFactory) -> LogCleaner:
    return LogCleaner(clock=make_log.clock)


Entry = tuple[bytes | None, bytes | None]


def keyed_batch(
    entries: list[Entry],
    codec: int = Codec.NONE,
    *,
    timestamp: int = BASE_TIMESTAMP,
    producer: tuple[int, int, int] | None = None,
) -> bytes:
    builder = RecordBatchBuilder(codec)
    if producer is not None:
        builder.set_producer(*producer)
    for i, (key, value) in enumerate(entries):
        builder.append(key, value, timestamp=timestamp + i)
    return builder.build()


def append_each(log: Log, entries: list[Entry]) -> None:
    """One batch per record."""
    for entry in entries:
        log.append(keyed_batch([entry]))


def contents(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record the log holds, in order."""
    data = log.read(log.log_start_offset, 1 << 30).to_bytes()
    return [(r[OFFSET], r[KEY], r[VALUE]) for batch in decode_batches(data) for r in batch.records]


def latest_per_key(records: list[tuple[int, bytes | None, bytes | None]]) -> list[tuple[int, bytes, bytes]]:
    latest = {key: (offset, key, value) for offset, key, value in records}
    return sorted(latest.values())


def roll(log: Log) -> None:
    """Close the active segment by filling it, with records of keys no test looks at."""
    base = log.segment_base_offsets()[-1]
    i = 0
    while log.segment_base_offsets()[-1] == base:
        log.append(keyed_batch([(f"filler-{base}-{i}".encode(), b"x")]))
        i += 1


def assert_valid_batches(log: Log) -> None:
    data = log.read(log.log_start_offset, 1 << 30).to_bytes()
    for _, batch in iter_batches(data):
        check_batch(batch)


# -- what is kept --------------------------------------------------------------------------------------


def test_only_the_latest_value_of_each_key_is_kept_at_its_offset(
    make_log: LogFactory, cleaner: LogCleaner
) -> None:
    log = make_log(COMPACTED)
    entries = [(f"key-{i % 4}".encode(), f"value-{i}".encode()) for i in range(20)]
    append_each(log, entries)
    roll(log)
    before = contents(log)
    active_base = log.segment_base_offsets()[-1]
    active_before = [r for r in before if r[0] >= active_base]

    result = cleaner.clean(log)

    assert result is not None and result.map_end == active_base
    after = contents(log)
    closed_before = [r for r in before if r[0] < active_base]
    assert [r for r in after if r[0] < active_base] == latest_per_key(closed_before)
    for offset, key, value in after:  # every survivor is the very record that was at that offset
        assert (offset, key, value) in before
    assert [r for r in after if r[0] >= active_base] == active_before  # the active segment is untouched
    assert log.segment_base_offsets()[-1] == active_base
    assert log.log_end_offset == before[-1][0] + 1
    assert_valid_batches(log)
    assert result.bytes_after < result.bytes_before / 2
    checkpoint = (log.directory / CLEANER_CHECKPOINT_FILE).read_text().split()
    assert checkpoint[-1] == str(active_base)


def test_reads_at_removed_offsets_start_at_the_next_kept_record(
    make_log: LogFactory, cleaner: LogCleaner
) -> None:
    log = make_log(COMPACTED)
    append_each(log, [(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"b", b"2")])
    roll(log)
    cleaner.clean(log)
    assert contents(log)[:2] == [(2, b"a", b"2"), (3, b"b", b"2")]
    first = next(iter(decode_batches(log.read(0, 1).to_bytes())))
    assert first.records[0][OFFSET] == 2


def test_a_second_clean_compacts_new_records_against_the_cleaned_ones(
    make_log: LogFactory, cleaner: LogCleaner
) -> None:
    log = make_log(COMPACTED)
    append_each(log, [(key, b"1") for key in (b"a", b"b", b"c")] * 4)
    roll(log)
    cleaner.clean(log)
    append_each(log, [(b"a", b"2"), (b"c", b"2")])
    roll(log)
    segments_before = len(log.segment_base_offsets())
    cleaner.clean(log)
    # Segments the first clean shrank are merged with their neighbours, each group within segment.bytes.
    assert len(log.segment_base_offsets()) < segments_before
    assert all(segment.size <= 250 for segment in log._segments)
    kept = {key: value for _, key, value in contents(log) if not key.startswith(b"filler")}
    assert kept == {b"a": b"2", b"b": b"1", b"c": b"2"}
    assert sum(1 for _, key, _ in contents(log) if key == b"a") == 1


def test_nothing_at_or_above_the_upper_bound_is_compacted(make_log: LogFactory, cleaner: LogCleaner) -> None:
    log = make_log(COMPACTED)
    append_each(log, [(b"a", b"1"), (b"a", b"2"), (b"a", b"3"), (b"a", b"4"), (b"a", b"5"), (b"a", b"6")])
    roll(log)
    log.cleaner_upper_bound = lambda: 3  # the broker passes its high watermark
    cleaner.clean(log)
    values = [value for _, key, value in contents(log) if key == b"a"]
    # Offsets 0-2 were compacted among themselves only; 3 and later are above the bound.
    assert values == [b"3", b"4", b"5", b"6"]
    assert (log.directory / CLEANER_CHECKPOINT_FILE).read_text().split()[-1] == "3"


def test_records_younger_than_the_compaction_lag_are_left_alone(
    make_log: LogFactory, cleaner: LogCleaner
) -> None:
    log = make_log({**COMPACTED, "min.compaction.lag.ms": str(DAY)})
    append_each(log, [(b"a", b"1"), (b"a", b"2"), (b"a", b"3"), (b"a", b"4")])
    roll(log)
    assert cleaner.clean(log) is None
    assert [v for _, k, v in contents(log) if k == b"a"] == [b"1", b"2", b"3", b"4"]
    make_log.clock.advance(DAY + 1)
    cleaner.clean(log)
    assert [v for _, k, v in contents(log) if k == b"a"] == [b"4"]


def test_logs_below_the_dirty_ratio_wait_and_the_dirtiest_goes_first(
    make_log: LogFactory, cleaner: LogCleaner
) -> None:
    deleting = make_log({"segment.bytes": "250"}, name="plain-0")
    append_each(deleting, [(b"a", b"1"), (b"a", b"2"), (b"a", b"3"), (b"a", b"4")])
    roll(deleting)
    lazy = make_log({**COMPACTED, "min.cleanable.dirty.ratio": "0.99"}, name="lazy-0")
    eager = make_log({**COMPACTED, "min.cleanable.dirty.ratio": "0.01"}, name="eager-0")
    for log in (lazy, eager):
        append_each(log, [(b"a", b"1"), (b"a", b"2"), (b"a", b"3"), (b"a", b"4")])
        roll(log)
        cleaner.clean(log)  # everything is clean now
        append_each(log, [(b"a", b"5")])
        roll(log)
    assert cleaner.clean_logs([deleting, lazy, eager]) == 1
    assert [v for _, k, v in contents(eager) if k == b"a"] == [b"5"]
    assert [v for _, k, v in contents(lazy) if k == b"a"] == [b"4", b"5"]
    assert len([k for _, k, _ in contents(deleting) if k == b"a"]) == 4  # not compacted at all


# -- tombstones ----------------------------------------------------------------------------------------


def test_tombstones_live_delete_retention_ms_after_the_clean_that_first_saw_them(
    make_log: LogFactory, cleaner: LogCleaner
) -> None:
    log = make_log({**COMPACTED, "delete.retention.ms": str(DAY)})
    append_each(log, [(b"a", b"1"), (b"b", b"1"), (b"a", None)])
    roll(log)
    cleaned_at = make_log.clock.now_ms
    cleaner.clean(log)
    kept = [(k, v) for _, k, v in contents(log) if not k.startswith(b"filler")]
    assert kept == [(b"b", b"1"), (b"a", None)]  # the tombstone stays, the value it deletes goes
    data = log.read(2, 1).to_bytes()
    fields = read_header_fields(data)
    assert fields[5] & DELETE_HORIZON_FLAG and fields[7] == cleaned_at + DAY  # attributes, base timestamp
    tombstone = next(iter(decode_batches(data))).records[0]
    assert tombstone[TIMESTAMP] == BASE_TIMESTAMP  # record timestamps survive the new base timestamp

    make_log.clock.advance(DAY - 1)
    assert cleaner.clean_logs([log]) == 0  # nothing dirty and the horizon has not come
    assert (b"a", None) in [(k, v) for _, k, v in contents(log)]
    make_log.clock.advance(1)
    assert cleaner.clean_logs([log]) == 1  # the horizon alone makes the log cleanable
    kept = [(k, v) for _, k, v in contents(log) if not k.startswith(b"filler")]
    assert kept == [(b"b", b"1")]
    assert_valid_batches(log)


# -- batch formats and producers -----------------------------------------------------------------------


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD])
def test_compressed_batches_are_rewritten_with_their_codec(
    make_log: LogFactory, cleaner: LogCleaner, codec: Codec
) -> None:
    log = make_log({**COMPACTED, "segment.bytes": "2000"})
    log.append(keyed_batch([(b"a", b"1" * 50), (b"b", b"1" * 50), (b"c", b"1" * 50)], codec))
    log.append(keyed_batch([(b"a", b"2" * 50), (b"d", b"2" * 50)], codec, timestamp=BASE_TIMESTAMP + 10))
    roll(log)
    cleaner.clean(log)
    data = log.read(0, 1 << 20).to_bytes()
    batches = list(decode_batches(data))
    first = batches[0]
    assert first.header.compression == codec
    assert (first.header.base_offset, first.header.last_offset) == (0, 2)  # offsets kept, gap at 0
    assert [(r[OFFSET], r[KEY], r[TIMESTAMP]) for r in first.records] == [
        (1, b"b", BASE_TIMESTAMP + 1),
        (2, b"c", BASE_TIMESTAMP + 2),
    ]
    assert batches[1].header == read_header_fields_as_header(data, batches[1].header.base_offset)
    assert [r[VALUE] for r in batches[1].records] == [b"2" * 50, b"2" * 50]
    assert_valid_batches(log)


def read_header_fields_as_header(data: bytes, base_offset: int) -> object:
    """The second batch was kept byte for byte: its header is the one decode_batches saw."""
    for _, batch in iter_batches(data):
        if read_header_fields(batch)[0] == base_offset:
            return check_batch(batch)
    raise AssertionError(f"no batch at {base_offset}")


def test_a_producers_last_batch_stays_even_when_emptied(make_log: LogFactory, cleaner: LogCleaner) -> None:
    log = make_log(COMPACTED)
    log.append(keyed_batch([(b"a", b"1"), (b"b", b"1")], producer=(7, 0, 0)))
    log.append(keyed_batch([(b"a", b"2"), (b"b", b"2")], producer=(7, 0, 2)))
    log.append(keyed_batch([(b"a", b"3"), (b"b", b"3")]))  # supersedes both of producer 7's batches
    roll(log)
    cleaner.clean(log)
    data = log.read(0, 1 << 20).to_bytes()
    headers = [check_batch(batch) for _, batch in iter_batches(data)]
    producer_batches = [h for h in headers if h.producer_id == 7]
    assert len(producer_batches) == 1  # the first batch is gone entirely
    last = producer_batches[0]
    assert (last.base_offset, last.last_offset, last.record_count) == (2, 3, 0)
    assert (last.producer_epoch, last.base_sequence, last.last_sequence) == (0, 2, 3)
    # The producer state rebuilt from the log's headers still knows the producer's last sequence.
    seen = [h for h in log.iter_batch_headers(0) if h.producer_id == 7]
    assert seen[-1].last_sequence == 3
    assert [(k, v) for _, k, v in contents(log)][:2] == [(b"a", b"3"), (b"b", b"3")]


def test_a_compacted_log_refuses_records_without_a_key(make_log: LogFactory) -> None:
    log = make_log(COMPACTED)
    keyless = keyed_batch([(b"a", b"1"), (None, b"2"), (b"b", b"3"), (None, b"4")], Codec.LZ4)
    with pytest.raises(InvalidRecordError, match="without key") as raised:
        log.append(keyless)
    # As Kafka: the batch fails whole, and names exactly its keyless records (KIP-467).
    assert [index for index, _ in raised.value.record_errors] == [1, 3]
    assert all("without key" in (message or "") for _, message in raised.value.record_errors)
    assert log.log_end_offset == 0
    validate_producer_records(keyless, LogConfig(), "plain-0")  # a deleting log takes it
    log.append(keyed_batch([(b"a", None)]))  # a tombstone has a key: fine


# -- concurrency and crashes ---------------------------------------------------------------------------


def test_regions_read_before_a_clean_stay_readable(make_log: LogFactory, cleaner: LogCleaner) -> None:
    log = make_log(COMPACTED)
    append_each(log, [(b"a", b"1"), (b"a", b"2"), (b"a", b"3"), (b"a", b"4")])
    roll(log)
    in_flight = log.read(0, 1 << 20)
    expected = in_flight.to_bytes()
    cleaner.clean(log)
    assert in_flight.to_bytes() == expected  # the replaced files are unlinked, not gone
    assert contents(log)[0][:2] == (3, b"a")


def test_a_truncation_during_a_clean_makes_the_swap_decline(
    make_log: LogFactory, cleaner: LogCleaner
) -> None:
    log = make_log(COMPACTED)
    append_each(log, [(b"a", b"1"), (b"a", b"2"), (b"a", b"3"), (b"a", b"4")])
    roll(log)
    part = cleaner.cleanable_part(log, make_log.clock.now_ms)
    assert part is not None
    log.truncate_to(2)
    assert cleaner._clean_part(part, make_log.clock.now_ms) is None
    assert [v for _, _, v in contents(log)] == [b"1", b"2"]
    assert not [p for p in log.directory.iterdir() if p.name.endswith((".cleaned", ".swap"))]


class SimulatedCrash(Exception):
    """Stands for the process dying at that point."""


def _crash_at(stage: str, group_ends: list[int]) -> Callable[[Segment, list[Segment], int], None]:
    """A stand-in for the cleaner's file swap that stops where a crash would (noting where the group ends)."""

    def swap(new: Segment, old: list[Segment], end: int) -> None:
        group_ends.append(end)
        directory = new.log_path.parent
        if stage == "cleaned":
            raise SimulatedCrash
        write_swap_end(directory, new.base_offset, end)
        new.rename_files(SWAP_SUFFIX)
        fsync_dir(directory)
        if stage == "committed":
            raise SimulatedCrash
        old[0].delete()
        if stage == "first_old_deleted":
            raise SimulatedCrash
        for segment in old[1:]:
            segment.delete()
        if stage == "old_deleted":
            raise SimulatedCrash
        new.offset_index.path.rename(directory / new.offset_index.path.name.removesuffix(SWAP_SUFFIX))
        raise SimulatedCrash

    return swap


@pytest.mark.parametrize(
    "stage", ["cleaned", "committed", "first_old_deleted", "old_deleted", "index_renamed"]
)
def test_a_crash_during_a_swap_is_rolled_back_or_finished_on_open(
    make_log: LogFactory, cleaner: LogCleaner, monkeypatch: pytest.MonkeyPatch, stage: str
) -> None:
    log = make_log(COMPACTED)
    append_each(log, [(f"key-{i % 3}".encode(), f"value-{i}".encode()) for i in range(12)])
    roll(log)
    cleaner.clean(log)  # shrinks the segments, so the next clean merges several into one
    append_each(log, [(f"key-{i % 3}".encode(), f"again-{i}".encode()) for i in range(6)])
    roll(log)
    before = contents(log)
    end = log.log_end_offset
    active_base = log.segment_base_offsets()[-1]
    latest = latest_per_key([r for r in before if r[0] < active_base])
    group_ends: list[int] = []
    monkeypatch.setattr(cleaner_module, "_swap_files", _crash_at(stage, group_ends))
    with pytest.raises(SimulatedCrash):
        cleaner.clean(log)

    reopened = make_log.reopen(log, close=False)

    after = contents(reopened)
    assert reopened.log_end_offset == end
    if stage == "cleaned":
        assert after == before  # not committed: the old segments are intact and the cleaned files gone
    else:
        # Committed: the first group (several segments the first clean shrank) is swapped in; the rest of
        # the log is as it was.
        end = group_ends[0]
        assert [r for r in after if r[0] < end] == [r for r in latest if r[0] < end]
        assert [r for r in after if r[0] >= end] == [r for r in before if r[0] >= end]
        assert len([base for base in log.segment_base_offsets() if base < end]) > 1
        assert [r for r in after if r[0] >= active_base] == [r for r in before if r[0] >= active_base]
    offsets = [offset for offset, _, _ in after]
    assert offsets == sorted(set(offsets))
    leftovers = (".cleaned", ".swap", ".swap-end")
    assert not [p for p in reopened.directory.iterdir() if p.name.endswith(leftovers)]
    assert_valid_batches(reopened)
    for offset in offsets:  # the rebuilt indexes find every kept record
        assert next(iter(decode_batches(reopened.read(offset, 1).to_bytes()))).header.last_offset >= offset
    reopened.append(keyed_batch([(b"after", b"crash")]))
    assert contents(reopened)[-1][1:] == (b"after", b"crash")
    monkeypatch.undo()
    cleaner.clean(reopened)  # the next clean finishes the job
    assert [r for r in contents(reopened) if r[0] < active_base] == latest


def test_a_log_past_max_compaction_lag_is_cleaned_whatever_its_ratio(
    make_log: LogFactory, cleaner: LogCleaner
) -> None:
    log = make_log({**COMPACTED, "min.cleanable.dirty.ratio": "1", "max.compaction.lag.ms": str(DAY)})
    append_each(log, [(b"a", b"1"), (b"a", b"2"), (b"a", b"3"), (b"a", b"4")])
    roll(log)
    cleaner.clean(log)
    append_each(log, [(b"a", b"5")])
    roll(log)
    assert cleaner.clean_logs([log]) == 0  # dirty share below 1
    make_log.clock.advance(DAY + 1)
    assert cleaner.clean_logs([log]) == 1
    assert [v for _, k, v in contents(log) if k == b"a"] == [b"5"]


def test_a_follower_copies_a_compacted_log_with_its_gaps_and_empty_batches(
    make_log: LogFactory, cleaner: LogCleaner
) -> None:
    leader = make_log(COMPACTED, name="leader-0")
    leader.append(keyed_batch([(b"a", b"1"), (b"b", b"1")], producer=(7, 0, 0)))
    append_each(leader, [(b"a", b"2"), (b"b", b"2"), (b"c", None)])
    roll(leader)
    cleaner.clean(leader)
    follower = make_log(COMPACTED, name="follower-0")
    position = 0
    while position < leader.log_end_offset:
        data = leader.read(position, 1 << 20).to_bytes()
        follower.append_as_follower(data)
        position = follower.log_end_offset
    assert contents(follower) == contents(leader)
    assert follower.log_end_offset == leader.log_end_offset
    assert next(follower.iter_batch_headers(0)).record_count == 0  # producer 7's emptied batch


@pytest.mark.parametrize("damage", ["record", "base_offset"])
def test_a_log_with_a_damaged_batch_is_logged_and_left_alone(
    make_log: LogFactory, cleaner: LogCleaner, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    log = make_log(COMPACTED)
    append_each(log, [(b"a", b"1"), (b"a", b"2"), (b"a", b"3"), (b"a", b"4")])
    roll(log)
    first_segment = log.directory / f"{0:020d}.log"
    first_size = len(next(iter(iter_batches(first_segment.read_bytes())))[1])
    # A byte of the first batch's record (the CRC covers it), or the top byte of the second batch's base
    # offset (the CRC does not: the cleaner must see offsets going back).
    position = first_size - 5 if damage == "record" else first_size
    with first_segment.open("r+b") as file:
        file.seek(position)
        byte = file.read(1)
        file.seek(position)
        file.write(bytes([byte[0] ^ 0xFF]))
    other = make_log(COMPACTED, name="other-0")
    append_each(other, [(b"a", b"1"), (b"a", b"2")])
    roll(other)
    assert cleaner.clean_logs([log, other]) == 1  # the healthy log is cleaned all the same
    assert "event=log_uncleanable" in caplog.text
    caplog.clear()
    append_each(log, [(b"a", b"5")])
    roll(log)
    assert cleaner.clean_logs([log]) == 0
    assert "log_uncleanable" not in caplog.text  # not tried again


def test_a_truncation_below_the_cleaned_part_makes_the_records_after_it_dirty(
    make_log: LogFactory, cleaner: LogCleaner
) -> None:
    log = make_log(COMPACTED)
    append_each(log, [(b"a", b"1"), (b"a", b"2"), (b"a", b"3"), (b"a", b"4")])
    roll(log)
    cleaner.clean(log)
    checkpoint = log.directory / CLEANER_CHECKPOINT_FILE
    assert int(checkpoint.read_text().split()[-1]) > 3
    log.truncate_to(3)  # a follower whose leader's history diverged
    assert checkpoint.read_text().split()[-1] == "3"


def test_a_clean_keeping_more_batches_than_one_writev_takes(
    make_log: LogFactory, cleaner: LogCleaner
) -> None:
    # Thousands of small batches whose records all stay: the cleaned segment is written from more buffers
    # than the kernel's IOV_MAX (1024) allows in one writev; every clean failed with EINVAL.
    log = make_log({"cleanup.policy": "compact", "segment.bytes": "150000"})
    entries = [(f"key-{i}".encode(), b"v") for i in range(1500)] + [(b"key-0", b"newer")]
    for entry in entries:
        log.append(keyed_batch([entry], Codec.GZIP))
    roll(log)
    before = contents(log)

    assert cleaner.clean(log) is not None

    assert contents(log) == [r for r in before if r[1] != b"key-0" or r[2] == b"newer"]
    assert_valid_batches(log)
