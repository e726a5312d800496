"""Partition assignors: range, roundrobin, sticky and cooperative-sticky.

Known outcomes are written out as Kafka's Java assignors give them for the same input; range and
roundrobin are also checked against kafka-python's assignors on random groups. The sticky assignors
are checked for validity, balance (against an exhaustive optimum on small groups), stickiness when
members come and go, stale or doubled ownership claims, and the cooperative two-phase hand-over.
"""

from __future__ import annotations

import itertools
import random
import struct
from collections.abc import Mapping
from typing import Any, NamedTuple

import pytest
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from kafka.coordinator.assignors.sticky.user_data import StickyAssignorUserData
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription as KpSubscription
from kafka.structs import TopicPartition as KpTopicPartition

from backbone.wire.groups.assignors import (
    ASSIGNORS,
    CooperativeStickyAssignor,
    RangeAssignor,
    RebalanceProtocol,
    RoundRobinAssignor,
    StickyAssignor,
    assignor_for,
    decode_sticky_user_data,
    encode_sticky_user_data,
    rebalance_protocol,
    subscription_metadata,
)
from backbone.wire.groups.consumer_protocol import (
    Subscription,
    TopicPartition,
    decode_subscription,
    encode_subscription,
)

pytestmark = pytest.mark.unit

Placement = dict[str, tuple[TopicPartition, ...]]


def placement(assignor: Any, counts: Mapping[str, int], members: Mapping[str, Subscription]) -> Placement:
    result = assignor.assign(counts, members)
    assert set(result) == set(members), "every member gets an assignment, possibly empty"
    return {member: assignment.partitions for member, assignment in result.items()}


def tps(*names: str) -> tuple[TopicPartition, ...]:
    """tps("t-0", "u-2") -> (("t", 0), ("u", 2))"""
    return tuple((name.rsplit("-", 1)[0], int(name.rsplit("-", 1)[1])) for name in names)


def owning(topics: tuple[str, ...], owned: tuple[TopicPartition, ...], generation: int) -> Subscription:
    return Subscription(topics=topics, owned_partitions=owned, generation=generation)


def sticky_member(
    topics: tuple[str, ...], owned: tuple[TopicPartition, ...], generation: int
) -> Subscription:
    """An eager sticky member: owns nothing as it joins; its last assignment travels in the user data."""
    return Subscription(topics=topics, user_data=encode_sticky_user_data(owned, generation))


# -- user data and JoinGroup metadata ---------------------------------------------------------


def test_sticky_user_data_in_kafkas_and_kafka_pythons_forms() -> None:
    ours = encode_sticky_user_data(tps("t-2", "t-0", "u-1"), 7)
    # Kafka's StickyAssignorUserData v1: no version prefix, topics then the generation.
    assert ours == (
        struct.pack(">i", 2)
        + struct.pack(">h", 1) + b"t" + struct.pack(">iii", 2, 0, 2)
        + struct.pack(">h", 1) + b"u" + struct.pack(">ii", 1, 1)
        + struct.pack(">i", 7)
    )  # fmt: skip
    claim = decode_sticky_user_data(ours)
    assert (sorted(claim.partitions), claim.generation) == (list(tps("t-0", "t-2", "u-1")), 7)
    v0 = ours[:-4]
    assert decode_sticky_user_data(v0).generation is None
    # kafka-python writes the same struct behind an int16 version.
    theirs = StickyAssignorUserData([("t", [0, 2])], 9).encode()
    claim = decode_sticky_user_data(theirs)
    assert (claim.partitions, claim.generation) == (tps("t-0", "t-2"), 9)
    for garbage in (b"junk", b"\x00\x00\x00\x05", b"\xff" * 9):
        assert decode_sticky_user_data(garbage).partitions == ()


