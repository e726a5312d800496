"""FindCoordinator: which broker coordinates a group (the leader of its `__consumer_offsets` partition).

v0-v3 ask for one key, v4 for several (KIP-699). The first request of a cluster creates the offsets topic;
until its partition has a live leader the answer is COORDINATOR_NOT_AVAILABLE, which clients retry.
Transaction coordinators (key type 1) are not offered: this broker does not support transactions. The
answer is TRANSACTIONAL_ID_AUTHORIZATION_FAILED, not a retriable code: librdkafka, the Java client,
kafka-python and aiokafka all fail `init_transactions` at once on it (InitProducerId with a transactional
id answers the same), where COORDINATOR_NOT_AVAILABLE made them retry until their timeout.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from backbone.broker.handlers.common import build, error_code_of, error_message_of, response_module, throttle
from backbone.broker.network import Handler, RequestContext
from backbone.consumer_groups.coordinator import CoordinatorError, validate_group_id
from backbone.protocol.api import ApiKey
from backbone.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from backbone.broker.group_coordination import GroupCoordination
    from backbone.broker.metadata_cache import MetadataCache

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1


class Found(NamedTuple):
    error_code: ErrorCode
    error_message: str | None
    node_id: int = -1
    host: str = ""
    port: int = -1


def find_coordinator_handler(coordination: GroupCoordination, cache: MetadataCache) -> Handler:
    async def handle(context: RequestContext) -> Any:
        request = context.decode()
        version = context.api_version
        module = response_module(ApiKey.FIND_COORDINATOR, version)
        key_type = int(getattr(request, "key_type", GROUP_KEY_TYPE))
        listener = context.connection.listener.name
        if version >= 4:
            coordinators = []
            for key in request.coordinator_keys:
                found = await _find(coordination, cache, key_type, key, listener)
                coordinators.append(build(module.Coordinator, key=key, **found._asdict()))
            return build(
                module.FindCoordinatorResponse, throttle_time=throttle(), coordinators=tuple(coordinators)
            )
        found = await _find(coordination, cache, key_type, request.key, listener)
        return build(module.FindCoordinatorResponse, throttle_time=throttle(), **found._asdict())

    return handle


async def _find(
    coordination: GroupCoordination, cache: MetadataCache, key_type: int, key: str, listener: str
) -> Found:
    if key_type == TRANSACTION_KEY_TYPE:
        return Found(
            ErrorCode.transactional_id_authorization_failed,
            "transactions are not supported by this broker: use an idempotent producer (no transactional.id)",
        )
    if key_type != GROUP_KEY_TYPE:
        return Found(ErrorCode.invalid_request, f"unknown coordinator key type {key_type}")
    try:
        validate_group_id(key)
        await coordination.ensure_offsets_topic()
    except CoordinatorError as exc:
        return Found(exc.code, exc.message)
    except KafkaError as exc:
        return Found(
            ErrorCode.coordinator_not_available, f"the offsets topic cannot be created: {exc.message}"
        )
    except Exception as exc:  # a bug fails this key, not the connection
        return Found(error_code_of(exc), error_message_of(exc))
    node = coordination.coordinator_of(key)
    address = None if node < 0 else cache.endpoint(node, listener)
    if address is None:
        return Found(
            ErrorCode.coordinator_not_available, "the group's offsets partition has no live leader yet"
        )
    return Found(ErrorCode.none, None, node, address[0], address[1])
