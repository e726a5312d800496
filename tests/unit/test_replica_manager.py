"""The replica manager's ISR rules.

During a reassignment, a replica being moved off a partition never rejoins its ISR, so the controller's cut
of the ISR to the target replicas is not undone before the move ends. An ISR change whose ZooKeeper write
fails in any way (a version conflict, ZooKeeper unreachable, the session expired) is marked failed, so a
later fetch asks again: a change left pending for good would freeze the ISR.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from backbone.broker import partition as partition_module
from backbone.broker.metadata_cache import MetadataCache
from backbone.broker.replica_manager import ReplicaManager
from backbone.coordination import CoordinationUnavailableError, PartitionState, TopicAssignment
from backbone.log.manager import LogManager
from backbone.protocol.errors import UnknownTopicOrPartitionError
from backbone.protocol.records import RecordBatchBuilder

pytestmark = pytest.mark.unit


@pytest.fixture
async def moving_leader(tmp_path: Path):
    """Broker 1 leading t-0 while it moves from replicas (1, 2) to (1, 3); only broker 1 is in sync."""
    cache = MetadataCache()
    cache.topics["t"] = TopicAssignment(
        "t", {0: (1, 3, 2)}, adding_replicas={0: (3,)}, removing_replicas={0: (2,)}
    )
    cache.states[("t", 0)] = PartitionState(leader=1, leader_epoch=0, isr=(1,), controller_epoch=1)
    logs = LogManager([tmp_path])
    logs.startup()
    manager = ReplicaManager(1, logs, cache, producer_expiration_ms=3_600_000)
    manager.may_join_isr = lambda replica: True  # every broker live and registered

    async def write_state(topic: str, partition: int, state: PartitionState, version: int) -> int:
        return version + 1

    manager.write_state = write_state
    manager.on_partition_state("t", 0)
    yield manager, manager.partitions[("t", 0)]
    await manager.stop_replication()
    manager.shutdown()
    logs.shutdown()


async def test_a_replica_being_moved_off_does_not_rejoin_the_isr(moving_leader) -> None:
    _, partition = moving_leader
    assert partition.is_leader
    partition.update_follower(2, 0)  # fully caught up, but leaving
    assert partition.pending_isr is None
    partition.update_follower(3, 0)  # fully caught up and joining
    assert partition.pending_isr == (1, 3)


async def test_once_the_move_is_cancelled_the_replica_may_rejoin(moving_leader) -> None:
    manager, partition = moving_leader
    manager.cache.topics["t"] = TopicAssignment("t", {0: (1, 2)})
    manager.on_topic_changed("t")
    partition.update_follower(2, 0)
    assert partition.pending_isr == (1, 2)


@pytest.fixture
async def lonely_leader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Broker 1 leading t-0 (replicas 1, 2, 3) with only itself in sync; ZooKeeper writes fail until told."""
    monkeypatch.setattr(partition_module, "EXPANSION_DAMPING_S", 0.0)  # every fetch may ask
    cache = MetadataCache()
    cache.topics["t"] = TopicAssignment("t", {0: (1, 2, 3)})
    cache.states[("t", 0)] = PartitionState(leader=1, leader_epoch=0, isr=(1,), controller_epoch=1)
    logs = LogManager([tmp_path])
    logs.startup()
    manager = ReplicaManager(1, logs, cache, producer_expiration_ms=3_600_000)
    manager.may_join_isr = lambda replica: True
    zookeeper = {"up": False, "written": []}

    async def write_state(topic: str, partition: int, state: PartitionState, version: int) -> int:
        if not zookeeper["up"]:
            raise CoordinationUnavailableError("update a partition state: ZooKeeper is unreachable")
        zookeeper["written"].append(state.isr)
        return version + 1

    def apply_written_state(topic: str, partition: int, state: PartitionState) -> None:
        manager.cache.states[(topic, partition)] = state  # as the broker's metadata sync does
        manager.on_partition_state(topic, partition)

    manager.write_state = write_state
    manager.apply_written_state = apply_written_state
    manager.on_partition_state("t", 0)
    yield manager, manager.partitions[("t", 0)], zookeeper
    await manager.stop_replication()
    manager.shutdown()
    logs.shutdown()


