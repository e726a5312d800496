"""The async consumer against the fake cluster: positions, seeking, resets, control batches, prefetching."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import pytest

from backbone.client.consumer.consumer import AsyncConsumer
from backbone.client.consumer.fetcher import (
    CompletedFetch,
    Fetcher,
    PartitionState,
    next_fetch_offset,
    scan_batches,
)
from backbone.client.structs import (
    ConsumerRecord,
    OffsetAndTimestamp,
    RecordList,
    TimestampType,
    TopicPartition,
)
from backbone.protocol.compression import Codec
from backbone.protocol.errors import OffsetOutOfRangeError
from backbone.protocol.records import RecordBatchBuilder, decode_batch
from backbone.wire.errors import IllegalStateError, KafkaTimeoutError
from tests.helpers.fake_cluster import FakeCluster

pytestmark = [pytest.mark.unit, pytest.mark.fake_topic("t", 2)]

TP = TopicPartition("t", 0)
T0 = 1_700_000_000_000


def batch(
    start: int, count: int, codec: Codec = Codec.NONE, *, producer_id: int = -1, transactional: bool = False
) -> bytes:
    builder = RecordBatchBuilder(
        codec, producer_id=producer_id, producer_epoch=0, transactional=transactional
    )
    for i in range(start, start + count):
        builder.append(b"k%d" % i, b"v%d" % i, [("h", b"%d" % i)], timestamp=T0 + i * 10)
    return builder.build()


def marker(producer_id: int, commit: bool) -> bytes:
    builder = RecordBatchBuilder(producer_id=producer_id, producer_epoch=0, transactional=True, control=True)
    builder.append(struct.pack(">hh", 0, 1 if commit else 0), struct.pack(">hi", 0, 0), timestamp=T0)
    return builder.build()


def consumer(fake: FakeCluster, **options: Any) -> AsyncConsumer:
    options.setdefault("auto_offset_reset", "earliest")
    options.setdefault("fetch_max_wait_ms", 50)
    return AsyncConsumer(bootstrap_servers=fake.bootstrap, **options)


async def poll_values(c: AsyncConsumer, expected: int, rounds: int = 50) -> list[ConsumerRecord]:
    records: list[ConsumerRecord] = []
    for _ in range(rounds):  # bounded
        for part in (await c.poll(timeout_ms=200)).values():
            records.extend(part)
        if len(records) >= expected:
            break
    return records


@pytest.mark.parametrize("codec", list(Codec))
async def test_records_come_back_whole_in_offset_order(fake: FakeCluster, codec: Codec) -> None:
    fake.append_raw("t", 0, batch(0, 5, codec))
    fake.append_raw("t", 0, batch(5, 5, codec))
    async with consumer(fake) as c:
        c.assign([TP])
        records = await poll_values(c, 10)
    assert [r.offset for r in records] == list(range(10))
    first = records[0]
    assert first == ConsumerRecord("t", 0, 0, T0, TimestampType.CREATE_TIME, b"k0", b"v0", (("h", b"0"),))


async def test_latest_reads_only_new_records(fake: FakeCluster) -> None:
    fake.append_raw("t", 0, batch(0, 3))
    async with consumer(fake, auto_offset_reset="latest") as c:
        c.assign([TP])
        assert await c.position(TP) == 3
        fake.append_raw("t", 0, batch(3, 2))
        records = await poll_values(c, 2)
    assert [r.value for r in records] == [b"v3", b"v4"]


async def test_seek_lands_inside_a_compressed_batch(fake: FakeCluster) -> None:
    fake.append_raw("t", 0, batch(0, 10, Codec.LZ4))
    async with consumer(fake) as c:
        c.assign([TP])
        c.seek(TP, 7)
        records = await poll_values(c, 3)
        assert [r.offset for r in records] == [7, 8, 9]
        assert await c.position(TP) == 10


async def test_seek_to_beginning_end_and_timestamp(fake: FakeCluster) -> None:
    fake.append_raw("t", 0, batch(0, 10))
    async with consumer(fake) as c:
        c.assign([TP])
        c.seek_to_end(TP)
        assert await c.position(TP) == 10
        c.seek_to_beginning()
        assert await c.position(TP) == 0
        c.seek_to_timestamp(T0 + 45, TP)  # records are 10 ms apart: the first at or after is offset 5
        assert await c.position(TP) == 5
        assert [r.offset for r in await poll_values(c, 5)] == [5, 6, 7, 8, 9]


async def test_a_seek_right_after_assign_does_not_wait_for_a_fetch_from_the_reset_position(
    fake: FakeCluster,
) -> None:
    # auto.offset.reset applies when records or a position are first asked for, not at assign(): else the
    # consumer would already be long-polling at the end (fetch.max.wait.ms) when the seek comes.
    fake.append_raw("t", 0, batch(0, 5))
    async with consumer(fake, auto_offset_reset="latest", fetch_max_wait_ms=5_000) as c:
        c.assign([TP])
        await asyncio.sleep(0.2)  # time enough for a reset and a fetch to start, were they sent at assign()
        c.seek(TP, 0)
        started = asyncio.get_running_loop().time()
        records = await c.poll(timeout_ms=3_000)
        waited = asyncio.get_running_loop().time() - started
    assert [r.offset for r in records.get(TP, [])] == [0, 1, 2, 3, 4]
    assert waited < 2.5, f"the first poll waited {waited:.1f} s"


async def test_without_a_seek_the_reset_applies_at_the_first_poll_or_position(fake: FakeCluster) -> None:
    fake.append_raw("t", 0, batch(0, 5))
    async with consumer(fake, auto_offset_reset="latest") as c:
        c.assign([TP])
        assert await c.position(TP) == 5
    async with consumer(fake, auto_offset_reset="earliest") as c:
        c.assign([TP])
        assert [r.offset for r in await poll_values(c, 5)] == [0, 1, 2, 3, 4]


async def test_offset_lookups(fake: FakeCluster) -> None:
    fake.append_raw("t", 0, batch(0, 10))
    other = TopicPartition("t", 1)
    async with consumer(fake) as c:
        assert await c.beginning_offsets([TP, other]) == {TP: 0, other: 0}
        assert await c.end_offsets([TP, other]) == {TP: 10, other: 0}
        found = await c.offsets_for_times({TP: T0 + 31, other: T0})
        assert found == {TP: OffsetAndTimestamp(4, T0 + 40), other: None}
        assert await c.partitions_for_topic("t") == {0, 1}
        assert "t" in await c.topics()


async def test_offset_lookups_follow_a_moved_leader_instead_of_failing(fake: FakeCluster) -> None:
    fake.append_raw("t", 0, batch(0, 3))
    async with consumer(fake, retry_backoff_ms=10) as c:
        assert await c.end_offsets([TP]) == {TP: 3}
        # The consumer's metadata still names broker 0, which now answers NOT_LEADER_OR_FOLLOWER.
        fake.move_leader("t", 0, 1)
        fake.append_raw("t", 0, batch(3, 2))
        assert await c.end_offsets([TP]) == {TP: 5}
        assert await c.beginning_offsets([TP]) == {TP: 0}


async def test_an_offset_lookup_that_keeps_failing_gives_up_at_the_api_timeout(fake: FakeCluster) -> None:
    async with consumer(fake, retry_backoff_ms=10, default_api_timeout_ms=300) as c:
        await c.end_offsets([TP])
        fake.partition("t", 0).leader = 7  # a broker no metadata answer will name as reachable
        with pytest.raises(KafkaTimeoutError, match=r"default\.api\.timeout\.ms"):
            await c.end_offsets([TP])


async def poll_capped(c: AsyncConsumer, cap: int, expected: int) -> list[ConsumerRecord]:
    """Poll until `expected` records came, checking that no poll returned more than `cap`."""
    seen: list[ConsumerRecord] = []
    for _ in range(50):  # bounded
        polled = await c.poll(timeout_ms=200)
        assert sum(len(v) for v in polled.values()) <= cap
        seen.extend(polled.get(TP, []))
        if len(seen) >= expected:
            break
    return seen


async def test_max_poll_records_splits_batches_without_losing_records(fake: FakeCluster) -> None:
    for start in range(0, 30, 10):
        fake.append_raw("t", 0, batch(start, 10))
    async with consumer(fake, max_poll_records=4) as c:
        c.assign([TP])
        seen = await poll_capped(c, 4, 30)
        assert [r.offset for r in seen] == list(range(30))
        assert await c.position(TP) == 30


async def test_reset_none_raises_out_of_range(fake: FakeCluster) -> None:
    fake.append_raw("t", 0, batch(0, 3))
    async with consumer(fake, auto_offset_reset="none") as c:
        c.assign([TP])
        with pytest.raises(OffsetOutOfRangeError, match=r"no position and auto.offset.reset is none"):
            await poll_values(c, 1)
        c.seek(TP, 50)
        with pytest.raises(
            OffsetOutOfRangeError, match=r"offset 50 is out of range for t-0 \(log start 0, end 3\)"
        ):
            await poll_values(c, 1)
        c.seek(TP, 1)
        assert [r.offset for r in await poll_values(c, 2)] == [1, 2]


async def test_an_out_of_range_position_resets_per_policy(fake: FakeCluster) -> None:
    fake.append_raw("t", 0, batch(0, 3))
    async with consumer(fake, auto_offset_reset="earliest") as c:
        c.assign([TP])
        c.seek(TP, 99)
        assert [r.offset for r in await poll_values(c, 3)] == [0, 1, 2]


async def test_control_batches_are_skipped(fake: FakeCluster) -> None:
    fake.append_raw("t", 0, batch(0, 2, producer_id=9, transactional=True))
    fake.append_raw("t", 0, marker(9, commit=True))
    fake.append_raw("t", 0, batch(3, 2))
    async with consumer(fake) as c:
        c.assign([TP])
        records = await poll_values(c, 4)
        assert [r.offset for r in records] == [0, 1, 3, 4]
        assert await c.position(TP) == 5


async def test_fetches_run_ahead_of_poll(fake: FakeCluster) -> None:
    for start in range(0, 40, 10):
        fake.append_raw("t", 0, batch(start, 10))
    async with consumer(fake, max_partition_fetch_bytes=100, max_poll_records=10) as c:
        c.assign([TP])
        first = await c.poll(timeout_ms=2000)
        assert [r.offset for r in first[TP]] == list(range(10))
        state = c.fetcher.assignment[TP]
        for _ in range(200):  # bounded: up to 2 s
            if len(state.buffered) == 2:
                break
            await asyncio.sleep(0.01)
        # While the application held the first batch, the next two were fetched already.
        assert len(state.buffered) == 2
        assert state.fetch_position == 30 and state.position == 10


async def test_the_consumer_follows_a_moved_leader(fake: FakeCluster) -> None:
    fake.append_raw("t", 0, batch(0, 2))
    async with consumer(fake, retry_backoff_ms=10) as c:
        c.assign([TP])
        assert len(await poll_values(c, 2)) == 2
        fake.move_leader("t", 0, 1)
        fake.append_raw("t", 0, batch(2, 2))
        assert [r.offset for r in await poll_values(c, 2)] == [2, 3]


async def test_pause_holds_records_back_until_resume(fake: FakeCluster) -> None:
    fake.append_raw("t", 0, batch(0, 2))
    async with consumer(fake) as c:
        c.assign([TP])
        c.pause(TP)
        assert c.paused() == {TP}
        assert await c.poll(timeout_ms=200) == {}
        c.resume(TP)
        assert len(await poll_values(c, 2)) == 2


async def test_poll_waits_without_spinning_while_only_paused_partitions_hold_data(fake: FakeCluster) -> None:
    for start in range(0, 40, 10):
        fake.append_raw("t", 0, batch(start, 10))
    async with consumer(fake, max_partition_fetch_bytes=100, max_poll_records=10) as c:
        c.assign([TP])
        assert [r.offset for r in (await c.poll(timeout_ms=2000))[TP]] == list(range(10))
        state = c.fetcher.assignment[TP]
        for _ in range(200):  # bounded: up to 2 s
            if state.buffered:
                break
            await asyncio.sleep(0.01)
        assert state.buffered
        c.pause(TP)
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        ticker = asyncio.create_task(tick())
        assert await c.poll(timeout_ms=300) == {}
        ticker.cancel()
        assert ticks >= 5  # poll gave the event loop back while it waited (it used to spin on the data)
        c.resume(TP)
        assert (await c.poll(timeout_ms=2000))[TP][0].offset == 10


async def test_deserializers_apply_to_keys_and_values(fake: FakeCluster) -> None:
    fake.append_raw("t", 0, batch(0, 1))
    async with consumer(fake, key_deserializer=bytes.decode, value_deserializer=lambda v: v.upper()) as c:
        c.assign([TP])
        (record,) = await poll_values(c, 1)
    assert (record.key, record.value) == ("k0", b"V0")


async def test_misuse_is_explained(fake: FakeCluster) -> None:
    async with consumer(fake) as c:
        with pytest.raises(IllegalStateError, match="is not assigned to this consumer"):
            await c.position(TP)
        with pytest.raises(IllegalStateError, match="use assign"):
            c.subscribe(["t"])
        with pytest.raises(ValueError, match="must not be negative"):
            c.assign([TP])
            c.seek(TP, -1)


# -- decoding details, without a broker --------------------------------------------------------------


# The consumer decodes records as tuples, or (`record.regions`, the Spark source's reader) leaves records
# outside uniform runs undecoded until read: the same records either way.
REGIONS = pytest.mark.parametrize("regions", [False, True], ids=["tuples", "regions"])


def fetcher(**config: Any) -> Fetcher:
    base = {
        "auto.offset.reset": "earliest",
        "isolation.level": "read_uncommitted",
        "fetch.min.bytes": 1,
        "fetch.max.wait.ms": 500,
        "fetch.max.bytes": 1 << 20,
        "max.partition.fetch.bytes": 1 << 20,
        "check.crcs": True,
        "record.regions": False,
        "request.timeout.ms": 30_000,
        "retry.backoff.ms": 100,
    }
    base.update(config)
    return Fetcher(None, base, None)  # type: ignore[arg-type]


@REGIONS
def test_read_committed_drops_aborted_transactions(regions: bool) -> None:
    records = b"".join(
        [
            batch(0, 2, producer_id=5, transactional=True),  # offsets 0-1, aborted below
            marker(5, commit=False),  # offset 2
            batch(3, 2, producer_id=6, transactional=True),  # offsets 3-4, committed
            marker(6, commit=True),  # offset 5
            batch(6, 1),  # offset 6, not transactional
        ]
    )
    offsets = []
    base = 0
    for chunk in (batch(0, 2), marker(5, False), batch(3, 2), marker(6, True), batch(6, 1)):
        offsets.append(base)
        base += struct.unpack_from(">i", chunk, 23)[0] + 1
    # Give the batches their real base offsets, as a broker would have stored them.
    data = bytearray(records)
    pos = 0
    for offset in (0, 2, 3, 5, 6):
        struct.pack_into(">q", data, pos, offset)
        pos += struct.unpack_from(">i", data, pos + 8)[0] + 12
    for level, expected in (("read_committed", [3, 4, 6]), ("read_uncommitted", [0, 1, 3, 4, 6])):
        f = fetcher(**{"isolation.level": level, "record.regions": regions})
        state = PartitionState(position=0, fetch_position=7)
        f.assignment[TP] = state
        starts, _ = scan_batches(bytes(data))
        state.buffered.append(CompletedFetch(TP, state.generation, bytes(data), [(5, 0)], starts))
        taken = f.drain(100)[TP]
        assert [r.offset for r in taken] == expected, level
        assert state.position == 7
    assert next_fetch_offset(bytes(data)) == 7
    assert next_fetch_offset(bytes(data)[:-3]) == 6  # a partial last batch is not counted


@REGIONS
def test_a_timestamp_reset_skips_records_before_the_timestamp(regions: bool) -> None:
    # A broker may answer ListOffsets with the start of the batch holding the timestamp; the consumer
    # still returns nothing older than asked for, and stops filtering once it passed the timestamp.
    f = fetcher(**{"record.regions": regions})
    state = PartitionState(position=0, fetch_position=10, skip_before_timestamp=T0 + 25)
    f.assignment[TP] = state
    fixed = bytearray(batch(0, 5) + batch(5, 5))  # one records section holding two batches
    second = struct.unpack_from(">i", fixed, 8)[0] + 12
    struct.pack_into(">q", fixed, second, 5)
    starts, _ = scan_batches(bytes(fixed))
    state.buffered.append(CompletedFetch(TP, state.generation, bytes(fixed), None, starts))
    assert [r.offset for r in f.drain(100)[TP]] == [3, 4, 5, 6, 7, 8, 9]
    assert state.skip_before_timestamp is None


def test_record_lists_build_consumer_records_on_demand() -> None:
    records = RecordList("t", 3)
    records.add(TimestampType.CREATE_TIME, [(5, 50, b"k", b"v", ()), (6, 60, None, b"w", ())])
    built = ConsumerRecord("t", 3, 7, 70, TimestampType.LOG_APPEND_TIME, "key", "value", ())
    records.add(None, [built])
    assert len(records) == 3 and records
    assert records[0] == ConsumerRecord("t", 3, 5, 50, TimestampType.CREATE_TIME, b"k", b"v", ())
    assert records[-1] is built
    assert [r.offset for r in records] == [5, 6, 7]
    assert [r.offset for r in records[1:]] == [6, 7]
    assert records == list(records) and records != list(records)[:2]
    with pytest.raises(IndexError):
        records[3]
    assert not RecordList("t", 0)
    assert records.timestamps() == [50, 60, 70]


def test_record_lists_give_timestamps_of_undecoded_runs() -> None:
    batch = decode_batch(uniform_batch(0, 40), lazy=True).records
    records = RecordList("t", 0)
    records.add(TimestampType.CREATE_TIME, batch[5:])
    assert records.timestamps() == [r.timestamp for r in records] and len(records.timestamps()) == 35


def uniform_batch(start: int, count: int, codec: Codec = Codec.NONE) -> bytes:
    """Records alike save for timestamps (null keys, 200-byte values): the decoder's fast path."""
    builder = RecordBatchBuilder(codec)
    for i in range(start, start + count):
        builder.append(None, b"%-200d" % i, (), timestamp=T0 + i // 7)
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, start)  # the base offset, as the broker stores it
    return bytes(data)


