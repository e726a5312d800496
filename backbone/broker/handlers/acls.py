"""CreateAcls, DescribeAcls and DeleteAcls: ACLs in ZooKeeper (coordination/acls.py), enforced by the
authorizer (security/authorizer.py). Creating and deleting need ALTER on the cluster, describing DESCRIBE,
as in Kafka; without an authorizer configured they answer SECURITY_DISABLED."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.static.primitive import i8

from backbone.broker.handlers.admin_common import ZooKeeperCall
from backbone.broker.handlers.common import response_module, throttle
from backbone.broker.network import Handler, RequestContext
from backbone.coordination import AclBinding
from backbone.protocol.api import ApiKey
from backbone.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from backbone.broker.security.authorizer import Authorizer
    from backbone.coordination import ClusterStore

# Kafka's wire codes (ResourceType, PatternType, AclOperation, AclPermissionType).
RESOURCE_TYPES = {2: "TOPIC", 3: "GROUP", 4: "CLUSTER", 5: "TRANSACTIONAL_ID"}
PATTERN_TYPES = {3: "LITERAL", 4: "PREFIXED"}
OPERATIONS = {
    2: "ALL",
    3: "READ",
    4: "WRITE",
    5: "CREATE",
    6: "DELETE",
    7: "ALTER",
    8: "DESCRIBE",
    9: "CLUSTER_ACTION",
    10: "DESCRIBE_CONFIGS",
    11: "ALTER_CONFIGS",
    12: "IDEMPOTENT_WRITE",
}
PERMISSIONS = {2: "DENY", 3: "ALLOW"}
_ANY = 1  # ANY in every enum above
_MATCH = 2  # pattern type MATCH: whatever would apply to the named resource
_CODE = {
    name: code
    for table in (RESOURCE_TYPES, PATTERN_TYPES, OPERATIONS, PERMISSIONS)
    for code, name in table.items()
}


def binding_of(item: Any) -> AclBinding:
    """A CreateAcls creation -> AclBinding; ValueError says what is wrong."""
    try:
        return AclBinding(
            RESOURCE_TYPES[int(item.resource_type)],
            item.resource_name,
            PATTERN_TYPES[int(item.resource_pattern_type)],
            item.principal,
            item.host,
            OPERATIONS[int(item.operation)],
            PERMISSIONS[int(item.permission_type)],
        )
    except KeyError as exc:
        raise ValueError(f"unknown or wildcard code {exc} in an ACL to create") from None


def matches(acl: AclBinding, spec: Any) -> bool:
    """Whether `acl` matches a DescribeAcls request or DeleteAcls filter."""

    def code_ok(field: str, name: str) -> bool:
        code = int(getattr(spec, field))
        return code == _ANY or _CODE.get(name) == code

    pattern = int(spec.pattern_type_filter)
    name = spec.resource_name_filter
    if pattern == _MATCH:
        name_ok = (
            name is None
            or acl.name in (name, "*")
            or (acl.pattern_type == "PREFIXED" and name.startswith(acl.name))
        )
    else:
        name_ok = (name is None or acl.name == name) and (
            pattern == _ANY or _CODE[acl.pattern_type] == pattern
        )
    return (
        name_ok
        and (
            int(spec.resource_type_filter) == _ANY
            or _CODE[acl.resource_type] == int(spec.resource_type_filter)
        )
        and spec.principal_filter in (None, acl.principal)
        and spec.host_filter in (None, acl.host)
        and code_ok("operation", acl.operation)
        and code_ok("permission_type", acl.permission)
    )


def acls_handlers(authorizer: Authorizer, store: ClusterStore, zk: ZooKeeperCall) -> dict[ApiKey, Handler]:
    async def create(context: RequestContext) -> Any:
        request = context.decode()
        module = response_module(ApiKey.CREATE_ACLS, context.api_version)
        refusal = _refusal(authorizer, context, "ALTER")
        results = []
        for item in request.creations:
            code, message = refusal
            if code == ErrorCode.none:
                try:
                    await zk(store.add_acls, [binding_of(item)])
                except ValueError as exc:
                    code, message = ErrorCode.invalid_request, str(exc)
                except KafkaError as exc:
                    code, message = exc.code, exc.message
            results.append(module.AclCreationResult(error_code=code, error_message=message))
        return module.CreateAclsResponse(throttle_time=throttle(), results=tuple(results))

    async def describe(context: RequestContext) -> Any:
        request = context.decode()
        module = response_module(ApiKey.DESCRIBE_ACLS, context.api_version)
        code, message = _refusal(authorizer, context, "DESCRIBE")
        resources = []
        if code == ErrorCode.none:
            grouped: dict[tuple[str, str, str], list[AclBinding]] = {}
            for acl in await zk(store.acls):
                if matches(acl, request):
                    grouped.setdefault((acl.resource_type, acl.name, acl.pattern_type), []).append(acl)
            resources = [
                module.DescribeAclsResource(
                    resource_type=i8(_CODE[kind]),
                    resource_name=name,
                    pattern_type=i8(_CODE[pattern]),
                    acls=tuple(
                        module.AclDescription(
                            principal=a.principal,
                            host=a.host,
                            operation=i8(_CODE[a.operation]),
                            permission_type=i8(_CODE[a.permission]),
                        )
                        for a in acls
                    ),
                )
                for (kind, name, pattern), acls in sorted(grouped.items())
            ]
        return module.DescribeAclsResponse(
            throttle_time=throttle(), error_code=code, error_message=message, resources=tuple(resources)
        )

    async def delete(context: RequestContext) -> Any:
        request = context.decode()
        module = response_module(ApiKey.DELETE_ACLS, context.api_version)
        code, message = _refusal(authorizer, context, "ALTER")
        results = []
        existing = await zk(store.acls) if code == ErrorCode.none else []
        for spec in request.filters:
            matched = [acl for acl in existing if matches(acl, spec)]
            if matched:
                await zk(store.remove_acls, matched)
            results.append(
                module.DeleteAclsFilterResult(
                    error_code=code,
                    error_message=message,
                    matching_acls=tuple(
                        module.DeleteAclsMatchingAcl(
                            error_code=ErrorCode.none,
                            error_message=None,
                            resource_type=i8(_CODE[a.resource_type]),
                            resource_name=a.name,
                            pattern_type=i8(_CODE[a.pattern_type]),
                            principal=a.principal,
                            host=a.host,
                            operation=i8(_CODE[a.operation]),
                            permission_type=i8(_CODE[a.permission]),
                        )
                        for a in matched
                    ),
                )
            )
        return module.DeleteAclsResponse(throttle_time=throttle(), filter_results=tuple(results))

    return {ApiKey.CREATE_ACLS: create, ApiKey.DESCRIBE_ACLS: describe, ApiKey.DELETE_ACLS: delete}


def _refusal(authorizer: Authorizer, context: RequestContext, operation: str) -> tuple[ErrorCode, str | None]:
    if not authorizer.enabled:
        return ErrorCode.security_disabled, "no authorizer is configured (authorizer.class.name)"
    if not authorizer.check_cluster(context, operation):
        return ErrorCode.cluster_authorization_failed, f"{operation} on the cluster is needed"
    return ErrorCode.none, None
