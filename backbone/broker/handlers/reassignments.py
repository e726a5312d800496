"""AlterPartitionReassignments and ListPartitionReassignments, answered by the controller (KIP-455).

Other brokers, and a controller replaced while it served the request, answer NOT_CONTROLLER: clients then
ask the new one. ZooKeeper trouble is a top-level error (REQUEST_TIMED_OUT while it is unreachable, which
clients retry).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from backbone.broker.handlers.admin_common import error_of
from backbone.broker.handlers.common import build, by_topic, response_module, throttle
from backbone.broker.network import Handler, RequestContext
from backbone.coordination import CoordinationError
from backbone.protocol.api import ApiKey
from backbone.protocol.errors import ErrorCode, NotControllerError

if TYPE_CHECKING:
    from backbone.broker.controller.reassignment_work import Reassignments


def reassignments_handlers(reassignments: Reassignments) -> dict[ApiKey, Handler]:
    async def alter(context: RequestContext) -> Any:
        request = context.decode()
        module = response_module(ApiKey.ALTER_PARTITION_REASSIGNMENTS, context.api_version)
        asked = {
            (topic.name, int(p.partition_index)): None if p.replicas is None else [int(r) for r in p.replicas]
            for topic in request.topics
            for p in topic.partitions
        }
        top: tuple[ErrorCode, str | None] = (ErrorCode.none, None)
        try:
            reassignments.require_controller()
            outcomes = await reassignments.alter(asked)
        except (NotControllerError, CoordinationError) as exc:
            top = error_of(exc, "alter_partition_reassignments")
            outcomes = dict.fromkeys(asked, top)
        rows = by_topic(
            (
                topic,
                build(
                    module.ReassignablePartitionResponse,
                    partition_index=partition,
                    error_code=error,
                    error_message=message,
                ),
            )
            for (topic, partition), (error, message) in sorted(outcomes.items())
        )
        return build(
            module.AlterPartitionReassignmentsResponse,
            throttle_time=throttle(),
            error_code=top[0],
            error_message=top[1],
            responses=tuple(
                build(module.ReassignableTopicResponse, name=name, partitions=tuple(partitions))
                for name, partitions in rows.items()
            ),
        )

    async def listing(context: RequestContext) -> Any:
        request = context.decode()
        module = response_module(ApiKey.LIST_PARTITION_REASSIGNMENTS, context.api_version)
        asked = (
            None
            if request.topics is None
            else [(t.name, int(p)) for t in request.topics for p in t.partition_indexes]
        )
        try:
            reassignments.require_controller()
            found = await reassignments.in_progress(asked)
        except (NotControllerError, CoordinationError) as exc:
            error, message = error_of(exc, "list_partition_reassignments")
            return build(
                module.ListPartitionReassignmentsResponse,
                throttle_time=throttle(),
                error_code=error,
                error_message=message,
                topics=(),
            )
        rows = by_topic(
            (
                topic,
                build(
                    module.OngoingPartitionReassignment,
                    partition_index=partition,
                    replicas=state.replicas,
                    adding_replicas=state.adding,
                    removing_replicas=state.removing,
                ),
            )
            for (topic, partition), state in sorted(found.items())
        )
        return build(
            module.ListPartitionReassignmentsResponse,
            throttle_time=throttle(),
            error_code=ErrorCode.none,
            error_message=None,
            topics=tuple(
                build(module.OngoingTopicReassignment, name=name, partitions=tuple(partitions))
                for name, partitions in rows.items()
            ),
        )

    return {ApiKey.ALTER_PARTITION_REASSIGNMENTS: alter, ApiKey.LIST_PARTITION_REASSIGNMENTS: listing}
