"""The sticky assignment algorithm shared by the "sticky" and "cooperative-sticky" assignors.

Goals, in order: every partition of a subscribed topic is assigned; the counts are as balanced as the
subscriptions allow; as many partitions as possible stay with the member that owned them.

1. Claims. Each member says which partitions it owned and in which generation. A partition claimed by
   several members goes to the claimant of the highest generation; claimants tied at the highest
   generation cancel each other out (the partition is reassigned from scratch), as Kafka's assignor does.
   Claims on topics the member no longer subscribes to, or that no longer exist, are dropped.
2. When every member subscribes to the same topics (the common case), Kafka's constrained algorithm:
   members keep owned partitions up to their quota (floor or ceiling of partitions / members, only as
   many members at the ceiling as the remainder allows), then the rest are dealt round-robin, in
   topic-partition order, to members below quota (sorted by member id), then one each to members at the
   floor. Where Kafka's Java code walks a hash map (which members keep the ceiling), members go in
   member-id order here.
3. Otherwise the general algorithm: owned partitions stay, each unowned partition goes (fewest potential
   consumers first) to the eligible member holding fewest, then balance is restored by moving partitions
   along shortest chains of members (A gives one to B, B one to C) from any member holding at least two
   more than a member that could, through the chain, take one. No such chain left means no assignment
   is more balanced (the optimality condition of semi-matchings), which is stronger than Kafka's check
   of single moves. A moved partition prefers to go back to a member that owned it before.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from backbone.wire.groups.consumer_protocol import NO_GENERATION, TopicPartition

__all__ = ["MemberClaim", "java_order", "resolve_claims", "sticky_assign"]


def java_order(text: str) -> bytes:
    """A sort key ordering strings as Java's String.compareTo does (UTF-16 code units), so member order
    matches the Java client's even for ids outside the Basic Multilingual Plane."""
    return text.encode("utf-16-be", "surrogatepass")


@dataclass(frozen=True, slots=True)
class MemberClaim:
    """What a member says it owned before this rebalance; generation None when it could not say."""

    partitions: Sequence[TopicPartition]
    generation: int | None = None


def resolve_claims(
    exists: Mapping[str, int], topics: Mapping[str, Collection[str]], claims: Mapping[str, MemberClaim]
) -> dict[str, list[TopicPartition]]:
    """Each member's valid owned partitions (step 1 above); `exists` holds the partition counts."""
    claimants: dict[TopicPartition, list[tuple[int, str]]] = {}
    for member in sorted(claims, key=java_order):
        claim = claims[member]
        generation = NO_GENERATION if claim.generation is None else claim.generation
        for topic, partition in dict.fromkeys(claim.partitions):
            if topic in topics.get(member, ()) and 0 <= partition < exists.get(topic, 0):
                claimants.setdefault((topic, partition), []).append((generation, member))
    owned: dict[str, list[TopicPartition]] = {member: [] for member in topics}
    for tp, by_generation in claimants.items():
        newest = max(generation for generation, _member in by_generation)
        owners = [member for generation, member in by_generation if generation == newest]
        if len(owners) == 1:
            owned[owners[0]].append(tp)
    return owned


def sticky_assign(
    partitions_per_topic: Mapping[str, int],
    topics: Mapping[str, Collection[str]],
    claims: Mapping[str, MemberClaim],
) -> dict[str, list[TopicPartition]]:
    """Member id -> assigned partitions. `topics`: each member's subscription; `claims`: what they owned."""
    exists = {topic: count for topic, count in partitions_per_topic.items() if count > 0}
    owned = resolve_claims(exists, topics, claims)
    subscriptions = {frozenset(member_topics) for member_topics in topics.values()}
    if len(subscriptions) == 1:
        subscribed = sorted(topic for topic in next(iter(subscriptions)) if topic in exists)
        every_partition = [(topic, partition) for topic in subscribed for partition in range(exists[topic])]
        return _constrained_assign(every_partition, owned)
    return _general_assign(exists, topics, owned)