def test_subscription_metadata_carries_each_assignors_user_data() -> None:
    owned = tps("t-0", "t-3")
    sticky = decode_subscription(subscription_metadata(StickyAssignor(), {"t"}, assigned=owned, generation=5))
    assert sticky.owned_partitions == ()
    assert sticky.generation == 5
    assert StickyAssignor().member_claim(sticky).partitions == owned
    # Before its first assignment a sticky member has nothing to stick to.
    assert StickyAssignor().subscription_user_data({"t"}, (), -1) is None

    cooperative = CooperativeStickyAssignor()
    data = subscription_metadata(cooperative, ["t"], assigned=owned, owned=owned, generation=5, rack_id="r")
    decoded = decode_subscription(data)
    assert (decoded.owned_partitions, decoded.generation, decoded.rack_id) == (owned, 5, "r")
    assert decoded.user_data == struct.pack(">i", 5)
    # A v1 subscription has no generation field: the leader takes it from the user data.
    v1 = decode_subscription(subscription_metadata(cooperative, ["t"], owned=owned, generation=5, version=1))
    assert cooperative.member_claim(v1).generation == 5
    assert decode_subscription(subscription_metadata(RangeAssignor(), ["t"])).user_data is None


def test_registry_names_and_protocols() -> None:
    assert sorted(ASSIGNORS) == ["cooperative-sticky", "range", "roundrobin", "sticky"]
    assert assignor_for("roundrobin").name == "roundrobin"
    with pytest.raises(ValueError, match="unknown partition assignor 'fair'"):
        assignor_for("fair")
    assert rebalance_protocol([assignor_for("cooperative-sticky")]) is RebalanceProtocol.COOPERATIVE
    assert (
        rebalance_protocol([assignor_for("range"), assignor_for("cooperative-sticky")])
        is RebalanceProtocol.EAGER
    )
    with pytest.raises(ValueError):
        rebalance_protocol([])


# -- known outcomes (as Kafka's Java assignors give them) --------------------------------------------


MIXED_COUNTS = {"topic1": 3, "topic2": 2}
MIXED_MEMBERS = {
    "consumer1": Subscription(("topic1",)),
    "consumer2": Subscription(("topic1", "topic2")),
    "consumer3": Subscription(("topic1",)),
}
SIX_COUNTS = {"topic1": 3, "topic2": 3}
SIX_MEMBERS = {
    "consumer1": Subscription(("topic1", "topic2")),
    "consumer2": Subscription(("topic1", "topic2")),
}


def test_range_known_outcomes() -> None:
    assert placement(RangeAssignor(), MIXED_COUNTS, MIXED_MEMBERS) == {
        "consumer1": tps("topic1-0"),
        "consumer2": tps("topic1-1", "topic2-0", "topic2-1"),
        "consumer3": tps("topic1-2"),
    }
    assert placement(RangeAssignor(), SIX_COUNTS, SIX_MEMBERS) == {
        "consumer1": tps("topic1-0", "topic1-1", "topic2-0", "topic2-1"),
        "consumer2": tps("topic1-2", "topic2-2"),
    }
    # A topic nobody can see yet, and a member subscribed only to it.
    members = {"a": Subscription(("t", "missing")), "b": Subscription(("missing",))}
    assert placement(RangeAssignor(), {"t": 2}, members) == {"a": tps("t-0", "t-1"), "b": ()}


def test_range_orders_static_members_by_instance_id_first() -> None:
    members = {
        "m-b": Subscription(("t",), group_instance_id="i-1"),
        "m-a": Subscription(("t",)),
        "m-c": Subscription(("t",), group_instance_id="i-0"),
    }
    assert placement(RangeAssignor(), {"t": 7}, members) == {
        "m-c": tps("t-0", "t-1", "t-2"),
        "m-b": tps("t-3", "t-4"),
        "m-a": tps("t-5", "t-6"),
    }
    # A restarted static member comes back with a new member id and gets the same partitions.
    rejoined = dict(members, **{"m-z": Subscription(("t",), group_instance_id="i-1")})
    del rejoined["m-b"]
    assert placement(RangeAssignor(), {"t": 7}, rejoined)["m-z"] == tps("t-3", "t-4")


