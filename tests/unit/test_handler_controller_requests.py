"""ElectLeaders, AlterPartitionReassignments and ListPartitionReassignments against the real controller's
elections and reassignment work over a real metadata cache, with the cluster store's operations kept in
memory (no broker, no network, no ZooKeeper): only the controller answers, and each partition has its
own outcome."""

from __future__ import annotations

import datetime
from collections.abc import AsyncIterator

import pytest
from kio.schema.alter_partition_reassignments.v0 import request as alter_reassignments
from kio.schema.elect_leaders.v2 import request as elect_leaders
from kio.schema.errors import ErrorCode
from kio.schema.list_partition_reassignments.v0 import request as list_reassignments
from kio.static.primitive import i32Timedelta

from backbone.broker.controller.control_loop import Controller
from backbone.broker.handlers.elect_leaders import elect_leaders_handler
from backbone.broker.handlers.reassignments import reassignments_handlers
from backbone.coordination import TopicAssignment
from backbone.coordination.brokers import ControllerEpoch
from backbone.protocol.api import ApiKey
from tests.helpers.broker_pieces import BROKER_ID, BrokerPieces, pieces_fixture
from tests.helpers.handler_context import handler_context
from tests.helpers.memory_store import MemoryStore, zk

pytestmark = pytest.mark.unit

OTHER = 2
PREFERRED_ELECTION = 0
TIMEOUT = i32Timedelta.parse(datetime.timedelta(seconds=10))
pieces = pieces_fixture()


@pytest.fixture
async def controller(pieces: BrokerPieces) -> AsyncIterator[tuple[Controller, MemoryStore]]:
    store = MemoryStore(brokers=(BROKER_ID, OTHER))
    nobody_unreachable: frozenset[int] = frozenset()
    made = Controller(BROKER_ID, pieces.cache, store, zk, pieces.config, lambda: nobody_unreachable)
    yield made, store
    await made.stop()


def elect(*partitions: tuple[str, int]) -> elect_leaders.ElectLeadersRequest:
    return elect_leaders.ElectLeadersRequest(
        election_type=PREFERRED_ELECTION,
        topic_partitions=tuple(
            elect_leaders.TopicPartitions(topic=topic, partitions=(partition,))
            for topic, partition in partitions
        ),
        timeout=TIMEOUT,
    )


def outcomes(answer) -> dict[tuple[str, int], ErrorCode]:
    return {
        (result.topic, row.partition_id): row.error_code
        for result in answer.replica_election_results
        for row in result.partition_result
    }


async def test_a_broker_that_is_not_the_controller_answers_not_controller(pieces, controller) -> None:
    made, _ = controller
    answer = await elect_leaders_handler(made.elections)(handler_context(elect(("t", 0))))
    assert answer.error_code == ErrorCode.not_controller
    assert outcomes(answer) == {("t", 0): ErrorCode.not_controller}
    handlers = reassignments_handlers(made.reassignments)
    listing = list_reassignments.ListPartitionReassignmentsRequest(timeout=TIMEOUT, topics=None)
    listed = await handlers[ApiKey.LIST_PARTITION_REASSIGNMENTS](handler_context(listing))
    assert (listed.error_code, listed.topics) == (ErrorCode.not_controller, ())


async def test_the_controller_elects_the_preferred_leader_of_each_asked_partition(pieces, controller) -> None:
    made, store = controller
    made.writer.epoch = ControllerEpoch(epoch=3, zk_version=0)
    pieces.place("t", 0, (BROKER_ID, OTHER), leader=OTHER)  # the preferred replica is in sync but not leading
    answer = await elect_leaders_handler(made.elections)(handler_context(elect(("t", 0), ("ghost", 0))))
    assert answer.error_code == ErrorCode.none
    assert outcomes(answer) == {
        ("t", 0): ErrorCode.none,
        ("ghost", 0): ErrorCode.unknown_topic_or_partition,
    }
    ((call, (topic, (partition, state))),) = store.calls
    assert (call, topic, partition, state.leader, state.leader_epoch) == (
        "set_partition_state",
        "t",
        0,
        BROKER_ID,
        1,
    )


async def test_the_controller_lists_and_refuses_reassignments_per_partition(pieces, controller) -> None:
    made, store = controller
    made.writer.epoch = ControllerEpoch(epoch=3, zk_version=0)
    moving = TopicAssignment("t", {0: (BROKER_ID, OTHER), 1: (BROKER_ID,)}, adding_replicas={0: (OTHER,)})
    store.topics["t"] = moving
    handlers = reassignments_handlers(made.reassignments)
    listing = list_reassignments.ListPartitionReassignmentsRequest(timeout=TIMEOUT, topics=None)
    listed = await handlers[ApiKey.LIST_PARTITION_REASSIGNMENTS](handler_context(listing))
    (topic,) = listed.topics
    (row,) = topic.partitions
    assert (topic.name, row.partition_index, row.replicas, row.adding_replicas, row.removing_replicas) == (
        "t",
        0,
        (BROKER_ID, OTHER),
        (OTHER,),
        (),
    )
    cancel_idle = alter_reassignments.AlterPartitionReassignmentsRequest(
        timeout=TIMEOUT,
        topics=(
            alter_reassignments.ReassignableTopic(
                name="t",
                partitions=(alter_reassignments.ReassignablePartition(partition_index=1, replicas=None),),
            ),
            alter_reassignments.ReassignableTopic(
                name="ghost",
                partitions=(alter_reassignments.ReassignablePartition(partition_index=0, replicas=(OTHER,)),),
            ),
        ),
    )
    answer = await handlers[ApiKey.ALTER_PARTITION_REASSIGNMENTS](handler_context(cancel_idle))
    assert answer.error_code == ErrorCode.none
    assert {(t.name, p.partition_index): p.error_code for t in answer.responses for p in t.partitions} == {
        ("t", 1): ErrorCode.no_reassignment_in_progress,
        ("ghost", 0): ErrorCode.unknown_topic_or_partition,
    }
    assert store.topics["t"] is moving  # nothing written
