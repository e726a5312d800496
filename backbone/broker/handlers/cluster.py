"""DescribeCluster: the live brokers (at the address of the listener the request came in on), the cluster id
and the controller. This is a ZooKeeper-mode cluster: brokers answer for brokers only, so a v1 request for
controller endpoints (KIP-919) gets MISMATCHED_ENDPOINT_TYPE, as a Kafka broker answers it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from backbone.broker.handlers.common import build, response_module, throttle
from backbone.broker.network import Handler, RequestContext
from backbone.broker.security.authorizer import CLUSTER_NAME, Authorizer
from backbone.protocol.api import ApiKey

if TYPE_CHECKING:
    from backbone.broker.metadata_cache import MetadataCache

# DescribeCluster v1's endpoint types.
BROKER_ENDPOINT = 1
CONTROLLER_ENDPOINT = 2

# Kafka's value for "authorized operations not requested".
NOT_REQUESTED = -(2**31)


def describe_cluster_handler(cache: MetadataCache, authorizer: Authorizer) -> Handler:
    async def handle(context: RequestContext) -> Any:
        request = context.decode()
        module = response_module(ApiKey.DESCRIBE_CLUSTER, context.api_version)
        endpoint_type = getattr(request, "endpoint_type", BROKER_ENDPOINT)
        operations = (
            authorizer.authorized_operations(context, "CLUSTER", CLUSTER_NAME)
            if request.include_cluster_authorized_operations
            else NOT_REQUESTED
        )
        if endpoint_type != BROKER_ENDPOINT:
            return build(
                module.DescribeClusterResponse,
                throttle_time=throttle(),
                error_code=ErrorCode.mismatched_endpoint_type,
                error_message=(
                    "The request was sent to an endpoint of type BROKER, "
                    f"but we wanted an endpoint of type {_endpoint_name(endpoint_type)}"
                ),
                endpoint_type=BROKER_ENDPOINT,
                cluster_id=cache.cluster_id or "",
                controller_id=-1,
                brokers=(),
                cluster_authorized_operations=NOT_REQUESTED,
            )
        brokers = tuple(
            build(module.DescribeClusterBroker, broker_id=broker_id, host=host, port=port, rack=rack)
            for broker_id, host, port, rack in cache.reachable_brokers(context.connection.listener.name)
        )
        return build(
            module.DescribeClusterResponse,
            throttle_time=throttle(),
            error_code=ErrorCode.none,
            error_message=None,
            endpoint_type=BROKER_ENDPOINT,
            cluster_id=cache.cluster_id or "",
            controller_id=cache.controller_id,
            brokers=brokers,
            cluster_authorized_operations=operations,
        )

    return handle


def _endpoint_name(endpoint_type: int) -> str:
    return "CONTROLLER" if endpoint_type == CONTROLLER_ENDPOINT else f"UNKNOWN({endpoint_type})"
