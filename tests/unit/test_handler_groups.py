"""The classic group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup), DescribeGroups and ListGroups,
DeleteGroups and OffsetDelete, each handler built from a real group coordinator alone (the broker's
GroupCoordination over a real replica manager and its offsets log; no broker, no network, no ZooKeeper)."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import pytest
from kio.schema.delete_groups.v2 import request as delete_groups
from kio.schema.describe_groups.v5 import request as describe_groups
from kio.schema.errors import ErrorCode
from kio.schema.heartbeat.v4 import request as heartbeat
from kio.schema.join_group.v9 import request as join_group
from kio.schema.leave_group.v5 import request as leave_group
from kio.schema.list_groups.v4 import request as list_groups
from kio.schema.offset_delete.v0 import request as offset_delete
from kio.schema.sync_group.v5 import request as sync_group

from backbone.broker.group_coordination import GroupCoordination
from backbone.broker.handlers.group_deletion import group_deletion_handlers
from backbone.broker.handlers.group_listing import group_listing_handlers
from backbone.broker.handlers.group_membership import group_membership_handlers
from backbone.broker.network import Handler
from backbone.consumer_groups.coordinator import CoordinatorError
from backbone.consumer_groups.offsets_topic import OFFSETS_TOPIC
from backbone.protocol.api import ApiKey
from tests.helpers.broker_pieces import BROKER_ID, BrokerPieces, group_coordination, pieces_fixture
from tests.helpers.handler_context import handler_context

pytestmark = pytest.mark.unit

GROUP = "readers"

# One offsets partition (every group lives in __consumer_offsets-0); no initial rebalance delay, so a lone
# member's join completes at once.
pieces = pieces_fixture(**{"offsets.topic.num.partitions": 1, "group.initial.rebalance.delay.ms": 0})


@pytest.fixture
async def coordination(pieces: BrokerPieces):
    coordination = group_coordination(pieces)
    yield coordination
    await coordination.stop()


@pytest.fixture
def handlers(pieces: BrokerPieces, coordination: GroupCoordination) -> dict[ApiKey, Handler]:
    coordinator = coordination.coordinator
    return (
        group_membership_handlers(coordinator)
        | group_listing_handlers(coordinator, pieces.authorizer)
        | group_deletion_handlers(coordinator)
    )


async def call(handlers: dict[ApiKey, Handler], request: Any) -> Any:
    return await handlers[ApiKey(request.__api_key__)](handler_context(request))


async def lead_offsets_partition(pieces: BrokerPieces, coordination: GroupCoordination) -> None:
    """This broker leading __consumer_offsets-0, returning once the coordinator has loaded it."""
    pieces.lead(OFFSETS_TOPIC, 0, (BROKER_ID,))
    coordination.on_partition_state(OFFSETS_TOPIC, 0)
    deadline = time.monotonic() + 30
    while True:
        try:
            coordination.coordinator.group(GROUP)
            return
        except CoordinatorError:  # COORDINATOR_LOAD_IN_PROGRESS until the partition is read
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.01)


def join_request(member_id: str = "") -> Any:
    return join_group.JoinGroupRequest(
        group_id=GROUP,
        session_timeout=timedelta(seconds=30),
        rebalance_timeout=timedelta(seconds=30),
        member_id=member_id,
        group_instance_id=None,
        protocol_type="consumer",
        protocols=(join_group.JoinGroupRequestProtocol(name="range", metadata=b"subscription"),),
        reason=None,
    )


async def join_as_leader(handlers: dict[ApiKey, Handler]) -> tuple[str, int]:
    """A lone member joined (two rounds, KIP-394) and synced with its own assignment: id and generation."""
    first = await call(handlers, join_request())
    assert first.error_code == ErrorCode.member_id_required
    assert first.member_id
    joined = await call(handlers, join_request(first.member_id))
    assert joined.error_code == ErrorCode.none
    assert joined.leader == first.member_id
    assert [m.metadata for m in joined.members] == [b"subscription"]
    synced = await call(
        handlers,
        sync_group.SyncGroupRequest(
            group_id=GROUP,
            generation_id=joined.generation_id,
            member_id=first.member_id,
            group_instance_id=None,
            protocol_type="consumer",
            protocol_name="range",
            assignments=(
                sync_group.SyncGroupRequestAssignment(member_id=first.member_id, assignment=b"t-0"),
            ),
        ),
    )
    assert synced.error_code == ErrorCode.none
    assert synced.assignment == b"t-0"
    return first.member_id, joined.generation_id


async def describe(handlers: dict[ApiKey, Handler]) -> Any:
    answer = await call(
        handlers, describe_groups.DescribeGroupsRequest(groups=(GROUP,), include_authorized_operations=False)
    )
    (group,) = answer.groups
    return group


async def test_a_member_joins_syncs_heartbeats_and_is_described_and_listed(
    pieces, coordination, handlers
) -> None:
    await lead_offsets_partition(pieces, coordination)
    member_id, generation = await join_as_leader(handlers)
    beat = await call(
        handlers,
        heartbeat.HeartbeatRequest(
            group_id=GROUP, generation_id=generation, member_id=member_id, group_instance_id=None
        ),
    )
    assert beat.error_code == ErrorCode.none
    described = await describe(handlers)
    assert (described.error_code, described.group_state, described.protocol_data) == (
        ErrorCode.none,
        "Stable",
        "range",
    )
    assert [(m.member_id, m.member_assignment) for m in described.members] == [(member_id, b"t-0")]
    listed = await call(handlers, list_groups.ListGroupsRequest(states_filter=("stable",)))
    assert [(g.group_id, g.group_state) for g in listed.groups] == [(GROUP, "Stable")]
    none_listed = await call(handlers, list_groups.ListGroupsRequest(states_filter=("Empty",)))
    assert none_listed.groups == ()


async def test_a_group_with_members_is_not_deleted_and_one_left_empty_is(
    pieces, coordination, handlers
) -> None:
    await lead_offsets_partition(pieces, coordination)
    member_id, _ = await join_as_leader(handlers)
    delete = delete_groups.DeleteGroupsRequest(groups_names=(GROUP,))
    refused = await call(handlers, delete)
    assert [(r.group_id, r.error_code) for r in refused.results] == [(GROUP, ErrorCode.non_empty_group)]

    left = await call(
        handlers,
        leave_group.LeaveGroupRequest(
            group_id=GROUP,
            members=(leave_group.MemberIdentity(member_id=member_id, group_instance_id=None, reason=None),),
        ),
    )
    assert left.error_code == ErrorCode.none
    assert [m.error_code for m in left.members] == [ErrorCode.none]
    assert (await describe(handlers)).group_state == "Empty"

    deleted = await call(handlers, delete)
    assert [(r.group_id, r.error_code) for r in deleted.results] == [(GROUP, ErrorCode.none)]
    gone = await describe(handlers)
    assert (gone.error_code, gone.group_state, gone.members) == (ErrorCode.none, "Dead", ())


async def test_a_broker_not_coordinating_the_group_sends_every_request_back_to_find_coordinator(
    handlers,
) -> None:
    # This broker leads no offsets partition: it coordinates no group.
    joined = await call(handlers, join_request())
    assert joined.error_code == ErrorCode.not_coordinator
    described = await describe(handlers)
    assert (described.error_code, described.group_state) == (ErrorCode.not_coordinator, "")
    deleted = await call(handlers, delete_groups.DeleteGroupsRequest(groups_names=(GROUP,)))
    assert [r.error_code for r in deleted.results] == [ErrorCode.not_coordinator]
    offsets = await call(
        handlers,
        offset_delete.OffsetDeleteRequest(
            group_id=GROUP,
            topics=(
                offset_delete.OffsetDeleteRequestTopic(
                    name="t", partitions=(offset_delete.OffsetDeleteRequestPartition(partition_index=0),)
                ),
            ),
        ),
    )
    assert offsets.error_code == ErrorCode.not_coordinator
