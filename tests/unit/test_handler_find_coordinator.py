"""FindCoordinator against the broker's real group coordination and metadata cache (no broker, no network):
a group's coordinator is the live leader of its offsets partition, reached on the asking listener."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3 import request as find_one
from kio.schema.find_coordinator.v4 import request as find_many

from backbone.broker.handlers.find_coordinator import (
    GROUP_KEY_TYPE,
    TRANSACTION_KEY_TYPE,
    find_coordinator_handler,
)
from backbone.consumer_groups.offsets_topic import OFFSETS_TOPIC
from tests.helpers.broker_pieces import BROKER_ID, BrokerPieces, group_coordination, pieces_fixture
from tests.helpers.handler_context import handler_context

pytestmark = pytest.mark.unit

OTHER = 2
# One offsets partition, so every group's coordinator is the leader of __consumer_offsets-0.
pieces = pieces_fixture(**{"offsets.topic.num.partitions": 1})


async def find(
    pieces: BrokerPieces, key: str, key_type: int = GROUP_KEY_TYPE, unreachable: frozenset[int] = frozenset()
):
    coordination = group_coordination(pieces, set(unreachable))
    try:
        handle = find_coordinator_handler(coordination, pieces.cache)
        return await handle(handler_context(find_one.FindCoordinatorRequest(key=key, key_type=key_type)))
    finally:
        await coordination.stop()


async def test_the_coordinator_is_the_offsets_partition_leader_on_the_asking_listener(pieces) -> None:
    pieces.place(OFFSETS_TOPIC, 0, (OTHER, BROKER_ID), leader=OTHER)
    answer = await find(pieces, "readers")
    assert (answer.error_code, answer.node_id, answer.host, answer.port) == (
        ErrorCode.none,
        OTHER,
        "127.0.0.1",
        9092 + OTHER,
    )


async def test_an_unreachable_leader_is_no_coordinator(pieces) -> None:
    pieces.place(OFFSETS_TOPIC, 0, (OTHER, BROKER_ID), leader=OTHER)
    answer = await find(pieces, "readers", unreachable={OTHER})
    assert (answer.error_code, answer.node_id) == (ErrorCode.coordinator_not_available, -1)


async def test_several_keys_are_answered_each(pieces) -> None:
    pieces.lead(OFFSETS_TOPIC, 0, (BROKER_ID,))
    coordination = group_coordination(pieces)
    try:
        handle = find_coordinator_handler(coordination, pieces.cache)
        request = find_many.FindCoordinatorRequest(key_type=GROUP_KEY_TYPE, coordinator_keys=("a", ""))
        answer = await handle(handler_context(request))
    finally:
        await coordination.stop()
    found = {c.key: (c.error_code, c.node_id) for c in answer.coordinators}
    assert found == {"a": (ErrorCode.none, BROKER_ID), "": (ErrorCode.invalid_group_id, -1)}


async def test_transaction_coordinators_are_refused_at_once(pieces) -> None:
    pieces.lead(OFFSETS_TOPIC, 0, (BROKER_ID,))
    answer = await find(pieces, "tx", key_type=TRANSACTION_KEY_TYPE)
    assert answer.error_code == ErrorCode.transactional_id_authorization_failed
