"""OffsetCommit (v2-v8): a group's committed offsets, one acks=all append to its offsets partition.

Errors that concern the whole group (not the coordinator, still loading, invalid group id, stale
generation, unknown member) are repeated on every partition, as Kafka answers them. v2-v4's retention
time is ignored: offsets expire by the broker's `offsets.retention.minutes`, as in Kafka 2.1+.
"""

from __future__ import annotations

from typing import Any

from backbone.broker.handlers.common import build, by_topic, error_code_of, response_module, throttle
from backbone.broker.network import Handler, RequestContext
from backbone.consumer_groups.coordinator import GroupCoordinator, OffsetCommit
from backbone.protocol.api import ApiKey
from backbone.protocol.errors import ErrorCode


def offset_commit_handler(coordinator: GroupCoordinator) -> Handler:
    async def handle(context: RequestContext) -> Any:
        request = context.decode()
        module = response_module(ApiKey.OFFSET_COMMIT, context.api_version)
        commits = [
            OffsetCommit(
                topic.name,
                int(p.partition_index),
                int(p.committed_offset),
                int(getattr(p, "committed_leader_epoch", -1)),
                p.committed_metadata,
            )
            for topic in request.topics
            for p in topic.partitions
        ]
        try:
            results = await coordinator.commit_offsets(
                request.group_id,
                request.member_id,
                getattr(request, "group_instance_id", None),
                int(request.generation_id_or_member_epoch),
                commits,
            )
        except Exception as exc:
            code = error_code_of(exc)
            results = {(c.topic, c.partition): code for c in commits}
        rows = by_topic(
            (
                c.topic,
                build(
                    module.OffsetCommitResponsePartition,
                    partition_index=c.partition,
                    error_code=results.get((c.topic, c.partition), ErrorCode.unknown_server_error),
                ),
            )
            for c in commits
        )
        return build(
            module.OffsetCommitResponse,
            throttle_time=throttle(),
            topics=tuple(
                build(module.OffsetCommitResponseTopic, name=name, partitions=tuple(partitions))
                for name, partitions in rows.items()
            ),
        )

    return handle
