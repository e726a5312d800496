"""Partition assignors: the group leader's rule for sharing a group's partitions among its members.

The four assignors of Kafka's Java client, under the same names, so a group can mix our consumers with
kafka-python's or the Java client's (the coordinator picks a protocol name every member offers, and the
leader runs that assignor on everyone's subscription):

- "range": per topic, the partitions in contiguous ranges over the topic's subscribers in member order
  (static members first, by group.instance.id; then by member id), the first ones one longer.
- "roundrobin": every partition of every subscribed topic in topic-partition order, dealt to the
  members in member order, skipping members not subscribed to the partition's topic.
- "sticky": balanced, and moves as few partitions as balance allows (see sticky.py). Eager, like
  Kafka's: members revoke everything before joining, so the previous assignment and its generation
  travel in the user data (Kafka's StickyAssignorUserData v1). kafka-python writes that struct behind an
  int16 version; both forms are read, Kafka's is written (a kafka-python leader then reads no history
  from our members: less sticky, never wrong).
- "cooperative-sticky": the same placement, but a partition another member claims to own is not given to
  its new owner in this rebalance; the owner sees it missing from its assignment, revokes it and rejoins,
  and the next rebalance hands it over (KIP-429). Ownership travels in the subscription's owned
  partitions; the generation in the subscription (v2+) or, from older members, in the user data.

More members than partitions leaves the extra members with nothing. Racks are not used: partition
placement is not part of `partitions_per_topic`, so Kafka's rack-aware variants reduce to these.

Pure: no I/O; the client's group membership calls `subscription_metadata` when it joins and, as leader,
`assign`.
"""

from __future__ import annotations

import struct
from collections.abc import Collection, Mapping, Sequence
from enum import IntEnum
from typing import ClassVar, Protocol

from backbone.wire.groups.consumer_protocol import (
    LATEST_VERSION,
    NO_GENERATION,
    Assignment,
    Subscription,
    TopicPartition,
    encode_subscription,
    group_by_topic,
)
from backbone.wire.groups.sticky import MemberClaim, java_order, resolve_claims, sticky_assign

__all__ = [
    "ASSIGNORS",
    "DEFAULT_ASSIGNORS",
    "Assignor",
    "CooperativeStickyAssignor",
    "RangeAssignor",
    "RebalanceProtocol",
    "RoundRobinAssignor",
    "StickyAssignor",
    "assignor_for",
    "rebalance_protocol",
    "subscription_metadata",
]


class RebalanceProtocol(IntEnum):
    """EAGER: every member revokes all its partitions before rejoining. COOPERATIVE: members keep what
    they own across the rebalance and give up only what the new assignment takes away (KIP-429)."""

    EAGER = 0
    COOPERATIVE = 1


class Assignor(Protocol):
    name: str
    supported_protocols: ClassVar[tuple[RebalanceProtocol, ...]]

    def subscription_user_data(
        self, topics: Collection[str], assigned: Sequence[TopicPartition], generation: int
    ) -> bytes | None:
        """The user data for this member's subscription, given its latest assignment and the generation
        it came in (-1 before the first)."""
        ...

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Mapping[str, Subscription]
    ) -> dict[str, Assignment]:
        """Member id -> assignment, for every member. `partitions_per_topic` holds the partition count of
        each subscribed topic that exists; subscriptions to other topics are ignored."""
        ...


def subscription_metadata(
    assignor: Assignor,
    topics: Collection[str],
    *,
    assigned: Sequence[TopicPartition] = (),
    owned: Sequence[TopicPartition] = (),
    generation: int = NO_GENERATION,
    rack_id: str | None = None,
    version: int = LATEST_VERSION,
) -> bytes:
    """The metadata of this assignor's entry in JoinGroup's protocol list.

    `assigned`: the member's latest assignment; `owned`: what it still holds as it joins (nothing under
    the eager protocol, which revokes first); `generation`: the generation of that assignment.
    """
    subscription = Subscription(
        topics=tuple(sorted(set(topics))),
        user_data=assignor.subscription_user_data(topics, assigned, generation),
        owned_partitions=tuple(owned),
        generation=generation,
        rack_id=rack_id,
    )
    return encode_subscription(subscription, version)


def _member_order(member_id: str, subscription: Subscription) -> tuple[int, bytes]:
    """Kafka's MemberInfo order: static members first, by group.instance.id, then the rest by member id."""
    if subscription.group_instance_id is not None:
        return (0, java_order(subscription.group_instance_id))
    return (1, java_order(member_id))


def _check_counts(partitions_per_topic: Mapping[str, int]) -> dict[str, int]:
    for topic, count in partitions_per_topic.items():
        if count < 0:
            raise ValueError(f"topic {topic!r} has a negative partition count ({count})")
    return {topic: count for topic, count in partitions_per_topic.items() if count > 0}


def _assignments(
    members: Mapping[str, Subscription], partitions: Mapping[str, Sequence[TopicPartition]]
) -> dict[str, Assignment]:
    return {member: Assignment(partitions=tuple(sorted(partitions.get(member, ())))) for member in members}


