"""OffsetForLeaderEpoch: where the leader's history for an epoch ends (KIP-101).

A follower that comes back after a leader change asks with its latest epoch and truncates to the
smaller of the answer and its own end for the epoch named; a consumer asks to detect truncation after an
unclean election. Only the leader answers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from backbone.broker.handlers.common import build, error_code_of, response_module, throttle
from backbone.broker.handlers.fetch import check_leader_epoch
from backbone.broker.network import Handler, RequestContext
from backbone.protocol.api import ApiKey

if TYPE_CHECKING:
    from backbone.broker.replica_manager import ReplicaManager


def offset_for_leader_epoch_handler(replicas: ReplicaManager) -> Handler:
    async def handle(context: RequestContext) -> Any:
        request = context.decode()
        module = response_module(ApiKey.OFFSET_FOR_LEADER_EPOCH, context.api_version)
        topics = []
        for topic in request.topics:
            answers = []
            for asked in topic.partitions:
                try:
                    partition = replicas.leader_partition(topic.topic, asked.partition)
                    check_leader_epoch(partition, asked.current_leader_epoch)
                    epoch, end_offset = partition.log.end_offset_for_epoch(asked.leader_epoch)
                    error = ErrorCode.none
                except Exception as exc:
                    epoch, end_offset, error = -1, -1, error_code_of(exc)
                answers.append(
                    build(
                        module.EpochEndOffset,
                        error_code=error,
                        partition=asked.partition,
                        leader_epoch=epoch,
                        end_offset=end_offset,
                    )
                )
            topics.append(
                build(module.OffsetForLeaderTopicResult, topic=topic.topic, partitions=tuple(answers))
            )
        return build(module.OffsetForLeaderEpochResponse, throttle_time=throttle(), topics=tuple(topics))

    return handle
