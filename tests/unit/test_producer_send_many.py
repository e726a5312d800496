"""AsyncProducer.send_many: many records for one partition, in order, with one future per batch."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from backbone.client.producer.producer import AsyncProducer
from backbone.client.structs import RecordList
from backbone.protocol.errors import MessageTooLargeError
from backbone.protocol.record_batch import read_header
from backbone.wire.errors import BufferExhaustedError
from tests.helpers.fake_cluster import FakeCluster

pytestmark = [pytest.mark.unit, pytest.mark.fake_topic("t", 3)]


def producer(fake: FakeCluster, **options: Any) -> AsyncProducer:
    options.setdefault("retry_backoff_ms", 10)
    return AsyncProducer(bootstrap_servers=fake.bootstrap, **options)


def stored(fake: FakeCluster, partition: int) -> list[tuple[int, int, bytes | None, bytes | None, tuple]]:
    return [tuple(r) for batch in fake.partition("t", partition).decoded() for r in batch.records]


def rows(count: int, size: int = 100) -> list[tuple[Any, ...]]:
    return [
        (b"k%d" % i, b"%05d" % i + b"x" * (size - 5), (("origin", b"dc1:0:%d" % i),), 1_000 + i)
        for i in range(count)
    ]


async def test_records_arrive_in_order_with_keys_headers_and_timestamps(fake: FakeCluster) -> None:
    records = rows(500)
    async with producer(fake, batch_size=16_384, linger_ms=5) as p:
        outcomes = await p.send_many("t", 1, records)
        metadata = [await future for _, future in outcomes]
    assert [end for end, _ in outcomes][-1] == 500
    assert len(outcomes) > 1, "500 records of 100 bytes fill several 16 KiB batches"
    assert [m.offset for m in metadata] == [end - 1 for end, _ in outcomes], "each future is its batch's last"
    assert stored(fake, 1) == [(i, 1_000 + i, *records[i][:3]) for i in range(500)]
    assert stored(fake, 0) == stored(fake, 2) == []


async def test_runs_continue_the_open_batch_and_keep_order_with_send(fake: FakeCluster) -> None:
    async with producer(fake, linger_ms=10_000) as p:
        first = await p.send("t", b"before", partition=0)
        outcomes = await p.send_many("t", 0, rows(3))
        after = await p.send("t", b"after", partition=0)
        await p.flush(timeout=5)
        assert (await first).offset == 0 and (await after).offset == 4
        assert [(end, (await future).offset) for end, future in outcomes] == [(3, 3)]
    assert len(fake.partition("t", 0).batches) == 1, "one open batch took all five"


async def test_a_record_too_large_ends_the_run_and_the_ones_before_go(fake: FakeCluster) -> None:
    records = rows(3)
    records.insert(2, (None, b"x" * 5000, (), 7))
    async with producer(fake, max_request_size=1000) as p:
        outcomes = await p.send_many("t", 2, records)
        await p.flush(timeout=5)
        (end, future), (error_end, error) = outcomes
        assert (end, (await future).offset) == (2, 1)
        assert error_end == 4 and isinstance(error, MessageTooLargeError)
    assert [r[3][:5] for r in stored(fake, 2)] == [b"00000", b"00001"]


async def test_a_value_that_is_not_bytes_is_refused_with_the_ones_before_kept(fake: FakeCluster) -> None:
    records = [*rows(2), (None, "text", (), 5)]
    async with producer(fake) as p:
        outcomes = await p.send_many("t", 0, records)
        await p.flush(timeout=5)
    assert outcomes[0][0] == 2 and isinstance(outcomes[-1][1], TypeError)
    assert len(stored(fake, 0)) == 2
    assert p.metrics()["buffer_available_bytes"] == p.config["buffer.memory"]


async def test_a_run_larger_than_the_buffer_waits_for_memory_and_gives_it_all_back(fake: FakeCluster) -> None:
    async with producer(fake, buffer_memory=20_000, batch_size=4_000, linger_ms=10_000) as p:
        async with asyncio.timeout(10):
            outcomes = await p.send_many("t", 0, rows(1_000))
            await p.flush(timeout=10)
        assert all(future.succeeded() for _, future in outcomes)
        assert p.metrics()["buffer_available_bytes"] == 20_000
    assert [r[0] for r in stored(fake, 0)] == list(range(1_000))
    assert max(read_header(b).record_count for b in fake.partition("t", 0).batches) < 40


async def test_a_buffer_that_never_frees_fails_the_rest_of_the_run(fake: FakeCluster) -> None:
    fake.create_topic("orphan", 1, leaders=[7])
    async with producer(fake, buffer_memory=5_000, max_block_ms=100, linger_ms=1000) as p:
        outcomes = await p.send_many("orphan", 0, rows(200))
        assert isinstance(outcomes[-1][1], BufferExhaustedError)
        assert 0 < outcomes[-2][0] < 200
        await p.close(timeout=0)


async def test_an_unknown_partition_is_refused(fake: FakeCluster) -> None:
    # The producer waits up to max.block.ms for the partition to appear (the topic may have just grown).
    async with producer(fake, max_block_ms=300) as p:
        with pytest.raises(ValueError, match="has no partition 9"):
            await p.send_many("t", 9, rows(1))


def test_plain_records_are_the_decoded_tuples_in_order() -> None:
    from backbone.client.structs import ConsumerRecord, TimestampType

    records = RecordList("t", 4)
    records.add(TimestampType.CREATE_TIME, [(5, 50, b"k", b"v", ()), (6, 60, None, b"w", (("h", b"1"),))])
    made = ConsumerRecord("t", 4, 7, 70, TimestampType.CREATE_TIME, None, None, ())
    records.add(None, [made])
    assert list(records.plain()) == [
        (5, 50, b"k", b"v", ()),
        (6, 60, None, b"w", (("h", b"1"),)),
        (7, 70, None, None, ()),
    ]
