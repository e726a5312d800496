"""DeleteRecords: move a partition's log start offset (the low watermark) up, on its leader.

Offset -1 means "up to the high watermark"; an offset above the high watermark, or another negative one,
is OFFSET_OUT_OF_RANGE, as in Kafka. Segments wholly below the new start are deleted at once; consumers
asking below it get OFFSET_OUT_OF_RANGE and reset. The answer carries the leader's new log start offset
(Kafka waits until every follower has moved too; followers here learn it through replication).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from backbone.broker.handlers.common import build, error_code_of, response_module, throttle
from backbone.broker.network import Handler, RequestContext
from backbone.protocol.api import ApiKey
from backbone.protocol.errors import OffsetOutOfRangeError

if TYPE_CHECKING:
    from backbone.broker.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

# DeleteRecords' "delete everything below the high watermark".
HIGH_WATERMARK = -1


def delete_records_handler(replicas: ReplicaManager) -> Handler:
    async def handle(context: RequestContext) -> Any:
        request = context.decode()
        module = response_module(ApiKey.DELETE_RECORDS, context.api_version)
        topics = []
        for topic in request.topics:
            answers = []
            for asked in topic.partitions:
                try:
                    low_watermark = await _delete_below(
                        replicas, topic.name, asked.partition_index, asked.offset
                    )
                    error = ErrorCode.none
                except Exception as exc:
                    low_watermark, error = -1, error_code_of(exc)
                answers.append(
                    build(
                        module.DeleteRecordsPartitionResult,
                        partition_index=asked.partition_index,
                        low_watermark=low_watermark,
                        error_code=error,
                    )
                )
            topics.append(build(module.DeleteRecordsTopicResult, name=topic.name, partitions=tuple(answers)))
        return build(module.DeleteRecordsResponse, throttle_time=throttle(), topics=tuple(topics))

    return handle


async def _delete_below(replicas: ReplicaManager, topic: str, index: int, offset: int) -> int:
    """Move the log start offset of a led partition to `offset`; return the log start offset after."""
    partition = replicas.leader_partition(topic, index)
    target = partition.high_watermark if offset == HIGH_WATERMARK else offset
    if target < 0:
        raise OffsetOutOfRangeError(f"{topic}-{index}: cannot delete records below offset {offset}")
    # Deleting segment files and writing the checkpoint touch the disk: keep them off the event loop.
    moved = await asyncio.to_thread(partition.log.increment_log_start_offset, target)
    if moved:
        log.info(
            "event=records_deleted partition=%s-%d log_start_offset=%d",
            topic,
            index,
            partition.log.log_start_offset,
        )
    return partition.log.log_start_offset
