"""ACL checks in front of the group APIs: each names its group(s) in the request, and a refusal is the
whole answer (GROUP_AUTHORIZATION_FAILED), as Kafka answers it. Installed only when an authorizer is
configured, so brokers without ACLs pay nothing.

READ on the group: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit; DESCRIBE on the group:
OffsetFetch, FindCoordinator (for group keys), DescribeGroups; DELETE: DeleteGroups. A batched request
(OffsetFetch v8, FindCoordinator v4, DescribeGroups, DeleteGroups) that names any group the principal may
not use is refused for each group it names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from backbone.broker.security.admin_guards import guard_admin_apis
from backbone.protocol.api import ApiKey
from backbone.protocol.errors import ErrorCode
from backbone.wire.messages import build_response

if TYPE_CHECKING:
    from backbone.broker.network import Handler, RequestContext
    from backbone.broker.security.authorizer import Authorizer

_REFUSED = ErrorCode.group_authorization_failed
_GROUP_KEY = 0  # FindCoordinator key type


def _single(operation: str) -> Callable[[Any], tuple[str, list[str]]]:
    return lambda request: (operation, [request.group_id])


def _offset_fetch(request: Any) -> tuple[str, list[str]]:
    groups = getattr(request, "groups", None)
    return "DESCRIBE", [g.group_id for g in groups] if groups is not None else [request.group_id]


def _find_coordinator(request: Any) -> tuple[str, list[str]]:
    if int(getattr(request, "key_type", _GROUP_KEY)) != _GROUP_KEY:
        return "DESCRIBE", []
    keys = getattr(request, "coordinator_keys", None)
    return "DESCRIBE", list(keys) if keys else [request.key]


# api -> (what the request asks: operation and groups), (the refusal answer for those groups and version)
_GROUP_APIS: dict[ApiKey, Callable[[Any], tuple[str, list[str]]]] = {
    ApiKey.JOIN_GROUP: _single("READ"),
    ApiKey.SYNC_GROUP: _single("READ"),
    ApiKey.HEARTBEAT: _single("READ"),
    ApiKey.LEAVE_GROUP: _single("READ"),
    ApiKey.OFFSET_COMMIT: _single("READ"),
    ApiKey.OFFSET_FETCH: _offset_fetch,
    ApiKey.FIND_COORDINATOR: _find_coordinator,
    ApiKey.DESCRIBE_GROUPS: lambda request: ("DESCRIBE", list(request.groups)),
    ApiKey.DELETE_GROUPS: lambda request: ("DELETE", list(request.groups_names)),
}


def _refusal(api_key: ApiKey, version: int, groups: list[str]) -> Any:
    message = "not authorized to use the group"
    if api_key == ApiKey.OFFSET_FETCH and version >= 8:
        return build_response(
            api_key, version, groups=[{"group_id": g, "error_code": _REFUSED} for g in groups]
        )
    if api_key == ApiKey.FIND_COORDINATOR and version >= 4:
        rows = [
            {"key": g, "node_id": -1, "port": -1, "error_code": _REFUSED, "error_message": message}
            for g in groups
        ]
        return build_response(api_key, version, coordinators=rows)
    if api_key == ApiKey.DESCRIBE_GROUPS:
        return build_response(
            api_key, version, groups=[{"group_id": g, "error_code": _REFUSED} for g in groups]
        )
    if api_key == ApiKey.DELETE_GROUPS:
        return build_response(
            api_key, version, results=[{"group_id": g, "error_code": _REFUSED} for g in groups]
        )
    return build_response(api_key, version, error_code=_REFUSED, error_message=message, node_id=-1, port=-1)


def guard_apis(table: Any, authorizer: Authorizer) -> None:
    """Put the ACL checks in front of the group APIs and the administration APIs (admin_guards.py)."""
    guard_group_apis(table, authorizer)
    guard_admin_apis(table, authorizer)


def guard_group_apis(table: Any, authorizer: Authorizer) -> None:
    """Wrap the registered group handlers of `table` (an ApiTable) with the group ACL check."""
    for api_key, asked in _GROUP_APIS.items():
        handler = table.handler(api_key, table.versions(api_key).max)
        table.replace(api_key, _guarded(api_key, asked, handler, authorizer))


def _guarded(
    api_key: ApiKey, asked: Callable[[Any], tuple[str, list[str]]], handler: Handler, authorizer: Authorizer
) -> Handler:
    async def guarded(context: RequestContext) -> Any:
        operation, groups = asked(context.decode())
        if all(authorizer.check(context, operation, "GROUP", group) for group in groups):
            return await handler(context)
        return _refusal(api_key, context.api_version, groups)

    return guarded
