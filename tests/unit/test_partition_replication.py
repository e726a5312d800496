"""The leader's side of replication on one partition: the high watermark follows the in-sync followers' log
ends, ISR changes are asked for (one at a time) when followers catch up or fall behind, and acks=all waits
for the ISR, failing with NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank below the minimum."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from backbone.broker.partition import Partition
from backbone.log import Log
from backbone.protocol.errors import (
    NotEnoughReplicasAfterAppendError,
    NotLeaderOrFollowerError,
    UnknownTopicOrPartitionError,
)
from backbone.protocol.records import RecordBatchBuilder

pytestmark = pytest.mark.unit


def records(count: int = 3) -> memoryview:
    builder = RecordBatchBuilder()
    for i in range(count):
        builder.append(None, b"value %d" % i)
    return memoryview(builder.build())


@pytest.fixture
def leader(tmp_path: Path):
    asked: list[tuple[int, ...]] = []
    log = Log(tmp_path / "t-0")
    partition = Partition(
        log, 1, 3_600_000, replica_lag_time_max_ms=100, request_isr_change=lambda p, isr: asked.append(isr)
    )
    partition.apply_state(leader=1, leader_epoch=0, isr=(1, 2, 3), replicas=(1, 2, 3))
    yield partition, asked
    log.close()


def test_the_high_watermark_is_the_lowest_log_end_in_the_isr(leader) -> None:
    partition, _ = leader
    partition.append_as_leader(records(3))
    partition.append_as_leader(records(3))
    assert partition.high_watermark == 0  # no follower has fetched yet
    partition.update_follower(2, 6)
    assert partition.high_watermark == 0  # follower 3 has nothing
    partition.update_follower(3, 3)
    assert partition.high_watermark == 3
    partition.update_follower(3, 6)
    assert partition.high_watermark == 6


def test_a_lagging_follower_is_asked_out_and_a_caught_up_one_back_in(leader) -> None:
    partition, asked = leader
    partition.append_as_leader(records(3))
    partition.update_follower(2, 3)
    time.sleep(0.15)  # longer than replica.lag.time.max.ms (100 ms) with no fetch from follower 3
    partition.update_follower(2, 3)
    partition.shrink_isr_if_lagging()
    assert asked == [(1, 2)]
    partition.shrink_isr_if_lagging()
    assert asked == [(1, 2)]  # one change at a time: the first is still being written
    partition.apply_state(leader=1, leader_epoch=0, isr=(1, 2), replicas=(1, 2, 3))  # it was written
    assert partition.high_watermark == 3
    partition.update_follower(3, 3)  # caught up to the high watermark: back in
    assert asked == [(1, 2), (1, 2, 3)]


def test_a_replica_not_assigned_here_cannot_fetch_as_a_follower(leader) -> None:
    partition, _ = leader
    with pytest.raises(NotLeaderOrFollowerError):
        partition.update_follower(7, 0)


def test_acks_all_fails_after_append_when_the_isr_shrank_below_the_minimum(leader) -> None:
    partition, _ = leader

    async def scenario() -> None:
        result = partition.append_as_leader(records(1))
        waiting = asyncio.ensure_future(partition.wait_committed(result.base_offset, 5000, 2))
        await asyncio.sleep(0.01)
        assert not waiting.done()  # followers 2 and 3 do not have it yet
        # Both followers leave the ISR: committed by the leader alone, fewer than min.insync.replicas=2.
        partition.apply_state(leader=1, leader_epoch=0, isr=(1,), replicas=(1, 2, 3))
        with pytest.raises(NotEnoughReplicasAfterAppendError):
            await waiting

    asyncio.run(scenario())


def test_acks_all_returns_once_every_in_sync_replica_has_the_record(leader) -> None:
    partition, _ = leader

    async def scenario() -> None:
        result = partition.append_as_leader(records(2))
        waiting = asyncio.ensure_future(partition.wait_committed(result.base_offset + 1, 5000, 2))
        partition.update_follower(2, 2)
        await asyncio.sleep(0.01)
        assert not waiting.done()
        partition.update_follower(3, 2)
        await asyncio.wait_for(waiting, 1)

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("topic_deleted", "error"), [(True, UnknownTopicOrPartitionError), (False, NotLeaderOrFollowerError)]
)
def test_acks_all_waiting_on_a_removed_partition_fails_at_once(leader, topic_deleted, error) -> None:
    # A producer's request must not hang until its timeout when the topic is deleted (or the replica moved
    # away) under it: the client would hold every later record of that partition behind it.
    partition, _ = leader

    async def scenario() -> None:
        result = partition.append_as_leader(records(1))
        waiting = asyncio.ensure_future(partition.wait_committed(result.base_offset, 30_000, 2))
        await asyncio.sleep(0.01)
        assert not waiting.done()
        partition.remove(topic_deleted=topic_deleted)
        with pytest.raises(error):
            await asyncio.wait_for(waiting, 1)

    asyncio.run(scenario())


def test_a_replica_reassigned_away_is_asked_out_of_the_isr(leader) -> None:
    partition, asked = leader
    partition.apply_state(leader=1, leader_epoch=0, isr=(1, 2, 3), replicas=(1, 3))
    assert asked == [(1, 3)]
