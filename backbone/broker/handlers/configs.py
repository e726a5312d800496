"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topics and brokers.

Topic overrides live in ZooKeeper (`/config/topics/<topic>`); the store writes them together with a change
notification that every broker follows, so each broker re-reads the overrides and its open logs take the
new retention or segment settings (ReplicaManager.apply_topic_config). Describing reads ZooKeeper too, so
an answer right after an alter shows the change.

Broker resources are Kafka's dynamic broker configs (broker_configs.py), stored the same way in
`/config/brokers/<id>` and `/config/brokers/<default>` (an empty resource name: the cluster-wide defaults).
A broker resource must name this broker or be empty, as in Kafka, whose clients send each broker's
resources to that broker. Describing a topic reports the defaults this broker has applied.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from backbone.broker.handlers.admin_common import AdminPieces, error_of
from backbone.broker.handlers.broker_configs import (
    broker_key_type,
    describe_broker,
    describe_broker_defaults,
    inherited_broker_value,
    validate_dynamic,
)
from backbone.broker.handlers.common import build, response_module, throttle
from backbone.broker.handlers.config_catalog import (
    ConfigEntry,
    ConfigType,
    describe_topic,
    inherited_value,
    topic_key_type,
    validate_topic_overrides,
)
from backbone.broker.network import Handler, RequestContext
from backbone.coordination import paths
from backbone.protocol.api import ApiKey
from backbone.protocol.errors import (
    InvalidConfigError,
    InvalidRequestError,
    UnknownTopicOrPartitionError,
)

log = logging.getLogger(__name__)

# Resource types (Kafka's ConfigResource.Type).
TOPIC = 2
BROKER = 4

# IncrementalAlterConfigs operations.
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def configs_handlers(admin: AdminPieces) -> dict[ApiKey, Handler]:
    async def describe(context: RequestContext) -> Any:
        return await _describe_configs(admin, context)

    async def alter(context: RequestContext) -> Any:
        return await _alter_configs(admin, context, incremental=False)

    async def incremental_alter(context: RequestContext) -> Any:
        return await _alter_configs(admin, context, incremental=True)

    return {
        ApiKey.DESCRIBE_CONFIGS: describe,
        ApiKey.ALTER_CONFIGS: alter,
        ApiKey.INCREMENTAL_ALTER_CONFIGS: incremental_alter,
    }


def _unsupported(resource_type: int) -> InvalidRequestError:
    return InvalidRequestError(
        f"Unsupported resource type: {resource_type} (this broker serves TOPIC and BROKER)"
    )


def _check_broker_name(admin: AdminPieces, name: str) -> int | None:
    """A broker resource names this broker (its id), or is empty (None: the cluster-wide defaults)."""
    if name == "":
        return None
    try:
        broker_id = int(name)
    except ValueError:
        raise InvalidRequestError(f"Broker id must be an integer, but it is: {name}") from None
    if broker_id != admin.broker_id:
        raise InvalidRequestError(
            f"Unexpected broker id, expected {admin.broker_id} or empty string, but received {name}"
        )
    return broker_id


async def _require_topic(admin: AdminPieces, name: str) -> None:
    paths.validate_topic_name(name)
    if name not in admin.cache.topics and not await admin.zk(admin.store.topic_exists, name):
        raise UnknownTopicOrPartitionError(f"The topic '{name}' does not exist.")


def _resource_result(result_type: type, resource: Any, code: int, message: str | None, **fields: Any) -> Any:
    """One resource's answer: the resource as the request named it, its error and any `fields`."""
    return build(
        result_type,
        error_code=code,
        error_message=message,
        resource_type=resource.resource_type,
        resource_name=resource.resource_name,
        **fields,
    )


# -- DescribeConfigs -------------------------------------------------------------------------------------


async def _describe_configs(admin: AdminPieces, context: RequestContext) -> Any:
    request = context.decode()
    module = response_module(ApiKey.DESCRIBE_CONFIGS, context.api_version)
    synonyms = bool(getattr(request, "include_synonyms", False))
    documentation = bool(getattr(request, "include_documentation", False))
    results = []
    for resource in request.resources:
        try:
            entries = await _describe_resource(admin, resource.resource_type, resource.resource_name)
            code, message = ErrorCode.none, None
        except Exception as exc:
            entries = []
            code, message = error_of(exc, "describe_configs")
        if resource.configuration_keys is not None:
            wanted = set(resource.configuration_keys)
            entries = [e for e in entries if e.name in wanted]
        configs = tuple(_entry(module, e, synonyms, documentation) for e in entries)
        results.append(
            _resource_result(module.DescribeConfigsResult, resource, code, message, configs=configs)
        )
    return build(module.DescribeConfigsResponse, throttle_time=throttle(), results=tuple(results))


async def _describe_resource(admin: AdminPieces, resource_type: int, name: str) -> list[ConfigEntry]:
    if resource_type == TOPIC:
        paths.validate_topic_name(name)
        overrides = await admin.zk(admin.store.get_topic_config, name)
        return describe_topic(admin.config, overrides)
    if resource_type == BROKER:
        broker_id = _check_broker_name(admin, name)
        defaults = await admin.zk(admin.store.get_broker_config, None)
        if broker_id is None:
            return describe_broker_defaults(defaults)
        per_broker = await admin.zk(admin.store.get_broker_config, broker_id)
        return describe_broker(admin.config, defaults, per_broker)
    raise _unsupported(resource_type)


