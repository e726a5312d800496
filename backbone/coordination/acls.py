"""ACLs in ZooKeeper, in Kafka's layout, so Kafka's tools and ours read the same nodes:

    /kafka-acl/<ResourceType>/<name>                     literal resource names ("*": every resource)
    /kafka-acl-extended/prefixed/<ResourceType>/<name>   prefixed resource names
      {"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow","operation":"Read","host":"*"}]}
    /kafka-acl-changes/acl_changes_<n>, /kafka-acl-extended-changes/acl_changes_<n>   change notifications

Resource types are spelled as Kafka spells them (Topic, Group, Cluster, TransactionalId), operations and
permission types in Kafka's camel case (Read, IdempotentWrite, Allow). A node is rewritten whole with a
conditional (versioned) write, retried on a race; every write adds a change notification, which brokers
watch to reload their cache.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from backbone.coordination import paths
from backbone.coordination.brokers import MAX_RACES
from backbone.coordination.configs import ConfigOps
from backbone.coordination.errors import CoordinationError
from backbone.coordination.session import Watch, translate_errors

__all__ = ["RESOURCE_TYPES", "AclBinding", "AclOps"]

# Kafka's names (ResourceType.toString / AclOperation / AclPermissionType in ZooKeeper JSON).
RESOURCE_TYPES = {
    "TOPIC": "Topic",
    "GROUP": "Group",
    "CLUSTER": "Cluster",
    "TRANSACTIONAL_ID": "TransactionalId",
}
_OPERATIONS = (
    "ALL",
    "READ",
    "WRITE",
    "CREATE",
    "DELETE",
    "ALTER",
    "DESCRIBE",
    "CLUSTER_ACTION",
    "DESCRIBE_CONFIGS",
    "ALTER_CONFIGS",
    "IDEMPOTENT_WRITE",
)
_CAMEL = {name: "".join(part.capitalize() for part in name.split("_")) for name in _OPERATIONS}
_UPPER = {camel: name for name, camel in _CAMEL.items()}
_TYPE_UPPER = {camel: name for name, camel in RESOURCE_TYPES.items()}


@dataclass(frozen=True)
class AclBinding:
    """One ACL: who (principal, host) may or may not (permission) do what (operation) to which resource."""

    resource_type: str  # TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID
    name: str
    pattern_type: str  # LITERAL or PREFIXED
    principal: str  # User:alice, User:*
    host: str  # an address or *
    operation: str  # READ, WRITE, ... ALL
    permission: str  # ALLOW or DENY

    def __post_init__(self) -> None:
        if self.resource_type not in RESOURCE_TYPES:
            raise ValueError(
                f"unknown resource type {self.resource_type}; one of {', '.join(RESOURCE_TYPES)}"
            )
        if self.pattern_type not in ("LITERAL", "PREFIXED"):
            raise ValueError("pattern type must be LITERAL or PREFIXED")
        if self.operation not in _OPERATIONS:
            raise ValueError(f"unknown operation {self.operation}; one of {', '.join(_OPERATIONS)}")
        if self.permission not in ("ALLOW", "DENY"):
            raise ValueError("permission must be ALLOW or DENY")
        if ":" not in self.principal:
            raise ValueError(f"principal {self.principal!r} must look like User:NAME")
        if not self.name or not self.host:
            raise ValueError("resource name and host must not be empty")

    def entry(self) -> dict[str, str]:
        return {
            "principal": self.principal,
            "permissionType": self.permission.capitalize(),
            "operation": _CAMEL[self.operation],
            "host": self.host,
        }


def _bindings(pattern_type: str, resource_type: str, name: str, data: bytes) -> list[AclBinding]:
    try:
        entries = json.loads(data.decode("utf-8"))["acls"]
        return [
            AclBinding(
                _TYPE_UPPER[resource_type],
                name,
                pattern_type,
                e["principal"],
                e["host"],
                _UPPER[e["operation"]],
                e["permissionType"].upper(),
            )
            for e in entries
        ]
    except (ValueError, KeyError, TypeError) as exc:
        raise CoordinationError(f"unreadable ACL node {resource_type}/{name}: {exc}") from None


class AclOps(ConfigOps):
    """Read, add and remove ACLs; watch for changes."""

    @translate_errors("read ACLs")
    def acls(self) -> list[AclBinding]:
        found = []
        for pattern_type in ("LITERAL", "PREFIXED"):
            for camel in RESOURCE_TYPES.values():
                type_path = paths.acl_resource_type_path(camel, pattern_type)
                try:
                    names = self._children(type_path)
                except NoNodeError:
                    continue
                for name in names:
                    node = self._get_or_none(paths.acl_path(camel, name, pattern_type))
                    if node is not None:
                        found += _bindings(pattern_type, camel, name, node[0])
        return found

    @translate_errors("write ACLs")
    def add_acls(self, bindings: Iterable[AclBinding]) -> None:
        for binding in bindings:
            self._update(binding, add=True)

    @translate_errors("remove ACLs")
    def remove_acls(self, bindings: Iterable[AclBinding]) -> None:
        for binding in bindings:
            self._update(binding, add=False)

    def _update(self, binding: AclBinding, *, add: bool) -> None:
        """Adds the binding's entry to its resource's node (if not there yet), or removes it."""
        entry = binding.entry()
        camel = RESOURCE_TYPES[binding.resource_type]
        path = paths.acl_path(camel, binding.name, binding.pattern_type)
        for _ in range(MAX_RACES):
            node = self._get_or_none(path)
            entries = json.loads(node[0])["acls"] if node else []
            if add:
                updated = entries if entry in entries else [*entries, entry]
            else:
                updated = [e for e in entries if e != entry]
            if updated == entries:
                return
            data = json.dumps({"version": 1, "acls": updated}, separators=(",", ":")).encode()
            try:
                if node is None:
                    self._client.create(path, data, makepath=True)
                elif updated:
                    self._client.set(path, data, version=node[1].version)
                else:
                    self._client.delete(path, version=node[1].version)
            except (NodeExistsError, BadVersionError, NoNodeError):
                continue  # changed meanwhile: read it again
            self._announce(binding.pattern_type, camel, binding.name)
            return
        raise CoordinationError(f"ACLs of {camel}/{binding.name} kept changing while being written; retry")

    def _announce(self, pattern_type: str, camel: str, name: str) -> None:
        if pattern_type == "LITERAL":
            data = f"{camel}:{name}".encode()
        else:
            body = {"version": 1, "resourceType": camel, "name": name, "patternType": "Prefixed"}
            data = json.dumps(body, separators=(",", ":")).encode()
        self._client.create(paths.acl_change_prefix_path(pattern_type), data, sequence=True, makepath=True)

    def watch_acl_changes(self, on_change: Callable[[], None]) -> list[Watch]:
        """Call `on_change()` now and after every announced ACL change (then re-read `acls()`)."""
        watches = []
        for root in (paths.ACL_CHANGES, paths.ACL_EXTENDED_CHANGES):
            self._client.ensure_path(root)
            watches.append(self._watch_children(root, lambda _names: on_change(), f"ACL changes {root}"))
        return watches
