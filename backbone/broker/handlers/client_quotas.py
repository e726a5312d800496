"""DescribeClientQuotas and AlterClientQuotas (KIP-546): client quota config entities in ZooKeeper.

Describe needs DESCRIBE_CONFIGS on the cluster and answers a bad filter with a top-level INVALID_REQUEST;
Alter needs ALTER_CONFIGS on the cluster and answers each entity on its own (INVALID_REQUEST for an unknown
entity type, a duplicate or empty component, an unknown key or an unfit value). Every broker follows the
changes through /config/changes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from kio.static.primitive import f64

from backbone.broker.handlers.admin_common import ZooKeeperCall, error_of
from backbone.broker.handlers.common import response_module, throttle
from backbone.broker.network import Handler, RequestContext
from backbone.coordination.quotas import (
    ENTITY_TYPES,
    QuotaEntity,
    check_quota_value,
    make_quota_entity,
)
from backbone.protocol.api import ApiKey
from backbone.protocol.errors import ErrorCode, InvalidRequestError

if TYPE_CHECKING:
    from backbone.broker.security.authorizer import Authorizer
    from backbone.coordination import ClusterStore

# DescribeClientQuotas match types.
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2

Filter = dict[str, tuple[int, str | None]]


def parse_filter(components: Iterable[Any]) -> Filter:
    """{entity type: (match type, name)}; InvalidRequestError as Kafka raises it."""
    found: Filter = {}
    for component in components:
        entity_type, match_type = component.entity_type, int(component.match_type)
        if entity_type == "ip":
            raise InvalidRequestError("ip quotas are not supported by this broker")
        if entity_type not in ENTITY_TYPES:
            raise InvalidRequestError(f"Unexpected quota entity type: {entity_type}")
        if entity_type in found:
            raise InvalidRequestError(f"Duplicate {entity_type} filter component entity type")
        if match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY):
            raise InvalidRequestError(f"Unexpected match type: {match_type}")
        if match_type == MATCH_EXACT and not component.match:
            raise InvalidRequestError(f"An exact {entity_type} match needs a name")
        found[entity_type] = (match_type, component.match if match_type == MATCH_EXACT else None)
    return found


def matches(entity: QuotaEntity, wanted: Filter, strict: bool) -> bool:
    """Whether an entity passes the filter: every component it asks for matches, and with `strict` the
    entity has no other component."""
    names = dict(entity)
    if strict and set(names) != set(wanted):
        return False
    for entity_type, (match_type, name) in wanted.items():
        if entity_type not in names:
            return False
        if match_type == MATCH_EXACT and names[entity_type] != name:
            return False
        if match_type == MATCH_DEFAULT and names[entity_type] is not None:
            return False
    return True


def client_quotas_handlers(
    authorizer: Authorizer, store: ClusterStore, zk: ZooKeeperCall
) -> dict[ApiKey, Handler]:
    async def describe(context: RequestContext) -> Any:
        request = context.decode()
        module = response_module(ApiKey.DESCRIBE_CLIENT_QUOTAS, context.api_version)

        def refused(code: ErrorCode, message: str) -> Any:
            return module.DescribeClientQuotasResponse(
                throttle_time=throttle(), error_code=code, error_message=message, entries=None
            )

        if not authorizer.check_cluster(context, "DESCRIBE_CONFIGS"):
            return refused(
                ErrorCode.cluster_authorization_failed, "DESCRIBE_CONFIGS on the cluster is needed"
            )
        try:
            wanted = parse_filter(request.components)
            quotas = await zk(store.client_quotas)
        except Exception as exc:
            return refused(*error_of(exc, "describe client quotas"))
        entries = tuple(
            module.EntryData(
                entity=tuple(module.EntityData(entity_type=t, entity_name=n) for t, n in entity),
                values=tuple(module.ValueData(key=k, value=f64(v)) for k, v in sorted(values.items())),
            )
            for entity, values in sorted(quotas.items(), key=lambda item: _sort_key(item[0]))
            if matches(entity, wanted, bool(request.strict))
        )
        return module.DescribeClientQuotasResponse(
            throttle_time=throttle(), error_code=ErrorCode.none, error_message=None, entries=entries
        )

    async def alter(context: RequestContext) -> Any:
        request = context.decode()
        module = response_module(ApiKey.ALTER_CLIENT_QUOTAS, context.api_version)
        allowed = authorizer.check_cluster(context, "ALTER_CONFIGS")
        answers = []
        for entry in request.entries:
            code, message = ErrorCode.none, None
            if not allowed:
                code, message = (
                    ErrorCode.cluster_authorization_failed,
                    "ALTER_CONFIGS on the cluster is needed",
                )
            else:
                try:
                    await _alter(store, zk, entry, bool(request.validate_only))
                except Exception as exc:
                    code, message = error_of(exc, "alter client quotas")
            answers.append(
                module.EntryData(
                    error_code=code,
                    error_message=message,
                    entity=tuple(
                        module.EntityData(entity_type=e.entity_type, entity_name=e.entity_name)
                        for e in entry.entity
                    ),
                )
            )
        return module.AlterClientQuotasResponse(throttle_time=throttle(), entries=tuple(answers))

    return {ApiKey.DESCRIBE_CLIENT_QUOTAS: describe, ApiKey.ALTER_CLIENT_QUOTAS: alter}


async def _alter(store: ClusterStore, zk: ZooKeeperCall, entry: Any, validate_only: bool) -> None:
    entity = make_quota_entity((e.entity_type, e.entity_name) for e in entry.entity)
    set_values: dict[str, float] = {}
    removed: list[str] = []
    seen: set[str] = set()
    for op in entry.ops:
        if op.key in seen:
            raise InvalidRequestError(f"Duplicate quota key {op.key}")
        seen.add(op.key)
        if op.remove:
            check_quota_value(op.key, 1.0)
            removed.append(op.key)
        else:
            set_values[op.key] = check_quota_value(op.key, float(op.value))
    if not validate_only:
        await zk(store.alter_client_quota, entity, set_values, removed)


def _sort_key(entity: QuotaEntity) -> tuple[tuple[int, str], ...]:
    return tuple((ENTITY_TYPES.index(t), "" if n is None else "\x01" + n) for t, n in entity)
