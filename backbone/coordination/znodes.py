"""What each znode holds: small dataclasses with Kafka's JSON encodings (kafka.zk.ZkData), field by field.

Kafka writes compact JSON (Jackson, no spaces). Some fields are strings where a number would be
expected (`timestamp`, the cluster id's `version`, producer id block bounds): we keep those quirks,
because Kafka's own tools and brokers read the same nodes.
"""

from __future__ import annotations

import base64
import contextlib
import json
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from backbone.coordination.errors import CoordinationError

__all__ = [
    "AclEntry",
    "BrokerRegistration",
    "ClusterId",
    "ControllerInfo",
    "EndPoint",
    "PartitionReplicas",
    "PartitionState",
    "ProducerIdBlock",
    "TopicAssignment",
    "decode_acls",
    "decode_config",
    "decode_config_change",
    "decode_controller_epoch",
    "decode_partition_list",
    "decode_reassignment",
    "encode_acls",
    "encode_config",
    "encode_config_change",
    "encode_controller_epoch",
    "encode_partition_list",
    "encode_reassignment",
    "new_kafka_uuid",
    "now_ms",
]

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def now_ms() -> int:
    return int(time.time() * 1000)


def dumps(value: Mapping[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode("utf-8")


def loads(data: bytes | None, what: str) -> dict[str, Any]:
    """Parse a znode's JSON object; anything else is a corrupt node, named in the error."""
    try:
        value = json.loads((data or b"").decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CoordinationError(f"{what} does not hold valid JSON: {data!r}") from error
    if not isinstance(value, dict):
        raise CoordinationError(f"{what} holds {type(value).__name__}, expected a JSON object: {data!r}")
    return value


@contextlib.contextmanager
def fields_of(what: str, data: bytes | None) -> Iterator[None]:
    """Turn a missing or mistyped field met while decoding into one clear error naming the node."""
    try:
        yield
    except (KeyError, ValueError, TypeError, AttributeError) as error:
        raise CoordinationError(f"{what} has a missing or malformed field ({error!r}): {data!r}") from error


def new_kafka_uuid() -> str:
    """A random id in Kafka's Uuid text form: 16 bytes, URL-safe base64 without padding (22 chars).

    Kafka redraws ids whose text starts with '-' (it would read as a command-line option).
    """
    for _ in range(64):
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")
        if not text.startswith("-"):
            return text
    raise CoordinationError("could not draw a Kafka uuid that does not start with '-'")  # p = 64**-64


def kafka_uuid_bytes(text: str) -> bytes:
    """The 16 bytes of an id in Kafka's Uuid text form (the inverse of `new_kafka_uuid`)."""
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if len(raw) != 16:
        raise CoordinationError(f"{text!r} is not a Kafka uuid (16 bytes in URL-safe base64)")
    return raw


# -- brokers --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EndPoint:
    """One advertised listener: `PLAINTEXT://host:9092`."""

    listener: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    def connection_string(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host  # IPv6, as Kafka's Utils.formatAddress
        return f"{self.listener}://{host}:{self.port}"

    @classmethod
    def parse(cls, text: str, protocol_map: Mapping[str, str] | None = None) -> EndPoint:
        listener, sep, address = text.partition("://")
        host, colon, port = address.rpartition(":")
        if not sep or not colon or not listener or not port.isdigit():
            raise CoordinationError(f"malformed endpoint {text!r}: expected LISTENER://host:port")
        protocol = (protocol_map or {}).get(listener)
        if protocol is None:
            if listener not in SECURITY_PROTOCOLS:
                raise CoordinationError(f"endpoint {text!r}: listener {listener!r} has no security protocol")
            protocol = listener
        return cls(listener, host.strip("[]"), int(port), protocol)


@dataclass(frozen=True)
class BrokerRegistration:
    """The ephemeral /brokers/ids/<id> node (version 5). `epoch` is the node's czxid once read back."""

    broker_id: int
    endpoints: tuple[EndPoint, ...]
    rack: str | None = None
    jmx_port: int = -1
    timestamp_ms: int = field(default_factory=now_ms)
    features: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    version: int = 5
    epoch: int = -1

    @property
    def host(self) -> str | None:
        plaintext = self._plaintext()
        return plaintext.host if plaintext else None

    @property
    def port(self) -> int:
        plaintext = self._plaintext()
        return plaintext.port if plaintext else -1

    def _plaintext(self) -> EndPoint | None:
        # The top-level host/port are for old clients that only speak PLAINTEXT (as in Kafka).
        return next((e for e in self.endpoints if e.security_protocol == "PLAINTEXT"), None)

    def endpoint(self, listener: str) -> EndPoint | None:
        return next((e for e in self.endpoints if e.listener == listener), None)

    def to_json(self) -> dict[str, Any]:
        value: dict[str, Any] = {
            "features": {name: dict(levels) for name, levels in self.features.items()},
            "listener_security_protocol_map": {e.listener: e.security_protocol for e in self.endpoints},
            "endpoints": [e.connection_string() for e in self.endpoints],
            "jmx_port": self.jmx_port,
            "port": self.port,
            "host": self.host,
            "timestamp": str(self.timestamp_ms),
            "version": self.version,
        }
        if self.rack is not None:
            value["rack"] = self.rack
        return value

    def encode(self) -> bytes:
        return dumps(self.to_json())

    @classmethod
    def decode(cls, broker_id: int, data: bytes | None, epoch: int = -1) -> BrokerRegistration:
        what = f"registration of broker {broker_id}"
        value = loads(data, what)
        with fields_of(what, data):
            version = int(value.get("version", 0))
            if version < 1:
                raise CoordinationError(f"{what} has unsupported version {version}")
            if version == 1:
                endpoints: tuple[EndPoint, ...] = (EndPoint("PLAINTEXT", value["host"], int(value["port"])),)
            else:
                protocol_map = value.get("listener_security_protocol_map") or {}
                endpoints = tuple(EndPoint.parse(text, protocol_map) for text in value.get("endpoints", []))
            return cls(
                broker_id=broker_id,
                endpoints=endpoints,
                rack=value.get("rack"),
                jmx_port=int(value.get("jmx_port", -1)),
                timestamp_ms=int(value.get("timestamp", 0)),
                features=value.get("features") or {},
                version=version,
                epoch=epoch,
            )


# -- controller -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ControllerInfo:
    """The ephemeral /controller node: which broker is the controller (Kafka 3.4+ writes version 2)."""

    broker_id: int
    timestamp_ms: int = field(default_factory=now_ms)
    kraft_controller_epoch: int = -1

    def encode(self) -> bytes:
        return dumps(
            {
                "version": 2,
                "brokerid": self.broker_id,
                "timestamp": str(self.timestamp_ms),
                "kraftControllerEpoch": self.kraft_controller_epoch,
            }
        )

    @classmethod
    def decode(cls, data: bytes | None) -> ControllerInfo:
        value = loads(data, "/controller")
        with fields_of("/controller", data):
            return cls(
                broker_id=int(value["brokerid"]),
                timestamp_ms=int(value.get("timestamp", 0)),
                kraft_controller_epoch=int(value.get("kraftControllerEpoch", -1)),
            )


def encode_controller_epoch(epoch: int) -> bytes:
    """/controller_epoch holds the bare number as text, not JSON."""
    return str(int(epoch)).encode("ascii")


def decode_controller_epoch(data: bytes | None) -> int:
    try:
        return int((data or b"").decode("ascii"))
    except (UnicodeDecodeError, ValueError) as error:
        raise CoordinationError(f"/controller_epoch does not hold a number: {data!r}") from error


# -- topics ---------------------------------------------------------------------------------------


def _partition_map(value: Mapping[str, Iterable[int]] | None) -> dict[int, tuple[int, ...]]:
    return {int(p): tuple(int(r) for r in replicas) for p, replicas in (value or {}).items()}


def _json_partition_map(value: Mapping[int, tuple[int, ...]]) -> dict[str, list[int]]:
    return {str(p): list(replicas) for p, replicas in sorted(value.items())}


@dataclass(frozen=True)
class TopicAssignment:
    """/brokers/topics/<topic>: partition -> replica list (first = preferred leader), version 3."""

    topic: str
    partitions: Mapping[int, tuple[int, ...]]
    topic_id: str | None = None
    adding_replicas: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    removing_replicas: Mapping[int, tuple[int, ...]] = field(default_factory=dict)

    @property
    def partition_count(self) -> int:
        return len(self.partitions)

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0]) if 0 in self.partitions else 0

    def to_json(self) -> dict[str, Any]:
        value: dict[str, Any] = {
            "version": 3,
            "partitions": _json_partition_map(self.partitions),
            "adding_replicas": _json_partition_map(self.adding_replicas),
            "removing_replicas": _json_partition_map(self.removing_replicas),
        }
        if self.topic_id is not None:
            value["topic_id"] = self.topic_id
        return value

    def encode(self) -> bytes:
        return dumps(self.to_json())

    @classmethod
    def decode(cls, topic: str, data: bytes | None) -> TopicAssignment:
        what = f"assignment of topic {topic!r}"
        value = loads(data, what)
        with fields_of(what, data):
            return cls(
                topic=topic,
                partitions=_partition_map(value.get("partitions")),
                topic_id=value.get("topic_id"),
                adding_replicas=_partition_map(value.get("adding_replicas")),
                removing_replicas=_partition_map(value.get("removing_replicas")),
            )


@dataclass(frozen=True)
class PartitionState:
    """/brokers/topics/<t>/partitions/<p>/state: leader, leader epoch, ISR, and who wrote it.

    `zk_version` is the node's version when read (for conditional updates); it is not encoded.
    """

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    leader_recovery_state: int = 0  # 0 = RECOVERED, 1 = RECOVERING (Kafka writes the field only when 1)
    zk_version: int = -1

    def to_json(self) -> dict[str, Any]:
        value: dict[str, Any] = {
            "controller_epoch": self.controller_epoch,
            "leader": self.leader,
            "version": 1,
            "leader_epoch": self.leader_epoch,
            "isr": list(self.isr),
        }
        if self.leader_recovery_state != 0:
            value["leader_recovery_state"] = self.leader_recovery_state
        return value

    def encode(self) -> bytes:
        return dumps(self.to_json())

    @classmethod
    def decode(cls, data: bytes | None, zk_version: int = -1) -> PartitionState:
        value = loads(data, "partition state")
        with fields_of("partition state", data):
            return cls(
                leader=int(value["leader"]),
                leader_epoch=int(value["leader_epoch"]),
                isr=tuple(int(r) for r in value["isr"]),
                controller_epoch=int(value["controller_epoch"]),
                leader_recovery_state=int(value.get("leader_recovery_state", 0)),
                zk_version=zk_version,
            )


@dataclass(frozen=True)
class PartitionReplicas:
    """One entry of /admin/reassign_partitions."""

    topic: str
    partition: int
    replicas: tuple[int, ...]


def encode_reassignment(entries: Iterable[PartitionReplicas]) -> bytes:
    partitions = [{"topic": e.topic, "partition": e.partition, "replicas": list(e.replicas)} for e in entries]
    return dumps({"version": 1, "partitions": partitions})


def decode_reassignment(data: bytes | None) -> list[PartitionReplicas]:
    value = loads(data, "/admin/reassign_partitions")
    with fields_of("/admin/reassign_partitions", data):
        return [
            PartitionReplicas(e["topic"], int(e["partition"]), tuple(int(r) for r in e["replicas"]))
            for e in value.get("partitions", [])
        ]


def encode_partition_list(partitions: Iterable[tuple[str, int]]) -> bytes:
    """The body of /admin/preferred_replica_election and of ISR change notifications."""
    listed = [{"topic": topic, "partition": partition} for topic, partition in sorted(set(partitions))]
    return dumps({"version": 1, "partitions": listed})


def decode_partition_list(data: bytes | None, what: str = "partition list") -> set[tuple[str, int]]:
    value = loads(data, what)
    with fields_of(what, data):
        return {(e["topic"], int(e["partition"])) for e in value.get("partitions", [])}


# -- configs --------------------------------------------------------------------------------------


def encode_config(config: Mapping[str, str]) -> bytes:
    """/config/<type>/<name>: {"version":1,"config":{...}}, every value a string as in Kafka."""
    return dumps({"version": 1, "config": {key: config[key] for key in sorted(config)}})


def decode_config(data: bytes | None, what: str = "config") -> dict[str, str]:
    if not data:
        return {}
    value = loads(data, what)
    with fields_of(what, data):
        return {str(key): str(item) for key, item in (value.get("config") or {}).items()}


def encode_config_change(entity_path: str) -> bytes:
    """A /config/changes/config_change_<n> notification, version 2: {"entity_path":"topics/foo"}."""
    return dumps({"version": 2, "entity_path": entity_path})


def decode_config_change(data: bytes | None) -> tuple[str, str]:
    """(entity type, entity name) of a notification; version 1 notifications are not supported."""
    value = loads(data, "config change notification")
    if value.get("version") != 2:
        raise CoordinationError(f"config change notification version {value.get('version')} is not supported")
    with fields_of("config change notification", data):
        entity_type, sep, name = str(value["entity_path"]).partition("/")
    if not sep or not name:
        raise CoordinationError(f"config change notification has a malformed entity_path: {value!r}")
    return entity_type, name


# -- cluster id, producer ids, ACLs ---------------------------------------------------------------


@dataclass(frozen=True)
class ClusterId:
    """/cluster/id: {"version":"1","id":"..."} (Kafka writes the version as a string)."""

    id: str

    def encode(self) -> bytes:
        return dumps({"version": "1", "id": self.id})

    @classmethod
    def decode(cls, data: bytes | None) -> ClusterId:
        value = loads(data, "/cluster/id")
        with fields_of("/cluster/id", data):
            return cls(str(value["id"]))


@dataclass(frozen=True)
class ProducerIdBlock:
    """/latest_producer_id_block: the last block of producer ids handed to a broker (bounds inclusive)."""

    broker_id: int
    first: int
    last: int

    def encode(self) -> bytes:
        return dumps(
            {
                "version": 1,
                "broker": self.broker_id,
                "block_start": str(self.first),
                "block_end": str(self.last),
            }
        )

    @classmethod
    def decode(cls, data: bytes | None) -> ProducerIdBlock:
        value = loads(data, "/latest_producer_id_block")
        with fields_of("/latest_producer_id_block", data):
            return cls(int(value["broker"]), int(value["block_start"]), int(value["block_end"]))


@dataclass(frozen=True)
class AclEntry:
    """One ACL of a resource node under /kafka-acl."""

    principal: str
    permission_type: str
    operation: str
    host: str = "*"


def encode_acls(acls: Iterable[AclEntry]) -> bytes:
    entries = [
        {
            "principal": a.principal,
            "permissionType": a.permission_type,
            "operation": a.operation,
            "host": a.host,
        }
        for a in acls
    ]
    return dumps({"version": 1, "acls": entries})


def decode_acls(data: bytes | None) -> list[AclEntry]:
    value = loads(data, "ACL node")
    with fields_of("ACL node", data):
        return [
            AclEntry(e["principal"], e["permissionType"], e["operation"], e["host"])
            for e in value.get("acls", [])
        ]