def _entry(module: Any, entry: ConfigEntry, synonyms: bool, documentation: bool) -> Any:
    listed = entry.synonyms if synonyms else ()
    return build(
        module.DescribeConfigsResourceResult,
        **entry.wire_fields(),
        synonyms=tuple(
            build(module.DescribeConfigsSynonym, name=name, value=value, source=int(source))
            for name, value, source in listed
        ),
        documentation=entry.documentation if documentation else None,
    )


# -- AlterConfigs and IncrementalAlterConfigs -----------------------------------------------------------


async def _alter_configs(admin: AdminPieces, context: RequestContext, *, incremental: bool) -> Any:
    request = context.decode()
    api_key = ApiKey.INCREMENTAL_ALTER_CONFIGS if incremental else ApiKey.ALTER_CONFIGS
    module = response_module(api_key, context.api_version)
    counts = Counter((r.resource_type, r.resource_name) for r in request.resources)
    answers = []
    for resource in request.resources:
        key = (resource.resource_type, resource.resource_name)
        try:
            if counts[key] > 1:
                raise InvalidRequestError(f"Duplicate resource in request: {resource.resource_name}")
            await _alter_resource(admin, resource, incremental, request.validate_only)
            code, message = ErrorCode.none, None
        except Exception as exc:
            code, message = error_of(exc, "alter_configs")
        answers.append(_resource_result(module.AlterConfigsResourceResponse, resource, code, message))
    response = module.IncrementalAlterConfigsResponse if incremental else module.AlterConfigsResponse
    return build(response, throttle_time=throttle(), responses=tuple(answers))


async def _alter_resource(admin: AdminPieces, resource: Any, incremental: bool, validate_only: bool) -> None:
    name = resource.resource_name
    if resource.resource_type == BROKER:
        await _alter_broker(admin, resource, incremental, validate_only)
        return
    if resource.resource_type != TOPIC:
        raise _unsupported(resource.resource_type)
    await _require_topic(admin, name)
    if incremental:
        current = await admin.zk(admin.store.get_topic_config, name)
        overrides = _apply_operations(
            current, resource.configs, topic_key_type, lambda key: inherited_value(admin.config, key)
        )
    else:
        # AlterConfigs replaces the whole override set; a null value means "no override".
        overrides = {c.name: c.value for c in resource.configs if c.value is not None}
    validate_topic_overrides(overrides, admin.config)
    if validate_only:
        return
    await admin.zk(admin.store.set_topic_config, name, overrides)
    log.info("event=topic_config_altered topic=%s overrides=%s", name, ",".join(sorted(overrides)) or "-")


async def _alter_broker(admin: AdminPieces, resource: Any, incremental: bool, validate_only: bool) -> None:
    """A broker's dynamic configs (or the cluster-wide defaults), replaced or changed by operations."""
    broker_id = _check_broker_name(admin, resource.resource_name)
    defaults = await admin.zk(admin.store.get_broker_config, None)
    current = defaults if broker_id is None else await admin.zk(admin.store.get_broker_config, broker_id)
    if incremental:
        # APPEND and SUBTRACT start from the value the level below gives when this one sets none.
        below = {} if broker_id is None else defaults
        values = _apply_operations(
            current,
            resource.configs,
            broker_key_type,
            lambda key: inherited_broker_value(admin.config, key, below, {}),
        )
    else:
        values = {c.name: c.value for c in resource.configs if c.value is not None}
    validate_dynamic(values, per_broker=broker_id is not None)
    if validate_only:
        return
    await admin.zk(admin.store.set_broker_config, broker_id, values)
    log.info(
        "event=broker_config_altered broker=%s keys=%s",
        "<default>" if broker_id is None else broker_id,
        ",".join(sorted(values)) or "-",
    )


def _apply_operations(
    current: dict[str, str],
    operations: Any,
    key_type: Callable[[str], ConfigType],
    inherited: Callable[[str], str | None],
) -> dict[str, str]:
    """The config set after IncrementalAlterConfigs' operations, in Kafka's semantics: APPEND and SUBTRACT
    apply to LIST keys only (`key_type`), starting from the value set here or else `inherited(key)`."""
    names = [op.name for op in operations]
    repeated = sorted(n for n, count in Counter(names).items() if count > 1)
    if repeated:
        raise InvalidRequestError(f"Error due to duplicate config keys: {', '.join(repeated)}")
    result = dict(current)
    for op in operations:
        kind, key, value = op.config_operation, op.name, op.value
        if kind == DELETE:
            result.pop(key, None)
            continue
        if kind not in (SET, APPEND, SUBTRACT):
            raise InvalidRequestError(f"Unknown alter config operation type {kind} for {key}")
        if value is None:
            raise InvalidRequestError(f"Null value not supported for : {key}")
        if kind == SET:
            result[key] = value
            continue
        if key_type(key) != ConfigType.LIST:
            verb = "append" if kind == APPEND else "subtract"
            raise InvalidConfigError(f"Config value {verb} is not allowed for config key: {key}")
        existing = result.get(key, inherited(key) or "")
        old = [item.strip() for item in existing.split(",") if item.strip()]
        given = [item.strip() for item in value.split(",") if item.strip()]
        if kind == APPEND:
            merged = old + [item for item in given if item not in old]
        else:
            merged = [item for item in old if item not in given]
        result[key] = ",".join(merged)
    return result
