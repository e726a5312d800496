"""OffsetForLeaderEpoch: where the leader's history for an epoch ends (KIP-101).

A follower that comes back after a leader change asks with its latest epoch and truncates to the
smaller of the answer and its own end for the epoch named; a consumer asks to detect truncation after an
unclean election. Only the leader answers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from backbone.broker.handlers.fetch import check_leader_epoch
from backbone.broker.handlers.leader_partitions import Shape, leader_partitions_handler
from backbone.broker.network import Handler
from backbone.protocol.api import ApiKey

if TYPE_CHECKING:
    from backbone.broker.replica_manager import ReplicaManager


def offset_for_leader_epoch_handler(replicas: ReplicaManager) -> Handler:
    async def end_offset(request: Any, topic: str, index: int, asked: Any) -> dict[str, Any]:
        partition = replicas.leader_partition(topic, index)
        check_leader_epoch(partition, asked.current_leader_epoch)
        epoch, end = partition.log.end_offset_for_epoch(asked.leader_epoch)
        return {"leader_epoch": epoch, "end_offset": end}

    return leader_partitions_handler(
        ApiKey.OFFSET_FOR_LEADER_EPOCH,
        Shape(
            "OffsetForLeaderEpochResponse",
            "OffsetForLeaderTopicResult",
            "EpochEndOffset",
            topic_field="topic",
            partition_field="partition",
        ),
        end_offset,
        failed={"leader_epoch": -1, "end_offset": -1},
    )