@REGIONS
def test_a_backlog_on_one_partition_does_not_hold_another_back(regions: bool) -> None:
    # Both partitions have more buffered than a poll returns: the polls take turns, rather than serving the
    # first partition until its backlog is gone while the second one's records wait.
    f = fetcher(**{"record.regions": regions})
    first, second = TopicPartition("t", 0), TopicPartition("t", 1)
    for tp in (first, second):
        state = PartitionState(position=0, fetch_position=300)
        f.assignment[tp] = state
        records = uniform_batch(0, 300)
        state.buffered.append(CompletedFetch(tp, state.generation, records, None, scan_batches(records)[0]))
    served = [set(f.drain(100)) for _ in range(4)]
    assert served == [{first}, {second}, {first}, {second}]
    assert f.assignment[first].position == f.assignment[second].position == 200


async def test_alike_records_come_back_whole_across_small_polls(fake: FakeCluster) -> None:
    fake.append_raw("t", 0, uniform_batch(0, 300))
    fake.append_raw("t", 0, uniform_batch(300, 300, Codec.LZ4))
    async with consumer(fake, max_poll_records=70) as c:
        c.assign([TP])
        seen = await poll_capped(c, 70, 600)
        assert [(r.offset, r.timestamp, r.key, r.value) for r in seen] == [
            (i, T0 + i // 7, None, b"%-200d" % i) for i in range(600)
        ]
        assert all(type(r.value) is bytes for r in seen)
        assert await c.position(TP) == 600


@REGIONS
def test_a_records_section_that_is_a_view_of_the_response(regions: bool) -> None:
    # The Fetch decoder hands each partition's records over as a view of the response frame, not a copy.
    f = fetcher(**{"record.regions": regions})
    state = PartitionState(position=0, fetch_position=600)
    f.assignment[TP] = state
    frame = bytearray(b"response fields" + uniform_batch(0, 300) + uniform_batch(300, 300))
    view = memoryview(frame).toreadonly()[len(b"response fields") :]
    starts, next_offset = scan_batches(view)
    assert next_offset == 600
    state.buffered.append(CompletedFetch(TP, state.generation, view, None, starts))
    taken = f.drain(1000)[TP]
    assert [(r.offset, r.value) for r in taken] == [(i, b"%-200d" % i) for i in range(600)]
    assert all(type(r.value) is bytes for r in taken)
    assert state.position == 600