def test_roundrobin_known_outcomes() -> None:
    assert placement(RoundRobinAssignor(), MIXED_COUNTS, MIXED_MEMBERS) == {
        "consumer1": tps("topic1-0"),
        "consumer2": tps("topic1-1", "topic2-0", "topic2-1"),
        "consumer3": tps("topic1-2"),
    }
    assert placement(RoundRobinAssignor(), SIX_COUNTS, SIX_MEMBERS) == {
        "consumer1": tps("topic1-0", "topic1-2", "topic2-1"),
        "consumer2": tps("topic1-1", "topic2-0", "topic2-2"),
    }
    # Kafka's javadoc example: C0 on t0; C1 on t0, t1; C2 on t0, t1, t2.
    members = {
        "C0": Subscription(("t0",)),
        "C1": Subscription(("t0", "t1")),
        "C2": Subscription(("t0", "t1", "t2")),
    }
    assert placement(RoundRobinAssignor(), {"t0": 1, "t1": 2, "t2": 3}, members) == {
        "C0": tps("t0-0"),
        "C1": tps("t1-0"),
        "C2": tps("t1-1", "t2-0", "t2-1", "t2-2"),
    }


@pytest.mark.parametrize("assignor", [StickyAssignor(), CooperativeStickyAssignor()], ids=lambda a: a.name)
def test_sticky_known_outcomes_without_history(assignor: Any) -> None:
    # Same subscriptions: partitions in order, dealt round-robin over members in order.
    assert placement(assignor, SIX_COUNTS, SIX_MEMBERS) == {
        "consumer1": tps("topic1-0", "topic1-2", "topic2-1"),
        "consumer2": tps("topic1-1", "topic2-0", "topic2-2"),
    }
    # Different subscriptions: the topic with fewest consumers first, each to the least loaded.
    assert placement(assignor, MIXED_COUNTS, MIXED_MEMBERS) == {
        "consumer1": tps("topic1-0", "topic1-2"),
        "consumer2": tps("topic2-0", "topic2-1"),
        "consumer3": tps("topic1-1"),
    }
    assert placement(assignor, {"t": 3}, {"c1": Subscription(("t",)), "c2": Subscription(("t",))}) == {
        "c1": tps("t-0", "t-2"),
        "c2": tps("t-1"),
    }


def test_sticky_keeps_the_lowest_partitions_when_a_member_joins() -> None:
    first = placement(StickyAssignor(), {"t": 3}, {"c1": Subscription(("t",))})
    assert first == {"c1": tps("t-0", "t-1", "t-2")}
    members = {"c1": sticky_member(("t",), first["c1"], 1), "c2": Subscription(("t",))}
    assert placement(StickyAssignor(), {"t": 3}, members) == {"c1": tps("t-0", "t-1"), "c2": tps("t-2")}


def test_claims_of_a_stale_generation_lose_to_the_newer_owner() -> None:
    counts = {"topic": 3, "topic2": 3}
    claimed = tps("topic-0", "topic-2", "topic2-1")
    members = {
        "consumer1": owning(("topic", "topic2"), claimed, 10),
        "consumer2": owning(("topic", "topic2"), claimed, 9),
    }
    expected = {"consumer1": claimed, "consumer2": tps("topic-1", "topic2-0", "topic2-2")}
    assert placement(CooperativeStickyAssignor(), counts, members) == expected
    eager = {
        member: sticky_member(sub.topics, sub.owned_partitions, sub.generation)
        for member, sub in members.items()
    }
    assert placement(StickyAssignor(), counts, eager) == expected


def test_a_partition_claimed_twice_in_one_generation_is_reassigned_and_held_back() -> None:
    members = {
        "consumer1": owning(("topic",), tps("topic-0", "topic-1"), 3),
        "consumer2": owning(("topic",), tps("topic-0", "topic-2"), 3),
        "consumer3": owning(("topic",), (), 3),
    }
    eager = {member: sticky_member(sub.topics, sub.owned_partitions, 3) for member, sub in members.items()}
    assert placement(StickyAssignor(), {"topic": 3}, eager) == {
        "consumer1": tps("topic-1"),
        "consumer2": tps("topic-2"),
        "consumer3": tps("topic-0"),
    }
    # Cooperative: topic-0 is still held by two members, so it is only revoked this round.
    assert placement(CooperativeStickyAssignor(), {"topic": 3}, members) == {
        "consumer1": tps("topic-1"),
        "consumer2": tps("topic-2"),
        "consumer3": (),
    }


