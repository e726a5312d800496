"""DeleteGroups (v0-v2) and OffsetDelete (v0): removing groups and committed offsets with tombstones.

A group with members is not deleted (NON_EMPTY_GROUP); an offset of a topic the group's members
subscribe to is not deleted either (GROUP_SUBSCRIBED_TO_TOPIC), as in Kafka.
"""

from __future__ import annotations

from typing import Any

from backbone.broker.handlers.common import (
    build,
    by_topic,
    error_code_of,
    response_module,
    throttle,
)
from backbone.broker.network import Handler, RequestContext
from backbone.consumer_groups.coordinator import GroupCoordinator
from backbone.protocol.api import ApiKey


def group_deletion_handlers(coordinator: GroupCoordinator) -> dict[ApiKey, Handler]:
    async def delete_groups(context: RequestContext) -> Any:
        request = context.decode()
        module = response_module(ApiKey.DELETE_GROUPS, context.api_version)
        names = list(dict.fromkeys(request.groups_names))
        try:
            results = await coordinator.delete_groups(names)
        except Exception as exc:
            results = dict.fromkeys(names, error_code_of(exc))
        return build(
            module.DeleteGroupsResponse,
            throttle_time=throttle(),
            results=tuple(
                build(module.DeletableGroupResult, group_id=name, error_code=code)
                for name, code in results.items()
            ),
        )

    async def offset_delete(context: RequestContext) -> Any:
        request = context.decode()
        module = response_module(ApiKey.OFFSET_DELETE, context.api_version)
        wanted = [(t.name, int(p.partition_index)) for t in request.topics for p in t.partitions]
        try:
            error, results = await coordinator.delete_offsets(request.group_id, wanted)
        except Exception as exc:
            error, results = error_code_of(exc), {}
        rows = by_topic(
            (topic, build(module.OffsetDeleteResponsePartition, partition_index=index, error_code=code))
            for (topic, index), code in results.items()
        )
        return build(
            module.OffsetDeleteResponse,
            error_code=error,
            throttle_time=throttle(),
            topics=tuple(
                build(module.OffsetDeleteResponseTopic, name=name, partitions=tuple(parts))
                for name, parts in rows.items()
            ),
        )

    return {ApiKey.DELETE_GROUPS: delete_groups, ApiKey.OFFSET_DELETE: offset_delete}