class _EagerAssignor:
    supported_protocols: ClassVar[tuple[RebalanceProtocol, ...]] = (RebalanceProtocol.EAGER,)

    def subscription_user_data(
        self, topics: Collection[str], assigned: Sequence[TopicPartition], generation: int
    ) -> bytes | None:
        return None


class RangeAssignor(_EagerAssignor):
    name = "range"

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Mapping[str, Subscription]
    ) -> dict[str, Assignment]:
        counts = _check_counts(partitions_per_topic)
        subscribers: dict[str, list[str]] = {}
        for member in sorted(members, key=lambda m: _member_order(m, members[m])):
            for topic in dict.fromkeys(members[member].topics):
                if topic in counts:
                    subscribers.setdefault(topic, []).append(member)
        assigned: dict[str, list[TopicPartition]] = {member: [] for member in members}
        for topic, topic_members in subscribers.items():
            per_member, extra = divmod(counts[topic], len(topic_members))
            for index, member in enumerate(topic_members):
                start = per_member * index + min(index, extra)
                length = per_member + (1 if index < extra else 0)
                assigned[member].extend((topic, partition) for partition in range(start, start + length))
        return _assignments(members, assigned)


class RoundRobinAssignor(_EagerAssignor):
    name = "roundrobin"

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Mapping[str, Subscription]
    ) -> dict[str, Assignment]:
        counts = _check_counts(partitions_per_topic)
        ring = sorted(members, key=lambda m: _member_order(m, members[m]))
        topics_of = {member: frozenset(members[member].topics) for member in ring}
        subscribed = sorted({topic for topics in topics_of.values() for topic in topics if topic in counts})
        assigned: dict[str, list[TopicPartition]] = {member: [] for member in members}
        position = 0
        for topic in subscribed:
            for partition in range(counts[topic]):
                # Someone subscribes to every topic here, so this finds a member within one turn.
                while topic not in topics_of[ring[position]]:
                    position = (position + 1) % len(ring)
                assigned[ring[position]].append((topic, partition))
                position = (position + 1) % len(ring)
        return _assignments(members, assigned)


# -- sticky ------------------------------------------------------------------------------------------

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def encode_sticky_user_data(assigned: Sequence[TopicPartition], generation: int) -> bytes:
    """Kafka's StickyAssignorUserData v1: [(topic, [partition])] then the int32 generation."""
    by_topic = group_by_topic(assigned)
    out = bytearray(_I32.pack(len(by_topic)))
    for topic, partitions in by_topic:
        name = topic.encode()
        out += _I16.pack(len(name)) + name + _I32.pack(len(partitions))
        out += b"".join(_I32.pack(partition) for partition in partitions)
    return bytes(out + _I32.pack(generation))


class _UserDataReader:
    def __init__(self, data: bytes, position: int) -> None:
        self.data = data
        self.position = position

    def unpack(self, fmt: struct.Struct) -> int:
        (value,) = fmt.unpack_from(self.data, self.position)
        self.position += fmt.size
        return int(value)

    def count(self, item_size: int) -> int:
        count = self.unpack(_I32)
        if count < 0 or count * item_size > len(self.data) - self.position:
            raise ValueError(f"array of {count} in user data of {len(self.data)} bytes")
        return count

    def string(self) -> str:
        size = self.unpack(_I16)
        if size < 0 or self.position + size > len(self.data):
            raise ValueError("string runs past the user data")
        self.position += size
        return self.data[self.position - size : self.position].decode()


def _read_sticky_user_data(data: bytes, start: int, with_generation: bool) -> MemberClaim | None:
    reader = _UserDataReader(data, start)
    try:
        partitions: list[TopicPartition] = []
        for _topic in range(reader.count(item_size=6)):
            topic = reader.string()
            partitions.extend((topic, reader.unpack(_I32)) for _ in range(reader.count(item_size=4)))
        generation = reader.unpack(_I32) if with_generation else None
    except (struct.error, ValueError, UnicodeDecodeError):
        return None
    if reader.position != len(data):
        return None
    return MemberClaim(partitions=tuple(partitions), generation=generation)


def decode_sticky_user_data(data: bytes) -> MemberClaim:
    """StickyAssignorUserData as Kafka writes it (v1, else v0 without the generation), or as kafka-python
    writes it (the same behind an int16 version). Unreadable data claims nothing, as in Kafka."""
    claim = _read_sticky_user_data(data, 0, with_generation=True) or _read_sticky_user_data(
        data, 0, with_generation=False
    )
    if claim is None and len(data) >= _I16.size:
        (version,) = _I16.unpack_from(data)
        if version in (0, 1):
            claim = _read_sticky_user_data(data, _I16.size, with_generation=version == 1)
    return claim or MemberClaim(partitions=(), generation=NO_GENERATION)