def test_claims_on_deleted_topics_or_partitions_are_dropped() -> None:
    members = {
        "a": owning(("t", "gone"), tps("t-0", "t-1", "gone-0", "t-9"), 2),
        "b": owning(("t", "gone"), tps("t-2"), 2),
    }
    assert placement(CooperativeStickyAssignor(), {"t": 4}, members) == {
        "a": tps("t-0", "t-1"),
        "b": tps("t-2", "t-3"),
    }


def test_partitions_of_a_topic_a_member_left_are_handed_to_subscribers() -> None:
    members = {
        "a": sticky_member(("t",), tps("t-0", "u-0", "u-1"), 4),  # no longer subscribed to u
        "b": sticky_member(("t", "u"), tps("t-1"), 4),
    }
    # b gives t-1 up: a can only take t partitions, and 2-2 beats 1-3.
    assert placement(StickyAssignor(), {"t": 2, "u": 2}, members) == {
        "a": tps("t-0", "t-1"),
        "b": tps("u-0", "u-1"),
    }


def test_cooperative_holds_back_from_a_stale_claimant_what_the_owner_still_holds() -> None:
    members = {
        "owner": owning(("t",), tps("t-0", "t-1", "t-2", "t-3"), 5),
        "stale": owning(("t",), tps("t-3"), 4),
    }
    assert CooperativeStickyAssignor().placement({"t": 4}, members) == {
        "owner": list(tps("t-0", "t-1")),
        "stale": list(tps("t-2", "t-3")),
    }
    assert placement(CooperativeStickyAssignor(), {"t": 4}, members) == {
        "owner": tps("t-0", "t-1"),
        "stale": (),
    }


# -- more members than partitions -------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(ASSIGNORS))
def test_extra_members_get_nothing(name: str) -> None:
    members = {f"member-{index}": Subscription(("t",)) for index in range(5)}
    result = placement(assignor_for(name), {"t": 3}, members)
    assert sorted(tp for partitions in result.values() for tp in partitions) == list(tps("t-0", "t-1", "t-2"))
    assert sorted(len(partitions) for partitions in result.values()) == [0, 0, 1, 1, 1]
    assert placement(assignor_for(name), {"t": 3}, {}) == {}
    assert placement(assignor_for(name), {}, {"m": Subscription(("t",))}) == {"m": ()}


@pytest.mark.parametrize("name", sorted(ASSIGNORS))
def test_a_negative_partition_count_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="negative partition count"):
        assignor_for(name).assign({"t": -1}, {"m": Subscription(("t",))})


# -- range and roundrobin against kafka-python -------------------------------------------------------


class _KpMember(NamedTuple):
    member_id: str
    group_instance_id: str | None
    metadata: Any


class _KpCluster:
    """The one question kafka-python's assignors ask of cluster metadata."""

    def __init__(self, counts: Mapping[str, int]) -> None:
        self.counts = counts

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return set(range(self.counts[topic])) if topic in self.counts else None


