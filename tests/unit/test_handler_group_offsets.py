"""OffsetCommit and OffsetFetch against a real group coordinator whose offsets partition is a real replicated
log (the broker's GroupCoordination over a real replica manager; no broker, no network, no ZooKeeper
calls): a commit is an acks=all append, read back by OffsetFetch, and refused while the offsets
partition's ISR is below min.insync.replicas, with the same check the Produce handler uses."""

from __future__ import annotations

import asyncio
import time

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.offset_commit.v8 import request as offset_commit
from kio.schema.offset_fetch.v7 import request as offset_fetch

from backbone.broker.group_coordination import GroupCoordination
from backbone.broker.handlers.offset_commit import offset_commit_handler
from backbone.broker.handlers.offset_fetch import offset_fetch_handler
from backbone.consumer_groups.offsets_topic import OFFSETS_TOPIC
from tests.helpers.broker_pieces import BROKER_ID, BrokerPieces, group_coordination, pieces_fixture
from tests.helpers.handler_context import handler_context

pytestmark = pytest.mark.unit

GROUP = "readers"


# One offsets partition, so every group's offsets live in __consumer_offsets-0.
pieces = pieces_fixture(**{"offsets.topic.num.partitions": 1})


@pytest.fixture
async def coordination(pieces: BrokerPieces):
    coordination = group_coordination(pieces)
    yield coordination
    await coordination.stop()


def lead_offsets_partition(
    pieces: BrokerPieces,
    coordination: GroupCoordination,
    replicas: tuple[int, ...] = (BROKER_ID,),
    isr: tuple[int, ...] | None = None,
) -> None:
    """This broker leading __consumer_offsets-0; the coordination hears of it as it does from the cache."""
    pieces.lead(OFFSETS_TOPIC, 0, replicas, isr)
    coordination.on_partition_state(OFFSETS_TOPIC, 0)


async def commit(pieces: BrokerPieces, coordination: GroupCoordination, offset: int) -> ErrorCode:
    request = offset_commit.OffsetCommitRequest(
        group_id=GROUP,
        generation_id_or_member_epoch=-1,  # a commit from outside any generation (an empty group)
        member_id="",
        group_instance_id=None,
        topics=(
            offset_commit.OffsetCommitRequestTopic(
                name="t",
                partitions=(
                    offset_commit.OffsetCommitRequestPartition(
                        partition_index=0,
                        committed_offset=offset,
                        committed_leader_epoch=-1,
                        committed_metadata="",
                    ),
                ),
            ),
        ),
    )
    answer = await offset_commit_handler(coordination.coordinator)(handler_context(request))
    (topic,) = answer.topics
    (partition,) = topic.partitions
    return partition.error_code


async def commit_once_loaded(pieces: BrokerPieces, coordination: GroupCoordination, offset: int) -> ErrorCode:
    """The commit's answer once the coordinator has loaded the offsets partition it just became leader of."""
    deadline = time.monotonic() + 30
    while True:
        error = await commit(pieces, coordination, offset)
        if error != ErrorCode.coordinator_load_in_progress or time.monotonic() > deadline:
            return error
        await asyncio.sleep(0.01)


async def fetch_committed(coordination: GroupCoordination) -> tuple[ErrorCode, int]:
    request = offset_fetch.OffsetFetchRequest(
        group_id=GROUP,
        topics=(offset_fetch.OffsetFetchRequestTopic(name="t", partition_indexes=(0,)),),
        require_stable=False,
    )
    answer = await offset_fetch_handler(coordination.coordinator)(handler_context(request))
    (topic,) = answer.topics
    (partition,) = topic.partitions
    return answer.error_code, partition.committed_offset


async def test_a_committed_offset_is_appended_to_the_offsets_log_and_fetched_back(
    pieces, coordination
) -> None:
    pieces.lead("t", 0, (BROKER_ID,))
    lead_offsets_partition(pieces, coordination)
    assert await commit_once_loaded(pieces, coordination, 42) == ErrorCode.none
    assert await fetch_committed(coordination) == (ErrorCode.none, 42)
    offsets_log = pieces.replicas.get(OFFSETS_TOPIC, 0).log
    assert offsets_log.log_end_offset == 1  # one record, written with acks=all
    assert offsets_log.high_watermark == 1


async def test_a_commit_is_refused_while_the_offsets_isr_is_below_min_insync_replicas(
    pieces, coordination
) -> None:
    pieces.lead("t", 0, (BROKER_ID,))
    lead_offsets_partition(pieces, coordination, replicas=(BROKER_ID, 2), isr=(BROKER_ID,))
    pieces.replicas.apply_topic_config(OFFSETS_TOPIC, {"min.insync.replicas": "2"})
    # Kafka answers a commit that met NOT_ENOUGH_REPLICAS with COORDINATOR_NOT_AVAILABLE: the client retries.
    assert await commit_once_loaded(pieces, coordination, 42) == ErrorCode.coordinator_not_available
    assert pieces.replicas.get(OFFSETS_TOPIC, 0).log.log_end_offset == 0  # nothing written
    assert await fetch_committed(coordination) == (ErrorCode.none, -1)
