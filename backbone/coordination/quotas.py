"""Client quotas in ZooKeeper, where Kafka keeps them: the config entities `/config/users/<user>`,
`/config/clients/<client-id>` and `/config/users/<user>/clients/<client-id>`, each name sanitized
(URL-encoded) or `<default>`, every write announced under /config/changes as any config write is.

An entity is a user, a client id, or both; a component's name None is the default entity (`<default>`).
A user's node also holds its SCRAM credentials: a quota write changes only the quota keys.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from backbone.coordination import paths
from backbone.coordination.credentials import CredentialOps
from backbone.coordination.session import translate_errors
from backbone.coordination.znodes import decode_config
from backbone.protocol.errors import InvalidRequestError

__all__ = [
    "CLIENT_ID",
    "ENTITY_TYPES",
    "QUOTA_KEYS",
    "USER",
    "QuotaEntity",
    "QuotaOps",
    "check_quota_value",
    "make_quota_entity",
]

USER = "user"
CLIENT_ID = "client-id"
ENTITY_TYPES = (USER, CLIENT_ID)
# Kafka's client quota keys and their types (QuotaConfigs): byte rates are whole bytes per second.
QUOTA_KEYS = {"producer_byte_rate": int, "consumer_byte_rate": int, "request_percentage": float}

QuotaEntity = tuple[tuple[str, str | None], ...]
"""((entity type, name or None for the default), ...), user first: `(("user", "alice"),)`."""


def make_quota_entity(components: Iterable[tuple[str, str | None]]) -> QuotaEntity:
    """A checked entity from (type, name) pairs; InvalidRequestError says what is wrong, as Kafka does."""
    found: dict[str, str | None] = {}
    for entity_type, name in components:
        if entity_type not in ENTITY_TYPES:
            raise InvalidRequestError(
                f"Unhandled client quota entity type: {entity_type} (one of {', '.join(ENTITY_TYPES)})"
            )
        if entity_type in found:
            raise InvalidRequestError(f"Duplicate {entity_type} entity type")
        if name is not None and not name:
            raise InvalidRequestError(f"Empty {entity_type} not supported")
        found[entity_type] = name
    if not found:
        raise InvalidRequestError("Invalid empty client quota entity")
    return tuple((t, found[t]) for t in ENTITY_TYPES if t in found)


def check_quota_value(key: str, value: float) -> float:
    """The value to store for `key`; InvalidRequestError for an unknown key or an unfit value."""
    kind = QUOTA_KEYS.get(key)
    if kind is None:
        raise InvalidRequestError(f"Invalid configuration key {key} (one of {', '.join(QUOTA_KEYS)})")
    if not math.isfinite(value) or value <= 0:
        raise InvalidRequestError(f"Configuration {key} must be a positive number, got {value}")
    if kind is int and abs(value - round(value)) > 1e-6:
        raise InvalidRequestError(f"Configuration {key} must be a Long value, got {value}")
    return float(round(value)) if kind is int else float(value)


def _segment(name: str | None) -> str:
    return paths.DEFAULT_BROKER_CONFIG if name is None else paths.sanitize_entity_name(name)


def _name(segment: str) -> str | None:
    return None if segment == paths.DEFAULT_BROKER_CONFIG else paths.desanitize_entity_name(segment)


def entity_node(entity: QuotaEntity) -> str:
    """The entity's path below /config (`users/alice/clients/app`)."""
    names = dict(entity)
    user = _segment(names[USER]) if USER in names else None
    client = _segment(names[CLIENT_ID]) if CLIENT_ID in names else None
    return paths.quota_entity_path(user, client)


def parse_entity_node(node: str) -> QuotaEntity | None:
    """The entity a config change notification names (`users/a/clients/b`), or None for other types."""
    parts = node.split("/")
    if len(parts) == 2 and parts[0] in ("users", "clients"):
        return ((USER if parts[0] == "users" else CLIENT_ID, _name(parts[1])),)
    if len(parts) == 4 and parts[0] == "users" and parts[2] == "clients":
        return ((USER, _name(parts[1])), (CLIENT_ID, _name(parts[3])))
    return None


def quota_values(config: Mapping[str, str]) -> dict[str, float]:
    """The quota keys of a config node (a user's also holds SCRAM credentials); unreadable values are
    left out rather than failing every quota."""
    values = {}
    for key in QUOTA_KEYS:
        if key in config:
            try:
                values[key] = float(config[key])
            except ValueError:
                continue
    return values


def _stored(value: float) -> str:
    return str(int(value)) if value == int(value) else repr(value)


class QuotaOps(CredentialOps):
    """Read and write client quota config entities."""

    def _read_node(self, node: str) -> dict[str, str]:
        path = f"{paths.CONFIG}/{node}"
        found = self._get_or_none(path)
        return decode_config(found[0], path) if found else {}

    @translate_errors("read a client quota")
    def client_quota(self, entity: QuotaEntity) -> dict[str, float]:
        """The quota values set on exactly this entity ({} when none)."""
        return quota_values(self._read_node(entity_node(entity)))

    @translate_errors("read client quotas")
    def client_quotas(self) -> dict[QuotaEntity, dict[str, float]]:
        """Every entity with at least one quota value."""
        nodes = [f"clients/{c}" for c in self._children(paths.config_entity_type_path("clients"))]
        for user in self._children(paths.config_entity_type_path("users")):
            nodes.append(f"users/{user}")
            user_clients = f"{paths.CONFIG}/users/{user}/clients"
            if self._exists(user_clients) is not None:
                nodes.extend(f"users/{user}/clients/{c}" for c in self._children(user_clients))
        found = {}
        for node in nodes:
            entity = parse_entity_node(node)
            values = quota_values(self._read_node(node)) if entity is not None else {}
            if entity is not None and values:
                found[entity] = values
        return found

    @translate_errors("write a client quota")
    def alter_client_quota(
        self, entity: QuotaEntity, set_values: Mapping[str, float], remove: Iterable[str] = ()
    ) -> None:
        """Set and remove quota keys of one entity, keeping its other keys (SCRAM credentials)."""
        node = entity_node(entity)
        config = self._read_node(node)
        for key in remove:
            check_quota_value(key, 1.0)
            config.pop(key, None)
        for key, value in set_values.items():
            config[key] = _stored(check_quota_value(key, value))
        self._write_config_node(f"{paths.CONFIG}/{node}", node, config)
