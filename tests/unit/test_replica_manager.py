"""The replica manager's ISR rules during a reassignment: a replica being moved off a partition never rejoins
its ISR, so the controller's cut of the ISR to the target replicas is not undone before the move ends."""

from __future__ import annotations

from pathlib import Path

import pytest

from backbone.broker.metadata import MetadataCache
from backbone.broker.replica_manager import ReplicaManager
from backbone.coordination import PartitionState, TopicAssignment
from backbone.log.manager import LogManager

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
