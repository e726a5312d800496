"""The value types the admin client takes and returns."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import NamedTuple

from backbone.client.cluster import BrokerInfo, PartitionInfo

__all__ = [
    "ClusterDescription",
    "ConfigEntry",
    "ConfigResource",
    "ConfigResourceType",
    "NewTopic",
    "OffsetSpec",
    "TopicDescription",
]


@dataclass(frozen=True)
class NewTopic:
    """A topic to create. -1 partitions or replication factor: the broker's default
    (`num.partitions`, `default.replication.factor`)."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    replica_assignment: Mapping[int, list[int]] | None = None
    """partition -> broker ids, instead of a partition count and replication factor."""
    configs: Mapping[str, str] = field(default_factory=dict)


class TopicDescription(NamedTuple):
    name: str
    is_internal: bool
    partitions: list[PartitionInfo]
    """Leader, leader epoch, replicas, ISR and offline replicas of each partition, by partition id."""
    topic_id: str | None = None
    """The topic's id in Kafka's text form: a topic deleted and created again gets a new one."""


class ClusterDescription(NamedTuple):
    cluster_id: str | None
    controller_id: int
    brokers: list[BrokerInfo]


class ConfigResourceType(IntEnum):
    TOPIC = 2
    BROKER = 4


class ConfigResource(NamedTuple):
    """A topic (name) or broker (id as a string; "" for the cluster-wide default) whose configs to use."""

    type: ConfigResourceType
    name: str

    def __str__(self) -> str:
        return f"{self.type.name.lower()} {self.name!r}"


class ConfigEntry(NamedTuple):
    name: str
    value: str | None
    read_only: bool
    source: int
    """Kafka's ConfigSource: 1 topic, 2 dynamic broker, 4 static broker, 5 default, ... (-1 unknown)."""
    is_sensitive: bool


class OffsetSpec:
    """What `list_offsets` looks up: the special timestamps ListOffsets understands, or a timestamp."""

    LATEST = -1
    EARLIEST = -2
    MAX_TIMESTAMP = -3
    _NAMES = {"latest": LATEST, "earliest": EARLIEST, "max_timestamp": MAX_TIMESTAMP}

    @classmethod
    def parse(cls, spec: int | str) -> int:
        if isinstance(spec, str):
            try:
                return cls._NAMES[spec.lower()]
            except KeyError:
                raise ValueError(f"offset spec {spec!r} is not one of {', '.join(cls._NAMES)}") from None
        if isinstance(spec, bool) or not isinstance(spec, int) or spec < cls.MAX_TIMESTAMP:
            raise ValueError(f"offset spec must be a name or a timestamp in ms, got {spec!r}")
        return spec
