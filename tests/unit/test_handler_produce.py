"""The Produce handler against a real replica manager over a log directory (no broker, no network): what it
appends, what it refuses, and that min.insync.replicas refuses before anything is written."""

from __future__ import annotations

import asyncio

import pytest
from kio.schema.errors import ErrorCode

from backbone.broker.handlers.produce import produce_handler
from backbone.consumer_groups.offsets_topic import OFFSETS_TOPIC
from tests.helpers.batches import build_batch
from tests.helpers.broker_pieces import BrokerPieces, pieces_fixture
from tests.helpers.handler_context import decoded_answer, handler_context
from tests.helpers.requests import produce_request, produce_request_for

pytestmark = pytest.mark.unit


pieces = pieces_fixture()


async def produce(pieces: BrokerPieces, topic: str, partition: int, records: bytes, acks: int):
    handle = produce_handler(pieces.replicas, pieces.authorizer, pieces.config, None)
    request = produce_request(topic, partition, records, acks=acks)
    answer = decoded_answer(request, await handle(handler_context(request)))
    if answer is None:
        return None
    (topic_answer,) = answer.responses
    (partition_answer,) = topic_answer.partition_responses
    return partition_answer


async def test_acks_1_appends_and_answers_each_batch_with_its_base_offset(pieces) -> None:
    partition = pieces.lead("t", 0, (1,))
    first = await produce(pieces, "t", 0, build_batch(3), acks=1)
    second = await produce(pieces, "t", 0, build_batch(2), acks=1)
    assert (first.error_code, first.base_offset) == (ErrorCode.none, 0)
    assert (second.error_code, second.base_offset) == (ErrorCode.none, 3)
    assert partition.log.log_end_offset == 5


async def test_acks_0_appends_without_an_answer(pieces) -> None:
    partition = pieces.lead("t", 0, (1,))
    assert await produce(pieces, "t", 0, build_batch(4), acks=0) is None
    assert partition.log.log_end_offset == 4


async def test_acks_all_is_answered_once_the_whole_isr_has_the_batch(pieces) -> None:
    partition = pieces.lead("t", 0, (1,))
    answer = await produce(pieces, "t", 0, build_batch(2), acks=-1)
    assert (answer.error_code, answer.base_offset) == (ErrorCode.none, 0)
    assert partition.high_watermark == 2


async def test_an_isr_smaller_than_min_insync_replicas_refuses_acks_all_and_writes_nothing(pieces) -> None:
    partition = pieces.lead("t", 0, (1, 2), isr=(1,))
    pieces.replicas.apply_topic_config("t", {"min.insync.replicas": "2"})
    refused = await produce(pieces, "t", 0, build_batch(2), acks=-1)
    assert refused.error_code == ErrorCode.not_enough_replicas
    assert "min.insync.replicas=2" in refused.error_message
    assert partition.log.log_end_offset == 0
    accepted = await produce(pieces, "t", 0, build_batch(2), acks=1)  # acks=1 does not ask for the ISR
    assert (accepted.error_code, accepted.base_offset) == (ErrorCode.none, 0)


async def test_a_partition_led_elsewhere_is_refused_as_not_leader(pieces) -> None:
    pieces.place("t", 0, (2, 1), leader=2)
    answer = await produce(pieces, "t", 0, build_batch(1), acks=1)
    assert answer.error_code == ErrorCode.not_leader_or_follower


async def test_an_unknown_partition_is_refused(pieces) -> None:
    answer = await produce(pieces, "nowhere", 0, build_batch(1), acks=1)
    assert answer.error_code == ErrorCode.unknown_topic_or_partition


async def test_the_offsets_topic_is_written_by_the_group_coordinator_alone(pieces) -> None:
    partition = pieces.lead(OFFSETS_TOPIC, 0, (1,))
    answer = await produce(pieces, OFFSETS_TOPIC, 0, build_batch(1), acks=1)
    assert answer.error_code == ErrorCode.invalid_topic_exception
    assert partition.log.log_end_offset == 0


async def test_acks_outside_0_1_and_all_are_refused(pieces) -> None:
    partition = pieces.lead("t", 0, (1,))
    answer = await produce(pieces, "t", 0, build_batch(1), acks=2)
    assert answer.error_code == ErrorCode.invalid_required_acks
    assert partition.log.log_end_offset == 0


async def test_acks_all_appends_every_partition_before_waiting_for_any(pieces) -> None:
    """As Kafka's delayed produce: a request naming several partitions waits one replication round trip,
    not one per partition (each partition's followers fetch what was appended in the same round)."""
    first, second = pieces.lead("t", 0, (1, 2)), pieces.lead("t", 1, (1, 2))
    handle = produce_handler(pieces.replicas, pieces.authorizer, pieces.config, None)
    request = produce_request_for("t", {0: build_batch(2), 1: build_batch(3)}, acks=-1)
    answering = asyncio.create_task(handle(handler_context(request)))
    await asyncio.sleep(0.05)
    assert not answering.done(), "acks=all waits for the follower"
    assert (first.log.log_end_offset, second.log.log_end_offset) == (2, 3), "both appended before any wait"
    second.update_follower(2, 3)
    first.update_follower(2, 2)
    answer = decoded_answer(request, await asyncio.wait_for(answering, 5))
    (topic_answer,) = answer.responses
    assert [(p.index, p.error_code, p.base_offset) for p in topic_answer.partition_responses] == [
        (0, ErrorCode.none, 0),
        (1, ErrorCode.none, 0),
    ]
