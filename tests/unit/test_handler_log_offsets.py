"""The handlers that answer with a partition log's offsets, against a real replica manager over a log
directory (no broker, no network): ListOffsets, OffsetForLeaderEpoch and DeleteRecords."""

from __future__ import annotations

import pytest
from kio.schema.delete_records.v2 import request as delete_records
from kio.schema.errors import ErrorCode
from kio.schema.list_offsets.v7 import request as list_offsets
from kio.schema.offset_for_leader_epoch.v4 import request as offset_for_leader_epoch

from backbone.broker.handlers.delete_records import HIGH_WATERMARK, delete_records_handler
from backbone.broker.handlers.list_offsets import EARLIEST, LATEST, list_offsets_handler
from backbone.broker.handlers.offset_for_leader_epoch import offset_for_leader_epoch_handler
from tests.helpers.batches import build_batch
from tests.helpers.broker_pieces import BrokerPieces, pieces_fixture
from tests.helpers.handler_context import handler_context
from tests.helpers.requests import latest_offset_request, millis

pytestmark = pytest.mark.unit

FOLLOWER = 2


pieces = pieces_fixture()


async def list_offset(pieces: BrokerPieces, timestamp: int, replica_id: int = -1):
    request = latest_offset_request("t", 0, timestamp)
    if replica_id >= 0:
        request = list_offsets.ListOffsetsRequest(
            replica_id=replica_id, isolation_level=0, topics=request.topics
        )
    answer = await list_offsets_handler(pieces.replicas)(handler_context(request))
    (topic,) = answer.topics
    (partition,) = topic.partitions
    return partition


async def end_of_epoch(pieces: BrokerPieces, leader_epoch: int, current_leader_epoch: int = -1):
    request = offset_for_leader_epoch.OffsetForLeaderEpochRequest(
        replica_id=-1,
        topics=(
            offset_for_leader_epoch.OffsetForLeaderTopic(
                topic="t",
                partitions=(
                    offset_for_leader_epoch.OffsetForLeaderPartition(
                        partition=0, current_leader_epoch=current_leader_epoch, leader_epoch=leader_epoch
                    ),
                ),
            ),
        ),
    )
    answer = await offset_for_leader_epoch_handler(pieces.replicas)(handler_context(request))
    (topic,) = answer.topics
    (partition,) = topic.partitions
    return partition


async def delete_below(pieces: BrokerPieces, offset: int):
    request = delete_records.DeleteRecordsRequest(
        topics=(
            delete_records.DeleteRecordsTopic(
                name="t",
                partitions=(delete_records.DeleteRecordsPartition(partition_index=0, offset=offset),),
            ),
        ),
        timeout=millis(10_000),
    )
    answer = await delete_records_handler(pieces.replicas)(handler_context(request))
    (topic,) = answer.topics
    (partition,) = topic.partitions
    return partition


async def test_latest_is_the_high_watermark_for_a_consumer_and_the_log_end_for_a_follower(pieces) -> None:
    partition = pieces.lead("t", 0, (1, FOLLOWER))
    partition.append_as_leader(memoryview(build_batch(3)))
    consumer = await list_offset(pieces, LATEST)
    follower = await list_offset(pieces, LATEST, replica_id=FOLLOWER)
    assert (consumer.error_code, consumer.offset) == (ErrorCode.none, 0)
    assert follower.offset == 3
    partition.update_follower(FOLLOWER, 3)
    assert (await list_offset(pieces, LATEST)).offset == 3


async def test_delete_records_moves_the_earliest_offset_up_to_the_high_watermark(pieces) -> None:
    partition = pieces.lead("t", 0, (1,))
    partition.append_as_leader(memoryview(build_batch(3)))
    partition.append_as_leader(memoryview(build_batch(2)))
    assert (await list_offset(pieces, EARLIEST)).offset == 0
    moved = await delete_below(pieces, 3)
    assert (moved.error_code, moved.low_watermark) == (ErrorCode.none, 3)
    assert (await list_offset(pieces, EARLIEST)).offset == 3
    everything = await delete_below(pieces, HIGH_WATERMARK)
    assert everything.low_watermark == 5
    assert (await list_offset(pieces, EARLIEST)).offset == 5


async def test_delete_records_above_the_high_watermark_is_out_of_range_and_deletes_nothing(pieces) -> None:
    partition = pieces.lead("t", 0, (1, FOLLOWER))
    partition.append_as_leader(memoryview(build_batch(3)))  # not yet on the follower: high watermark 0
    refused = await delete_below(pieces, 2)
    assert refused.error_code == ErrorCode.offset_out_of_range
    assert partition.log.log_start_offset == 0


async def test_offset_for_leader_epoch_names_where_each_epoch_ends(pieces) -> None:
    partition = pieces.place("t", 0, (1,), leader=1, leader_epoch=0)
    partition.append_as_leader(memoryview(build_batch(3)))
    partition = pieces.place("t", 0, (1,), leader=1, leader_epoch=1)
    partition.append_as_leader(memoryview(build_batch(2)))
    first = await end_of_epoch(pieces, 0)
    current = await end_of_epoch(pieces, 1)
    assert (first.error_code, first.leader_epoch, first.end_offset) == (ErrorCode.none, 0, 3)
    assert (current.leader_epoch, current.end_offset) == (1, 5)
    fenced = await end_of_epoch(pieces, 0, current_leader_epoch=0)
    assert fenced.error_code == ErrorCode.fenced_leader_epoch


async def test_a_partition_led_elsewhere_is_answered_not_leader_by_each(pieces) -> None:
    pieces.place("t", 0, (2, 1), leader=2)
    assert (await list_offset(pieces, LATEST)).error_code == ErrorCode.not_leader_or_follower
    assert (await end_of_epoch(pieces, 0)).error_code == ErrorCode.not_leader_or_follower
    assert (await delete_below(pieces, 0)).error_code == ErrorCode.not_leader_or_follower
