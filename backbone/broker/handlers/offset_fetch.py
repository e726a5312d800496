"""OffsetFetch (v1-v8): a group's committed offsets; -1 (no metadata) where none is committed.

v2+ may ask for every partition the group has an offset for (topics null) and carry a group-level error;
v1 has no such field, so its errors go on each partition asked for. v8 asks for several groups at once
(KIP-709). `require_stable` needs no waiting: without transactions every commit is stable once answered.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from backbone.broker.handlers.common import build, by_topic, error_code_of, response_module, throttle
from backbone.broker.network import Handler, RequestContext
from backbone.protocol.api import ApiKey
from backbone.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from backbone.consumer_groups.coordinator import GroupCoordinator

NO_OFFSET = -1
NO_LEADER_EPOCH = -1


def offset_fetch_handler(coordinator: GroupCoordinator) -> Handler:
    async def handle(context: RequestContext) -> Any:
        request = context.decode()
        version = context.api_version
        module = response_module(ApiKey.OFFSET_FETCH, version)
        if version >= 8:
            groups = tuple(
                _group_answer(
                    coordinator,
                    module,
                    version,
                    g.group_id,
                    g.topics,
                    group_type=module.OffsetFetchResponseGroup,
                )
                for g in request.groups
            )
            return build(module.OffsetFetchResponse, throttle_time=throttle(), groups=groups)
        answer = _group_answer(coordinator, module, version, request.group_id, request.topics)
        return build(module.OffsetFetchResponse, throttle_time=throttle(), **answer)

    return handle


def _group_answer(
    coordinator: GroupCoordinator,
    module: Any,
    version: int,
    group_id: str,
    topics: Sequence[Any] | None,
    group_type: Any = None,
) -> Any:
    """One group's answer: the fields of a v1-v7 response, or a v8 OffsetFetchResponseGroup."""
    wanted = None if topics is None else [(t.name, int(p)) for t in topics for p in t.partition_indexes]
    error = ErrorCode.none
    try:
        found = coordinator.fetch_offsets(group_id, wanted)
    except Exception as exc:
        error = error_code_of(exc)
        found = {}
    # v1 cannot say "the group failed" except on each partition; later versions say it once.
    partition_error = error if version < 2 else ErrorCode.none
    shown = found if error is ErrorCode.none else ({} if version >= 2 else dict.fromkeys(wanted or ()))
    # v8 names its nested types in the plural.
    partition_type = (
        module.OffsetFetchResponsePartitions if version >= 8 else module.OffsetFetchResponsePartition
    )
    topic_type = module.OffsetFetchResponseTopics if version >= 8 else module.OffsetFetchResponseTopic
    rows = by_topic(
        (
            topic,
            build(
                partition_type,
                partition_index=index,
                committed_offset=NO_OFFSET if committed is None else committed.offset,
                committed_leader_epoch=NO_LEADER_EPOCH if committed is None else committed.leader_epoch,
                metadata="" if committed is None else committed.metadata,
                error_code=partition_error,
            ),
        )
        for (topic, index), committed in shown.items()
    )
    fields = {
        "topics": tuple(
            build(topic_type, name=name, partitions=tuple(parts)) for name, parts in rows.items()
        ),
        "error_code": error,
    }
    if group_type is None:
        return fields
    return build(group_type, group_id=group_id, **fields)