async def settled(condition, timeout: float = 5.0) -> bool:
    """Let the event loop run the manager's write tasks until `condition()` holds (or `timeout` passes)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


async def test_an_isr_write_that_zookeeper_refuses_is_asked_again(lonely_leader) -> None:
    _, partition, zookeeper = lonely_leader
    partition.update_follower(2, 0)  # caught up: asks for (1, 2), which ZooKeeper cannot take now
    assert partition.pending_isr == (1, 2)
    assert await settled(lambda: partition.pending_isr is None), "the failed change is no longer pending"
    zookeeper["up"] = True
    partition.update_follower(2, 0)
    assert await settled(lambda: zookeeper["written"] == [(1, 2)])


async def test_a_refused_shrink_does_not_block_the_expansion_after_the_controller_rewrote_the_isr(
    lonely_leader,
) -> None:
    """What a whole cluster frozen past its ZooKeeper sessions does: the leader's own shrink to (1, 2) fails
    with the expired session, then the new controller writes ISR (1,) in the same leader epoch; the
    followers catch up and must be let back in."""
    manager, partition, zookeeper = lonely_leader
    manager.cache.states[("t", 0)] = PartitionState(
        leader=1, leader_epoch=0, isr=(1, 2, 3), controller_epoch=1
    )
    manager.on_partition_state("t", 0)
    partition.update_follower(2, 0)  # 2 fetched; 3 has been silent longer than replica.lag.time.max.ms
    partition.followers[3].last_caught_up -= partition.replica_lag_time_max_s + 1
    partition.shrink_isr_if_lagging()
    assert partition.pending_isr == (1, 2)
    assert await settled(lambda: partition.pending_isr is None)
    manager.cache.states[("t", 0)] = PartitionState(
        leader=1, leader_epoch=0, isr=(1,), controller_epoch=2, zk_version=1
    )
    manager.on_partition_state("t", 0)
    zookeeper["up"] = True
    partition.update_follower(2, 0)
    assert await settled(lambda: partition.isr == (1, 2)), "2 is back in sync"
    partition.update_follower(3, 0)
    assert await settled(lambda: partition.isr == (1, 2, 3)), "3 is back in sync"
    assert zookeeper["written"] == [(1, 2), (1, 2, 3)]


async def test_an_expansion_superseded_by_the_controller_in_the_same_epoch_is_asked_again(
    lonely_leader,
) -> None:
    """The leader's write of ISR (1, 2) lands in ZooKeeper, but before its answer is applied the controller
    writes ISR (1,) in the same leader epoch (follower 2 restarted and registered again), and that newer
    state reaches the leader first. The leader's own older state is then not applied; its change must not
    stay pending, or the leader never asks to let 2 back in."""
    manager, partition, zookeeper = lonely_leader
    zookeeper["up"] = True
    answer = asyncio.Event()
    real_write = manager.write_state

    async def write_answered_late(topic: str, index: int, state: PartitionState, version: int) -> int:
        written = await real_write(topic, index, state, version)
        await answer.wait()
        return written

    def apply_unless_older(topic: str, index: int, state: PartitionState) -> None:
        known = manager.cache.states[(topic, index)]
        if state.zk_version >= known.zk_version:  # as the broker's metadata cache does
            manager.cache.states[(topic, index)] = state
            manager.on_partition_state(topic, index)

    manager.write_state = write_answered_late
    manager.apply_written_state = apply_unless_older
    partition.update_follower(2, 0)
    assert partition.pending_isr == (1, 2)
    assert await settled(lambda: zookeeper["written"] == [(1, 2)])
    manager.cache.states[("t", 0)] = PartitionState(
        leader=1, leader_epoch=0, isr=(1,), controller_epoch=1, zk_version=2
    )
    manager.on_partition_state("t", 0)
    answer.set()
    assert await settled(lambda: partition.pending_isr is None), "the superseded change is not pending"
    partition.update_follower(2, 0)
    assert await settled(lambda: zookeeper["written"] == [(1, 2), (1, 2)]), "2 is asked back in"


async def test_deleting_a_topic_fails_the_acks_all_produces_waiting_on_it_at_once(lonely_leader) -> None:
    # An acks=all record waits for followers that have not fetched it; the topic's deletion must answer it
    # (UNKNOWN_TOPIC_OR_PARTITION, as Kafka's delayed produce) rather than let it wait out its 30 s timeout
    # while the client holds the partition's later records behind it.
    manager, partition, _ = lonely_leader
    partition.apply_state(leader=1, leader_epoch=0, isr=(1, 2, 3), replicas=(1, 2, 3))
    builder = RecordBatchBuilder()
    builder.append(None, b"v")
    result = partition.append_as_leader(memoryview(builder.build()))
    waiting = asyncio.ensure_future(partition.wait_committed(result.base_offset, 30_000, 1))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    manager.on_topic_deleted("t")
    with pytest.raises(UnknownTopicOrPartitionError):
        await asyncio.wait_for(waiting, 1)
