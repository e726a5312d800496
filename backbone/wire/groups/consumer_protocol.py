"""The consumer protocol's member metadata: what a consumer puts in JoinGroup and gets back in SyncGroup.

A group whose protocol type is "consumer" carries two opaque blobs per member, both an int16 version
followed by that version's struct (Kafka's ConsumerProtocolSubscription and ConsumerProtocolAssignment
schemas, read and written through kio):

- the subscription (JoinGroup): topics, the assignor's user data, and from v1 the partitions the member
  owns, from v2 the generation they were assigned in, from v3 the member's rack;
- the assignment (SyncGroup): the partitions, grouped by topic, and user data (v1-v3 add no fields).

Reading follows Kafka's ConsumerProtocol: a version newer than the ones known is read as the newest known
one and what follows is ignored (that is how a newer client's extra fields reach an older leader), and
bytes after the struct are ignored. Writing uses the newest version by default, as the Java client does;
kafka-python reads every version up to 3.

Pure: no I/O; the broker's group state, the client's group membership and the assignors share it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.schema.consumer_protocol_assignment import v0 as assignment_v0
from kio.schema.consumer_protocol_assignment import v1 as assignment_v1
from kio.schema.consumer_protocol_assignment import v2 as assignment_v2
from kio.schema.consumer_protocol_assignment import v3 as assignment_v3
from kio.schema.consumer_protocol_subscription import v0 as subscription_v0
from kio.schema.consumer_protocol_subscription import v1 as subscription_v1
from kio.schema.consumer_protocol_subscription import v2 as subscription_v2
from kio.schema.consumer_protocol_subscription import v3 as subscription_v3
from kio.serial import entity_reader
from kio.serial.errors import SerialError

from backbone.protocol import TopicPartition
from backbone.protocol.codec import encode
from backbone.protocol.headers import MalformedMessage

__all__ = [
    "LATEST_VERSION",
    "NO_GENERATION",
    "PROTOCOL_TYPE",
    "Assignment",
    "Subscription",
    "TopicPartition",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
    "group_by_topic",
]

PROTOCOL_TYPE = "consumer"
NO_GENERATION = -1

_SUBSCRIPTION_MODULES = (subscription_v0, subscription_v1, subscription_v2, subscription_v3)
_ASSIGNMENT_MODULES = (assignment_v0, assignment_v1, assignment_v2, assignment_v3)
LATEST_VERSION = len(_SUBSCRIPTION_MODULES) - 1
_VERSION = struct.Struct(">h")


@dataclass(frozen=True, slots=True)
class Subscription:
    """One member's subscription as the group leader's assignor sees it.

    `group_instance_id` is not part of the encoded subscription: JoinGroup's member list carries it
    beside the metadata, and the caller adds it (`decode_subscription(data, group_instance_id=...)`).
    `generation` is -1 when the member sent none (versions before 2, or a member never assigned).
    """

    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[TopicPartition, ...] = ()
    group_instance_id: str | None = None
    generation: int = NO_GENERATION
    rack_id: str | None = None


@dataclass(frozen=True, slots=True)
class Assignment:
    """The partitions one member is given, and the assignor's user data for it."""

    partitions: tuple[TopicPartition, ...]
    user_data: bytes | None = None