def _constrained_assign(
    every_partition: list[TopicPartition], owned: Mapping[str, list[TopicPartition]]
) -> dict[str, list[TopicPartition]]:
    members = sorted(owned, key=java_order)
    min_quota, extra = divmod(len(every_partition), len(members))
    max_quota = min_quota + (1 if extra else 0)
    members_over_min = 0  # members given max_quota so far; at most `extra` of them
    assignment: dict[str, list[TopicPartition]] = {member: [] for member in members}
    under_min: list[str] = []
    at_min: deque[str] = deque()  # may still take one more, while fewer than `extra` are over min
    for member in members:
        # Kafka keeps the lowest partition numbers first.
        kept = sorted(owned[member], key=lambda tp: (tp[1], tp[0]))
        if len(kept) < min_quota:
            assignment[member] = kept
            under_min.append(member)
        elif len(kept) >= max_quota and members_over_min < extra:
            members_over_min += 1
            if members_over_min == extra:
                at_min.clear()
            assignment[member] = kept[:max_quota]
        else:
            assignment[member] = kept[:min_quota]
            if members_over_min < extra:
                at_min.append(member)
    taken = {partition for partitions in assignment.values() for partition in partitions}
    position = 0  # where the round-robin over under_min stands
    for partition in every_partition:
        if partition in taken:
            continue
        from_under_min = bool(under_min)
        if from_under_min:
            position %= len(under_min)
            member = under_min[position]
        elif at_min:
            member = at_min.popleft()
        else:  # the quotas add up to the partition count, so this is a bug, not bad input
            raise AssertionError(f"no member left to take {partition}")
        partitions = assignment[member]
        partitions.append(partition)
        if from_under_min and len(partitions) == min_quota:
            under_min.pop(position)
            at_min.append(member)
        elif from_under_min:
            position += 1
    return assignment


def _general_assign(
    exists: Mapping[str, int],
    topics: Mapping[str, Collection[str]],
    owned: Mapping[str, list[TopicPartition]],
) -> dict[str, list[TopicPartition]]:
    subscribers: dict[str, list[str]] = {topic: [] for topic in exists}
    for member in sorted(topics, key=java_order):
        for topic in topics[member]:
            if topic in subscribers:
                subscribers[topic].append(member)
    assignment = {member: list(partitions) for member, partitions in owned.items()}
    taken = {partition for partitions in owned.values() for partition in partitions}
    unowned = sorted(
        ((topic, partition) for topic in exists for partition in range(exists[topic])),
        key=lambda tp: (len(subscribers[tp[0]]), tp[0], tp[1]),
    )
    for partition in unowned:
        candidates = subscribers[partition[0]]
        if partition in taken or not candidates:
            continue
        member = min(candidates, key=lambda m: (len(assignment[m]), java_order(m)))
        assignment[member].append(partition)
    _balance(assignment, topics, exists, owned)
    return assignment


def _balance(
    assignment: dict[str, list[TopicPartition]],
    topics: Mapping[str, Collection[str]],
    exists: Mapping[str, int],
    owned: Mapping[str, Iterable[TopicPartition]],
) -> None:
    """Move partitions along chains until no member holds two more than one that could take from it."""
    previously_owned = {member: set(partitions) for member, partitions in owned.items()}
    while True:
        counts = {member: len(partitions) for member, partitions in assignment.items()}
        most = max(counts.values(), default=0)
        holders: dict[str, set[str]] = {}
        for member, partitions in assignment.items():
            for topic, _partition in partitions:
                holders.setdefault(topic, set()).add(member)
        receivers = sorted(
            (member for member in counts if counts[member] <= most - 2),
            key=lambda member: (counts[member], java_order(member)),
        )
        for receiver in receivers:
            chain = _improving_chain(receiver, counts, holders, topics, exists)
            if chain:
                _shift(chain, assignment, previously_owned)
                break
        else:
            return


def _improving_chain(
    receiver: str,
    counts: Mapping[str, int],
    holders: Mapping[str, Collection[str]],
    topics: Mapping[str, Collection[str]],
    exists: Mapping[str, int],
) -> list[tuple[str, str, str]] | None:
    """The shortest chain of (giver, taker, topic) moves ending at `receiver` that starts at a member
    holding at least two more than `receiver`; None if there is none. Breadth-first from the receiver."""
    target = counts[receiver] + 2
    came_from: dict[str, tuple[str, str]] = {}  # giver -> (taker, topic)
    queue = deque([receiver])
    seen = {receiver}
    while queue:
        taker = queue.popleft()
        for topic in sorted(topics[taker]):
            if topic not in exists:
                continue
            for giver in sorted(holders.get(topic, ()), key=java_order):
                if giver in seen:
                    continue
                seen.add(giver)
                came_from[giver] = (taker, topic)
                if counts[giver] >= target:
                    chain = []
                    while giver != receiver:
                        taker_of, topic_of = came_from[giver]
                        chain.append((giver, taker_of, topic_of))
                        giver = taker_of
                    return chain
                queue.append(giver)
    return None


def _shift(
    chain: list[tuple[str, str, str]],
    assignment: dict[str, list[TopicPartition]],
    previously_owned: Mapping[str, set[TopicPartition]],
) -> None:
    for giver, taker, topic in chain:
        giver_owned = previously_owned.get(giver, set())
        taker_owned = previously_owned.get(taker, set())
        # Prefer handing back what the taker owned, then giving up what the giver did not own before.
        partition = min(
            (tp for tp in assignment[giver] if tp[0] == topic),
            key=lambda tp: (tp not in taker_owned, tp in giver_owned, -tp[1]),
        )
        assignment[giver].remove(partition)
        assignment[taker].append(partition)