def random_group(
    rng: random.Random, static: bool, same_topics: bool
) -> tuple[dict[str, int], dict[str, Subscription]]:
    topics = [f"topic-{index}" for index in range(rng.randint(1, 5))]
    counts = {topic: rng.randint(1, 9) for topic in topics}
    everyone = tuple(rng.sample([*topics, "not-there"], rng.randint(1, len(topics))))
    members = {}
    for index in range(rng.randint(1, 8)):
        subscribed = (
            everyone
            if same_topics
            else tuple(rng.sample([*topics, "not-there"], rng.randint(1, len(topics))))
        )
        instance = f"instance-{rng.randint(0, 99):02d}-{index}" if static else None
        members[f"member-{rng.randint(0, 999):03d}-{index}"] = Subscription(
            subscribed, group_instance_id=instance
        )
    return counts, members


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [(RangeAssignor(), RangePartitionAssignor), (RoundRobinAssignor(), RoundRobinPartitionAssignor)],
    ids=["range", "roundrobin"],
)
@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static"])
def test_range_and_roundrobin_agree_with_kafka_python(ours: Any, theirs: Any, static: bool) -> None:
    rng = random.Random(5 + static)
    for _case in range(150):
        # kafka-python's roundrobin fails with a KeyError when it has to skip a member (it rebinds the
        # member id to an (instance id, member id) pair), so it is compared on groups that need no skip;
        # the known outcomes above cover skipping.
        counts, members = random_group(rng, static, same_topics=ours.name == "roundrobin")
        kp_members = [
            _KpMember(member, sub.group_instance_id, KpSubscription.decode(encode_subscription(sub, 0)))
            for member, sub in members.items()
        ]
        expected = {
            member: tuple(sorted((tp.topic, tp.partition) for tp in assignment.partitions()))
            for member, assignment in theirs.assign(_KpCluster(counts), kp_members).items()
        }
        assert placement(ours, counts, members) == expected, (counts, members)


# -- sticky: validity, balance, stickiness ----------------------------------------------------------


def check_valid(counts: Mapping[str, int], members: Mapping[str, Subscription], result: Placement) -> None:
    """Each partition of a subscribed, existing topic goes to exactly one member subscribed to it."""
    wanted = {topic for sub in members.values() for topic in sub.topics if topic in counts}
    every = sorted((topic, partition) for topic in wanted for partition in range(counts[topic]))
    given = sorted(tp for partitions in result.values() for tp in partitions)
    assert given == every
    for member, partitions in result.items():
        assert all(topic in members[member].topics for topic, _ in partitions), member


def squares(result: Placement) -> int:
    return sum(len(partitions) ** 2 for partitions in result.values())


def best_squares(counts: Mapping[str, int], members: Mapping[str, Subscription]) -> int:
    """The most balanced assignment possible, by trying every one (small groups only)."""
    every = [(topic, p) for topic in sorted(counts) for p in range(counts[topic])]
    choices = [[m for m, sub in members.items() if tp[0] in sub.topics] for tp in every]
    choices = [options for options in choices if options]
    best = None
    for combo in itertools.product(*choices):
        loads = {member: 0 for member in members}
        for member in combo:
            loads[member] += 1
        score = sum(load * load for load in loads.values())
        best = score if best is None else min(best, score)
    return best if best is not None else 0


