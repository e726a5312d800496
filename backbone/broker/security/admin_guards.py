"""ACL checks in front of the topic, config and cluster administration APIs (and ListOffsets,
OffsetForLeaderEpoch, InitProducerId), with Kafka's permissions and error codes. Installed only when an
authorizer is configured.

Each API lists the (resource type, name, operation) its request needs; when the principal lacks any of
them the whole request is answered with the refusal for every item it names (TOPIC_AUTHORIZATION_FAILED,
or CLUSTER_AUTHORIZATION_FAILED for the cluster and broker configs), so a request mixing allowed and refused
items is refused as a whole.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from backbone.broker.security.authorizer import CLUSTER_NAME
from backbone.protocol.api import ApiKey
from backbone.protocol.errors import ErrorCode
from backbone.wire.messages import build_response

if TYPE_CHECKING:
    from backbone.broker.network import Handler, RequestContext
    from backbone.broker.security.authorizer import Authorizer

TOPIC_REFUSED = ErrorCode.topic_authorization_failed
CLUSTER_REFUSED = ErrorCode.cluster_authorization_failed
_TOPIC_CONFIG, _BROKER_CONFIG = 2, 4  # DescribeConfigs resource types
Need = tuple[str, str, str]  # resource type, name, operation


def _topics(operation: str, field: str = "name") -> Callable[[Any], list[Need]]:
    return lambda request: [("TOPIC", getattr(t, field), operation) for t in request.topics]


def _delete_topics(request: Any) -> list[Need]:
    names = [t.name for t in request.topics] if hasattr(request, "topics") else list(request.topic_names)
    return [("TOPIC", n, "DELETE") for n in names]


def _offset_for_leader_epoch(request: Any) -> list[Need]:
    if getattr(request, "replica_id", -1) >= 0:
        return [("CLUSTER", CLUSTER_NAME, "CLUSTER_ACTION")]
    return [("TOPIC", t.topic, "DESCRIBE") for t in request.topics]


def _configs(operation: str) -> Callable[[Any], list[Need]]:
    def needs(request: Any) -> list[Need]:
        found = []
        for r in request.resources:
            if int(r.resource_type) == _TOPIC_CONFIG:
                found.append(("TOPIC", r.resource_name, operation))
            else:
                found.append(("CLUSTER", CLUSTER_NAME, operation))
        return found

    return needs


def _cluster(operation: str) -> Callable[[Any], list[Need]]:
    return lambda request: [("CLUSTER", CLUSTER_NAME, operation)]


def _partitions(request: Any, field: str, **values: Any) -> list[dict[str, Any]]:
    return [{field: p.partition_index, **values} for p in request]


def _refusal(api_key: ApiKey, version: int, request: Any) -> Any:
    message = "not authorized"
    code = {"error_code": TOPIC_REFUSED, "error_message": message}
    if api_key == ApiKey.CREATE_TOPICS:
        topics = [
            {"name": t.name, "num_partitions": -1, "replication_factor": -1, **code} for t in request.topics
        ]
        return build_response(api_key, version, topics=topics)
    if api_key == ApiKey.DELETE_TOPICS:
        needs = _delete_topics(request)
        return build_response(api_key, version, responses=[{"name": n, **code} for _, n, _ in needs])
    if api_key == ApiKey.CREATE_PARTITIONS:
        return build_response(api_key, version, results=[{"name": t.name, **code} for t in request.topics])
    if api_key == ApiKey.DELETE_RECORDS:
        topics = [
            {
                "name": t.name,
                "partitions": _partitions(t.partitions, "partition_index", low_watermark=-1, **code),
            }
            for t in request.topics
        ]
        return build_response(api_key, version, topics=topics)
    if api_key == ApiKey.LIST_OFFSETS:
        refused = {"timestamp": -1, "offset": -1, "leader_epoch": -1, **code}
        topics = [
            {"name": t.name, "partitions": _partitions(t.partitions, "partition_index", **refused)}
            for t in request.topics
        ]
        return build_response(api_key, version, topics=topics)
    if api_key == ApiKey.OFFSET_FOR_LEADER_EPOCH:
        error = CLUSTER_REFUSED if getattr(request, "replica_id", -1) >= 0 else TOPIC_REFUSED
        topics = [
            {
                "topic": t.topic,
                "partitions": [
                    {"partition": p.partition, "error_code": error, "leader_epoch": -1, "end_offset": -1}
                    for p in t.partitions
                ],
            }
            for t in request.topics
        ]
        return build_response(api_key, version, topics=topics)
    if api_key in (ApiKey.DESCRIBE_CONFIGS, ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS):
        rows = [
            {
                "error_code": TOPIC_REFUSED if int(r.resource_type) == _TOPIC_CONFIG else CLUSTER_REFUSED,
                "error_message": message,
                "resource_type": r.resource_type,
                "resource_name": r.resource_name,
            }
            for r in request.resources
        ]
        field = "results" if api_key == ApiKey.DESCRIBE_CONFIGS else "responses"
        return build_response(api_key, version, **{field: rows})
    # The cluster APIs answer with a top-level error.
    return build_response(
        api_key, version, error_code=CLUSTER_REFUSED, error_message=message, producer_id=-1, producer_epoch=-1
    )


_ADMIN_APIS: dict[ApiKey, Callable[[Any], list[Need]]] = {
    ApiKey.CREATE_TOPICS: _topics("CREATE"),
    ApiKey.DELETE_TOPICS: _delete_topics,
    ApiKey.CREATE_PARTITIONS: _topics("ALTER"),
    ApiKey.DELETE_RECORDS: _topics("DELETE"),
    ApiKey.LIST_OFFSETS: _topics("DESCRIBE"),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: _offset_for_leader_epoch,
    ApiKey.DESCRIBE_CONFIGS: _configs("DESCRIBE_CONFIGS"),
    ApiKey.ALTER_CONFIGS: _configs("ALTER_CONFIGS"),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: _configs("ALTER_CONFIGS"),
    ApiKey.ELECT_LEADERS: _cluster("ALTER"),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: _cluster("ALTER"),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: _cluster("DESCRIBE"),
    ApiKey.DESCRIBE_LOG_DIRS: _cluster("DESCRIBE"),
}


def guard_admin_apis(table: Any, authorizer: Authorizer) -> None:
    """Wrap the registered handlers of `table` (an ApiTable) with their ACL checks."""
    for api_key, needs in _ADMIN_APIS.items():
        if table.versions(api_key) is not None:
            handler = table.handler(api_key, table.versions(api_key).max)
            table.replace(api_key, _guarded(api_key, needs, handler, authorizer))
    init = table.handler(ApiKey.INIT_PRODUCER_ID, table.versions(ApiKey.INIT_PRODUCER_ID).max)
    table.replace(ApiKey.INIT_PRODUCER_ID, _guarded_init_producer_id(init, authorizer))


def _guarded(
    api_key: ApiKey, needs: Callable[[Any], list[Need]], handler: Handler, authorizer: Authorizer
) -> Handler:
    async def guarded(context: RequestContext) -> Any:
        request = context.decode()
        if api_key == ApiKey.CREATE_TOPICS and authorizer.check_cluster(context, "CREATE"):
            return await handler(context)  # CREATE on the cluster covers every topic
        if all(authorizer.check(context, operation, kind, name) for kind, name, operation in needs(request)):
            return await handler(context)
        return _refusal(api_key, context.api_version, request)

    return guarded


def _guarded_init_producer_id(handler: Handler, authorizer: Authorizer) -> Handler:
    """An idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic (KIP-679);
    transactions are not offered, so a transactional id needs nothing more here."""

    async def guarded(context: RequestContext) -> Any:
        if authorizer.check_cluster(context, "IDEMPOTENT_WRITE") or authorizer.check_any(
            context, "WRITE", "TOPIC"
        ):
            return await handler(context)
        return _refusal(ApiKey.INIT_PRODUCER_ID, context.api_version, context.decode())

    return guarded
