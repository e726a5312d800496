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

from backbone.broker.handlers.leader_partitions import Shape, leader_partitions_handler
from backbone.broker.network import Handler
from backbone.protocol.api import ApiKey
from backbone.protocol.errors import OffsetOutOfRangeError

if TYPE_CHECKING:
    from backbone.broker.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

# DeleteRecords' "delete everything below the high watermark".
HIGH_WATERMARK = -1


def delete_records_handler(replicas: ReplicaManager) -> Handler:
    async def delete(request: Any, topic: str, index: int, asked: Any) -> dict[str, Any]:
        return {"low_watermark": await _delete_below(replicas, topic, index, asked.offset)}

    return leader_partitions_handler(
        ApiKey.DELETE_RECORDS,
        Shape("DeleteRecordsResponse", "DeleteRecordsTopicResult", "DeleteRecordsPartitionResult"),
        delete,
        failed={"low_watermark": -1},
    )


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