def group_by_topic(partitions: Iterable[TopicPartition]) -> list[tuple[str, tuple[int, ...]]]:
    """Partitions as [(topic, sorted partition ids)], topics sorted: the wire's grouping, deterministic."""
    by_topic: dict[str, set[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, set()).add(partition)
    return [(topic, tuple(sorted(by_topic[topic]))) for topic in sorted(by_topic)]


def _check_version(version: int) -> None:
    if not 0 <= version <= LATEST_VERSION:
        raise ValueError(f"consumer protocol version {version} is not one of 0..{LATEST_VERSION}")


def _with_version(version: int, entity: Any) -> bytes:
    try:
        return _VERSION.pack(version) + encode(entity)
    except struct.error as error:  # an id or count outside int32/int16, or a string too long
        raise ValueError(f"cannot encode {type(entity).__qualname__}: {error}") from error


def encode_subscription(subscription: Subscription, version: int = LATEST_VERSION) -> bytes:
    """The subscription's bytes for JoinGroup; fields the version lacks are left out."""
    _check_version(version)
    data = _SUBSCRIPTION_MODULES[version].data
    fields: dict[str, Any] = {"topics": tuple(subscription.topics), "user_data": subscription.user_data}
    if version >= 1:
        fields["owned_partitions"] = tuple(
            data.TopicPartition(topic=topic, partitions=partitions)
            for topic, partitions in group_by_topic(subscription.owned_partitions)
        )
    if version >= 2:
        fields["generation_id"] = subscription.generation
    if version >= 3:
        fields["rack_id"] = subscription.rack_id
    return _with_version(version, data.ConsumerProtocolSubscription(**fields))


def encode_assignment(assignment: Assignment, version: int = LATEST_VERSION) -> bytes:
    """The assignment's bytes for SyncGroup (every version has the same fields)."""
    _check_version(version)
    data = _ASSIGNMENT_MODULES[version].data
    topics = tuple(
        data.TopicPartition(topic=topic, partitions=partitions)
        for topic, partitions in group_by_topic(assignment.partitions)
    )
    return _with_version(
        version, data.ConsumerProtocolAssignment(assigned_partitions=topics, user_data=assignment.user_data)
    )


@cache
def _reader(entity_type: type) -> Any:
    return entity_reader(entity_type)


def _read(modules: tuple[Any, ...], name: str, data: bytes | bytearray | memoryview) -> Any:
    view = memoryview(data).cast("B").toreadonly()  # kio's reader refuses writable buffers
    if len(view) < _VERSION.size:
        raise MalformedMessage(f"{name} of {len(view)} bytes has no version")
    (version,) = _VERSION.unpack_from(view)
    if version < 0:
        raise MalformedMessage(f"{name} has version {version}")
    entity_type = getattr(modules[min(version, LATEST_VERSION)].data, name)
    try:
        entity, _size = _reader(entity_type)(view, _VERSION.size)
    except (SerialError, ValueError, KeyError, IndexError, struct.error) as error:
        raise MalformedMessage(f"cannot decode {name} v{version}: {error}") from error
    return entity


def _partitions(topics: Iterable[Any]) -> tuple[TopicPartition, ...]:
    return tuple((str(entry.topic), int(partition)) for entry in topics for partition in entry.partitions)


def decode_subscription(
    data: bytes | bytearray | memoryview, group_instance_id: str | None = None
) -> Subscription:
    """A member's JoinGroup metadata; raises MalformedMessage when it is not a consumer subscription."""
    entity = _read(_SUBSCRIPTION_MODULES, "ConsumerProtocolSubscription", data)
    generation = int(getattr(entity, "generation_id", NO_GENERATION))
    return Subscription(
        topics=tuple(str(topic) for topic in entity.topics),
        user_data=None if entity.user_data is None else bytes(entity.user_data),
        owned_partitions=_partitions(getattr(entity, "owned_partitions", ())),
        group_instance_id=group_instance_id,
        generation=generation if generation >= 0 else NO_GENERATION,
        # Kafka reads an empty rack as none.
        rack_id=getattr(entity, "rack_id", None) or None,
    )


def decode_assignment(data: bytes | bytearray | memoryview) -> Assignment:
    """A member's SyncGroup assignment; raises MalformedMessage when it is not one.

    An empty blob is an empty assignment: the coordinator answers SyncGroup with no bytes for a member
    the leader gave nothing (or when the group is rebalancing again).
    """
    if len(data) == 0:
        return Assignment(partitions=())
    entity = _read(_ASSIGNMENT_MODULES, "ConsumerProtocolAssignment", data)
    return Assignment(
        partitions=_partitions(entity.assigned_partitions),
        user_data=None if entity.user_data is None else bytes(entity.user_data),
    )