def random_claims(
    rng: random.Random, counts: Mapping[str, int], members: Mapping[str, Subscription]
) -> dict[str, Subscription]:
    """Members claiming random (possibly overlapping, stale or out-of-range) partitions, both the eager
    way (user data) and the cooperative way (owned partitions and generation)."""
    every = [(topic, p) for topic in counts for p in range(counts[topic] + 1)]
    claimed = {}
    for member, sub in members.items():
        owned = tuple(rng.sample(every, rng.randint(0, len(every) // 2)))
        generation = rng.randint(1, 3)
        claimed[member] = Subscription(
            topics=sub.topics,
            user_data=encode_sticky_user_data(owned, generation),
            owned_partitions=owned,
            generation=generation,
        )
    return claimed


@pytest.mark.parametrize("assignor", [StickyAssignor(), CooperativeStickyAssignor()], ids=lambda a: a.name)
def test_sticky_is_valid_and_as_balanced_as_possible_on_small_random_groups(assignor: Any) -> None:
    rng = random.Random(11)
    for _case in range(250):
        topics = [f"t{index}" for index in range(rng.randint(1, 3))]
        counts = {topic: rng.randint(1, 3) for topic in topics}
        members = {
            f"m{index}": Subscription(tuple(rng.sample(topics, rng.randint(1, len(topics)))))
            for index in range(rng.randint(1, 3))
        }
        if rng.random() < 0.5:
            members = random_claims(rng, counts, members)
        # The placement before any cooperative hold-back must be complete and optimally balanced.
        placed = {
            member: tuple(partitions) for member, partitions in assignor.placement(counts, members).items()
        }
        check_valid(counts, members, placed)
        assert squares(placed) == best_squares(counts, members), (counts, members, placed)
        # What assign() hands out is that placement, less (cooperative only) partitions others still own.
        handed = placement(assignor, counts, members)
        for member, partitions in handed.items():
            held_back = set(placed[member]) - set(partitions)
            assert set(partitions) <= set(placed[member])
            if assignor.name == "sticky":
                assert not held_back
            for tp in held_back:
                assert any(tp in sub.owned_partitions for other, sub in members.items() if other != member)


def test_sticky_is_balanced_on_larger_random_groups() -> None:
    rng = random.Random(23)
    for case in range(40):
        topics = [f"topic-{index}" for index in range(rng.randint(1, 8))]
        counts = {topic: rng.randint(1, 30) for topic in topics}
        same = case % 2 == 0
        members = {
            f"member-{index:02d}": Subscription(
                tuple(topics if same else rng.sample(topics, rng.randint(1, len(topics))))
            )
            for index in range(rng.randint(1, 20))
        }
        members = random_claims(rng, counts, members)
        result = {m: tuple(p) for m, p in StickyAssignor().placement(counts, members).items()}
        check_valid(counts, members, result)
        loads = [len(partitions) for partitions in result.values()]
        if same:
            assert max(loads) - min(loads) <= 1
        # No single move would help (Kafka's own balance check); chains are covered above.
        for member, sub in members.items():
            for other, partitions in result.items():
                if any(topic in sub.topics for topic, _ in partitions):
                    assert len(partitions) <= len(result[member]) + 1, (member, other)


def rebalance_eager(
    counts: Mapping[str, int], topics: Mapping[str, tuple[str, ...]], previous: Placement, generation: int
) -> Placement:
    members = {m: sticky_member(topics[m], previous.get(m, ()), generation) for m in topics}
    return placement(StickyAssignor(), counts, members)


def moved(before: Placement, after: Placement) -> int:
    """Partitions taken from a member still in the group."""
    owner = {tp: member for member, partitions in before.items() if member in after for tp in partitions}
    return sum(
        1 for member, partitions in after.items() for tp in partitions if owner.get(tp, member) != member
    )


@pytest.mark.parametrize("same_topics", [True, False], ids=["same-topics", "mixed-topics"])
def test_sticky_moves_only_what_balance_needs_when_members_join_and_leave(same_topics: bool) -> None:
    rng = random.Random(31 + same_topics)
    counts = {"a": 7, "b": 5, "c": 4}
    choices = [("a", "b", "c")] if same_topics else [("a",), ("a", "b"), ("b", "c"), ("a", "b", "c")]
    topics = {f"m{index}": choices[index % len(choices)] for index in range(4)}
    current = rebalance_eager(counts, topics, {}, -1)
    for generation in range(1, 40):
        before = current
        leaving = rng.random() < 0.5 and len(topics) > 1
        if leaving:
            del topics[rng.choice(sorted(topics))]
        else:
            joining = f"n{generation}"
            topics[joining] = rng.choice(choices)
        current = rebalance_eager(counts, topics, current, generation)
        subscriptions = {m: Subscription(t) for m, t in topics.items()}
        check_valid(counts, subscriptions, current)
        loads = {member: len(partitions) for member, partitions in current.items()}
        for member in current:
            for other, other_partitions in current.items():
                if any(topic in topics[member] for topic, _ in other_partitions):
                    assert loads[other] <= loads[member] + 1
        if same_topics and leaving:
            # Only the leaver's partitions change hands.
            assert moved(before, current) == 0
        elif same_topics:
            # The newcomer's share is taken from others; nothing else moves.
            assert moved(before, current) == len(current[joining])
            assert max(loads.values()) - min(loads.values()) <= 1


# -- cooperative: the two-phase hand-over ----------------------------------------------------------


class CooperativeGroup:
    """Members following the cooperative protocol: they join owning what they hold, take what they are
    given, and give up what their assignment no longer lists."""

    def __init__(self, counts: Mapping[str, int]) -> None:
        self.counts = counts
        self.topics: dict[str, tuple[str, ...]] = {}
        self.owned: dict[str, tuple[TopicPartition, ...]] = {}
        self.generation = 0

    def rebalance(self) -> tuple[Placement, bool]:
        """One rebalance; returns the assignment and whether any member revoked (and so rejoins)."""
        self.generation += 1
        members = {m: owning(self.topics[m], self.owned.get(m, ()), self.generation - 1) for m in self.topics}
        result = placement(CooperativeStickyAssignor(), self.counts, members)
        holders = {tp: m for m, partitions in self.owned.items() if m in self.topics for tp in partitions}
        for member, partitions in result.items():
            for tp in partitions:
                assert holders.get(tp, member) == member, (
                    f"{tp} given to {member} while {holders[tp]} holds it"
                )
        revoked = any(set(self.owned.get(m, ())) - set(result[m]) for m in result)
        self.owned = dict(result)
        return result, revoked

    def settle(self) -> tuple[Placement, int]:
        rounds = 0
        while True:
            result, revoked = self.rebalance()
            rounds += 1
            if not revoked:
                return result, rounds
            assert rounds < 4, "the cooperative protocol settles in two rebalances"


def test_cooperative_join_revokes_first_and_hands_over_in_the_next_rebalance() -> None:
    group = CooperativeGroup({"t": 3})
    group.topics = {"c1": ("t",)}
    assert group.settle() == ({"c1": tps("t-0", "t-1", "t-2")}, 1)
    group.topics["c2"] = ("t",)
    first, revoked = group.rebalance()
    assert revoked
    assert first == {"c1": tps("t-0", "t-1"), "c2": ()}  # t-2 only revoked from c1
    second, revoked = group.rebalance()
    assert not revoked
    assert second == {"c1": tps("t-0", "t-1"), "c2": tps("t-2")}
    # The end result is the eager sticky one.
    assert second == placement(
        StickyAssignor(),
        {"t": 3},
        {"c1": sticky_member(("t",), tps("t-0", "t-1", "t-2"), 1), "c2": Subscription(("t",))},
    )


def test_cooperative_leave_reassigns_at_once() -> None:
    group = CooperativeGroup({"t": 4})
    group.topics = {"c1": ("t",), "c2": ("t",)}
    settled, _rounds = group.settle()
    del group.topics["c2"]
    result, revoked = group.rebalance()
    assert not revoked  # nobody else owned c2's partitions: no second round needed
    assert result == {"c1": tps("t-0", "t-1", "t-2", "t-3")}
    assert set(settled["c1"]) <= set(result["c1"])


def test_cooperative_random_membership_changes_never_double_assign_and_settle_in_two_rounds() -> None:
    rng = random.Random(47)
    group = CooperativeGroup({"a": 6, "b": 4, "c": 9})
    group.topics = {"m0": ("a", "b", "c")}
    group.settle()
    for step in range(40):
        if rng.random() < 0.4 and len(group.topics) > 1:
            del group.topics[rng.choice(sorted(group.topics))]
        else:
            group.topics[f"m{step + 1}"] = tuple(sorted(rng.sample(["a", "b", "c"], rng.randint(1, 3))))
        result, rounds = group.settle()
        assert rounds <= 2
        members = {m: Subscription(t) for m, t in group.topics.items()}
        check_valid(group.counts, members, result)


def test_sticky_user_data_from_kafka_python_members_drives_stickiness() -> None:
    # kafka-python sticky members send their previous assignment in user data (with its version prefix).
    def member(partitions: list[tuple[str, int]], generation: int) -> Subscription:
        metadata = StickyPartitionAssignor._metadata(
            ["t"], [KpTopicPartition(t, p) for t, p in partitions], generation
        )
        return decode_subscription(metadata.encode())

    members = {"kp-1": member([("t", 0), ("t", 1), ("t", 2), ("t", 3)], 2), "kp-2": member([], 2)}
    result = placement(StickyAssignor(), {"t": 4}, members)
    assert result == {"kp-1": tps("t-0", "t-1"), "kp-2": tps("t-2", "t-3")}