class StickyAssignor:
    name = "sticky"
    supported_protocols: ClassVar[tuple[RebalanceProtocol, ...]] = (RebalanceProtocol.EAGER,)

    def subscription_user_data(
        self, topics: Collection[str], assigned: Sequence[TopicPartition], generation: int
    ) -> bytes | None:
        if not assigned and generation == NO_GENERATION:
            return None  # never assigned: nothing to stick to
        return encode_sticky_user_data(assigned, generation)

    def member_claim(self, subscription: Subscription) -> MemberClaim:
        # Eager members revoke before joining, so their subscription owns nothing; the user data tells.
        if not subscription.user_data:
            return MemberClaim(partitions=(), generation=None)
        return decode_sticky_user_data(subscription.user_data)

    def _inputs(
        self, partitions_per_topic: Mapping[str, int], members: Mapping[str, Subscription]
    ) -> tuple[dict[str, int], dict[str, frozenset[str]], dict[str, MemberClaim]]:
        return (
            _check_counts(partitions_per_topic),
            {member: frozenset(subscription.topics) for member, subscription in members.items()},
            {member: self.member_claim(subscription) for member, subscription in members.items()},
        )

    def placement(
        self, partitions_per_topic: Mapping[str, int], members: Mapping[str, Subscription]
    ) -> dict[str, list[TopicPartition]]:
        """The sticky algorithm's result before any cooperative hold-back."""
        return sticky_assign(*self._inputs(partitions_per_topic, members))

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Mapping[str, Subscription]
    ) -> dict[str, Assignment]:
        return _assignments(members, self.placement(partitions_per_topic, members))


class CooperativeStickyAssignor(StickyAssignor):
    name = "cooperative-sticky"
    # Eager too, as in Kafka: a group can move to it one rolling restart at a time.
    supported_protocols: ClassVar[tuple[RebalanceProtocol, ...]] = (
        RebalanceProtocol.EAGER,
        RebalanceProtocol.COOPERATIVE,
    )

    def subscription_user_data(
        self, topics: Collection[str], assigned: Sequence[TopicPartition], generation: int
    ) -> bytes | None:
        # Kafka's CooperativeStickyAssignor user data: the generation alone, for leaders reading
        # subscriptions older than v2 (which carry it themselves).
        return _I32.pack(generation)

    def member_claim(self, subscription: Subscription) -> MemberClaim:
        owned = subscription.owned_partitions
        if subscription.generation != NO_GENERATION:
            return MemberClaim(partitions=owned, generation=subscription.generation)
        if subscription.user_data is None:
            return MemberClaim(partitions=owned, generation=None)
        if len(subscription.user_data) < _I32.size:
            return MemberClaim(partitions=owned, generation=NO_GENERATION)
        (generation,) = _I32.unpack_from(subscription.user_data)
        return MemberClaim(partitions=owned, generation=generation)

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Mapping[str, Subscription]
    ) -> dict[str, Assignment]:
        counts, topics, claims = self._inputs(partitions_per_topic, members)
        placement = sticky_assign(counts, topics, claims)
        owner = {
            tp: member for member, owned in resolve_claims(counts, topics, claims).items() for tp in owned
        }
        claimed_by: dict[TopicPartition, set[str]] = {}
        for member, subscription in members.items():
            for partition in subscription.owned_partitions:
                claimed_by.setdefault(partition, set()).add(member)
        # A partition another member still claims goes only to its rightful previous owner (a stale claim
        # lost to a newer generation); anyone else gets it once the claimants have let go: this time it
        # is only revoked, its holder rejoins, and the follow-up rebalance hands it over.
        granted = {
            member: [
                tp for tp in partitions if owner.get(tp) == member or not claimed_by.get(tp, set()) - {member}
            ]
            for member, partitions in placement.items()
        }
        return _assignments(members, granted)


ASSIGNORS: Mapping[str, Assignor] = {
    assignor.name: assignor
    for assignor in (RangeAssignor(), RoundRobinAssignor(), StickyAssignor(), CooperativeStickyAssignor())
}
# The Java client's default partition.assignment.strategy.
DEFAULT_ASSIGNORS = ("range", "cooperative-sticky")


def assignor_for(name: str) -> Assignor:
    """The assignor of this protocol name; ValueError naming the known ones otherwise."""
    try:
        return ASSIGNORS[name]
    except KeyError:
        raise ValueError(
            f"unknown partition assignor {name!r}; use one of: {', '.join(sorted(ASSIGNORS))}"
        ) from None


def rebalance_protocol(assignors: Sequence[Assignor]) -> RebalanceProtocol:
    """The protocol a consumer configured with these assignors follows: the newest all of them support,
    as the Java client chooses. ValueError when they have none in common."""
    if not assignors:
        raise ValueError("no partition assignors configured")
    common = set(assignors[0].supported_protocols)
    for assignor in assignors[1:]:
        common &= set(assignor.supported_protocols)
    if not common:
        names = ", ".join(assignor.name for assignor in assignors)
        raise ValueError(f"partition assignors {names} have no rebalance protocol in common")
    return max(common)
