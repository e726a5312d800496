"""ElectLeaders: preferred-leader (0) or unclean (1) elections on demand, answered by the controller."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from backbone.broker.handlers.common import build, by_topic, response_module, throttle
from backbone.broker.network import Handler, RequestContext
from backbone.protocol.api import ApiKey
from backbone.protocol.errors import ErrorCode, NotControllerError

if TYPE_CHECKING:
    from backbone.broker.controller.requested_elections import Elections


def elect_leaders_handler(elections: Elections) -> Handler:
    async def handle(context: RequestContext) -> Any:
        request = context.decode()
        module = response_module(ApiKey.ELECT_LEADERS, context.api_version)
        election_type = getattr(request, "election_type", 0)  # v0 knows only preferred elections
        asked = (
            None
            if request.topic_partitions is None
            else [(t.topic, int(p)) for t in request.topic_partitions for p in t.partitions]
        )
        top_error = ErrorCode.none
        try:
            results = await elections.elect(election_type, asked)
        except NotControllerError as exc:
            top_error = exc.code
            results = {key: (exc.code, str(exc)) for key in asked or []}
        rows = by_topic(
            (
                topic,
                build(
                    module.PartitionResult, partition_id=partition, error_code=error, error_message=message
                ),
            )
            for (topic, partition), (error, message) in sorted(results.items())
        )
        return build(
            module.ElectLeadersResponse,
            throttle_time=throttle(),
            error_code=top_error,  # v1+
            replica_election_results=tuple(
                build(module.ReplicaElectionResult, topic=topic, partition_result=tuple(partitions))
                for topic, partitions in rows.items()
            ),
        )

    return handle
