"""Kafka's ACL authorizer (AclAuthorizer's rules), over ACLs cached from ZooKeeper.

On when `authorizer.class.name` is set (any of Kafka's class names, or `backbone`). A request is allowed
when the principal is one of `super.users`, or when no DENY ACL matches and an ALLOW ACL does; an ACL
matches when its resource is the same type and its name equal to the resource's (LITERAL), `*`, or a prefix
of it (PREFIXED); its principal is the request's or `User:*`; its host the client's address or `*`; and its
operation the one asked, ALL, or one that implies it (DESCRIBE is implied by READ, WRITE, DELETE and ALTER;
DESCRIBE_CONFIGS by ALTER_CONFIGS). A resource no ACL names at all is open to everyone only with
`allow.everyone.if.no.acl.found=true`. Each refusal is logged once per principal, operation and resource.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from typing import TYPE_CHECKING

from backbone.coordination import AclBinding, ClusterStore, CoordinationError, Watch
from backbone.protocol.errors import KafkaError

if TYPE_CHECKING:
    from backbone.broker.network import RequestContext

log = logging.getLogger(__name__)

CLUSTER_NAME = "kafka-cluster"
_IMPLIED = {
    "DESCRIBE": {"READ", "WRITE", "DELETE", "ALTER"},
    "DESCRIBE_CONFIGS": {"ALTER_CONFIGS"},
}
_MAX_LOGGED_REFUSALS = 10_000
# Kafka's AclOperation codes, and the operations it reports as a resource's authorized operations.
OPERATION_CODES = {
    "READ": 3,
    "WRITE": 4,
    "CREATE": 5,
    "DELETE": 6,
    "ALTER": 7,
    "DESCRIBE": 8,
    "CLUSTER_ACTION": 9,
    "DESCRIBE_CONFIGS": 10,
    "ALTER_CONFIGS": 11,
    "IDEMPOTENT_WRITE": 12,
}
RESOURCE_OPERATIONS = {
    "TOPIC": ("READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"),
    "CLUSTER": (
        "CREATE",
        "ALTER",
        "DESCRIBE",
        "CLUSTER_ACTION",
        "DESCRIBE_CONFIGS",
        "ALTER_CONFIGS",
        "IDEMPOTENT_WRITE",
    ),
    "GROUP": ("READ", "DELETE", "DESCRIBE"),
}


def every_operation(resource_type: str) -> int:
    """The authorized operations of a resource when everything is allowed, as a bit set of codes."""
    return sum(1 << OPERATION_CODES[operation] for operation in RESOURCE_OPERATIONS[resource_type])


class Authorizer:
    def __init__(self, enabled: bool, super_users: set[str], allow_if_no_acl: bool) -> None:
        self.enabled = enabled
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl
        self._by_type: dict[str, list[AclBinding]] = {}
        self._refusals_logged: set[tuple[str, str, str, str]] = set()

    @classmethod
    def from_config(cls, values: dict) -> Authorizer:
        super_users = {p.strip() for p in (values["super.users"] or "").split(";") if p.strip()}
        return cls(
            bool(values["authorizer.class.name"]), super_users, values["allow.everyone.if.no.acl.found"]
        )

    def load(self, acls: list[AclBinding]) -> None:
        by_type: dict[str, list[AclBinding]] = defaultdict(list)
        for acl in acls:
            by_type[acl.resource_type].append(acl)
        self._by_type = dict(by_type)

    def allowed(self, principal: str, host: str, operation: str, resource_type: str, name: str) -> bool:
        if not self.enabled or principal in self.super_users:
            return True
        matching = [
            acl
            for acl in self._by_type.get(resource_type, ())
            if acl.name == name
            or (acl.pattern_type == "LITERAL" and acl.name == "*")
            or (acl.pattern_type == "PREFIXED" and name.startswith(acl.name))
        ]
        if not matching:
            return self.allow_if_no_acl
        mine = [a for a in matching if a.principal in (principal, "User:*") and a.host in (host, "*")]
        if any(a.permission == "DENY" and a.operation in (operation, "ALL") for a in mine):
            return False
        implied_by = _IMPLIED.get(operation, set())
        return any(
            a.permission == "ALLOW" and (a.operation in (operation, "ALL") or a.operation in implied_by)
            for a in mine
        )

    def check(self, context: RequestContext, operation: str, resource_type: str, name: str) -> bool:
        """Whether the request's principal may; a refusal is logged once."""
        if not self.enabled:
            return True
        principal, host = _requester(context)
        if self.allowed(principal, host, operation, resource_type, name):
            return True
        key = (principal, operation, resource_type, name)
        if key not in self._refusals_logged and len(self._refusals_logged) < _MAX_LOGGED_REFUSALS:
            self._refusals_logged.add(key)
            log.warning(
                "event=authorization_refused principal=%s host=%s operation=%s resource=%s:%s",
                principal,
                host,
                operation,
                resource_type,
                name,
            )
        return False

    def check_any(self, context: RequestContext, operation: str, resource_type: str) -> bool:
        """Whether some ACL lets the principal do `operation` to some resource of the type (Kafka's
        authorizeByResourceType, simplified: any matching ALLOW, super users, or an open no-ACL policy)."""
        principal, host = _requester(context)
        if not self.enabled or principal in self.super_users:
            return True
        implied_by = _IMPLIED.get(operation, set())
        return any(
            a.permission == "ALLOW"
            and a.principal in (principal, "User:*")
            and a.host in (host, "*")
            and (a.operation in (operation, "ALL") or a.operation in implied_by)
            for a in self._by_type.get(resource_type, ())
        ) or (self.allow_if_no_acl and not self._by_type.get(resource_type))

    def check_cluster(self, context: RequestContext, operation: str) -> bool:
        return self.check(context, operation, "CLUSTER", CLUSTER_NAME)

    def authorized_operations(self, context: RequestContext, resource_type: str, name: str) -> int:
        """The operations the request's principal may perform on the resource, as a bit set of AclOperation
        codes (Kafka's authorized operations; no refusal is logged: asking is no attempt)."""
        if not self.enabled:
            return every_operation(resource_type)
        principal, host = _requester(context)
        return sum(
            1 << OPERATION_CODES[operation]
            for operation in RESOURCE_OPERATIONS[resource_type]
            if self.allowed(principal, host, operation, resource_type, name)
        )


def _requester(context: RequestContext) -> tuple[str, str]:
    """The request's principal (Kafka's string) and the client's address."""
    connection = context.connection
    return principal_of(connection.principal.name), connection.peer.rsplit(":", 1)[0]


def principal_of(name: str) -> str:
    """Kafka's principal string for a connection's principal name (User:alice, User:ANONYMOUS)."""
    return name if name.startswith("User:") else f"User:{name}"


async def keep_loaded(authorizer: Authorizer, store: ClusterStore) -> list[Watch]:
    """Load the ACLs now and again after every announced change; returns the watches to cancel."""
    loop = asyncio.get_running_loop()
    lock = asyncio.Lock()

    async def reload() -> None:
        async with lock:  # one read at a time: the last one started reads the latest ACLs
            try:
                authorizer.load(await asyncio.to_thread(store.acls))
            except (KafkaError, CoordinationError) as exc:
                log.warning("event=acls_unreadable error=%r", str(exc))

    def changed() -> None:
        if not loop.is_closed():
            loop.call_soon_threadsafe(lambda: loop.create_task(reload()))

    await reload()
    return await asyncio.to_thread(store.watch_acl_changes, changed)
