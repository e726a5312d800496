"""Replica assignment (Kafka's AdminUtils): Kafka's own expected outputs, then exhaustive invariants."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping

import pytest

from backbone.coordination.assignment import (
    BrokerPlacement,
    assign_replicas,
    expansion_start_index,
    rack_alternated_brokers,
    validate_assignment,
)
from backbone.protocol.errors import (
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
)

pytestmark = pytest.mark.unit

RACK_LAYOUTS: dict[str, dict[int, str]] = {
    "two racks of two": {0: "a", 1: "a", 2: "b", 3: "b"},
    "three racks of two": {0: "a", 1: "b", 2: "c", 3: "a", 4: "b", 5: "c"},
    "two racks of three": {i: "ab"[i % 2] for i in range(6)},
    "kafka's test layout": {0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack1"},
    "uneven racks": {0: "a", 1: "a", 2: "a", 3: "b", 4: "c", 5: "c"},
    "one rack": {0: "a", 1: "a", 2: "a"},
    "sparse ids": {6: "rack1", 7: "rack2", 8: "rack2", 9: "rack3", 10: "rack3", 11: "rack1"},
}
EVEN_RACKS = {
    "two racks of two",
    "three racks of two",
    "two racks of three",
    "kafka's test layout",
    "one rack",
}


def placements(racks: Mapping[int, str | None]) -> list[BrokerPlacement]:
    return [BrokerPlacement(broker_id, rack) for broker_id, rack in racks.items()]


def unracked(count: int, first_id: int = 0) -> list[BrokerPlacement]:
    return [BrokerPlacement(first_id + i) for i in range(count)]


def check_basic(
    assignment: dict[int, list[int]], brokers: set[int], partitions: int, rf: int, first: int
) -> None:
    assert sorted(assignment) == list(range(first, first + partitions))
    for replicas in assignment.values():
        assert len(replicas) == rf and len(set(replicas)) == rf and set(replicas) <= brokers


def leader_spread(assignment: dict[int, list[int]], brokers: set[int]) -> int:
    leaders = Counter(replicas[0] for replicas in assignment.values())
    return max(leaders.values()) - min(leaders.get(b, 0) for b in brokers)


# -- Kafka's own expected outputs (AdminRackAwareTest) ----------------------------------------------


def test_matches_kafka_rack_unaware_expected_assignment() -> None:
    assert assign_replicas(unracked(5), 10, 3, start_index=0) == {
        0: [0, 1, 2],
        1: [1, 2, 3],
        2: [2, 3, 4],
        3: [3, 4, 0],
        4: [4, 0, 1],
        5: [0, 2, 3],
        6: [1, 3, 4],
        7: [2, 4, 0],
        8: [3, 0, 1],
        9: [4, 1, 2],
    }


def test_matches_kafka_rack_alternated_list_and_rack_aware_assignment() -> None:
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated_brokers(racks) == [0, 3, 1, 5, 4, 2]
    assert rack_alternated_brokers({k: v for k, v in racks.items() if k != 5}) == [0, 3, 1, 4, 2]
    assert assign_replicas(placements(racks), 7, 3, start_index=0) == {
        0: [0, 3, 1],
        1: [3, 1, 5],
        2: [1, 5, 4],
        3: [5, 4, 2],
        4: [4, 2, 0],
        5: [2, 0, 3],
        6: [0, 4, 2],
    }


# -- exhaustive invariants ----------------------------------------------------------------------


@pytest.mark.parametrize("broker_count", range(1, 9))
def test_rack_unaware_every_shape_is_distinct_and_balanced(broker_count: int) -> None:
    brokers = unracked(broker_count, first_id=100)
    ids = {b.broker_id for b in brokers}
    for rf in range(1, min(broker_count, 4) + 1):
        for partitions in range(1, 3 * broker_count + 1):
            for start in range(broker_count):
                assignment = assign_replicas(brokers, partitions, rf, start_index=start)
                check_basic(assignment, ids, partitions, rf, first=0)
                assert leader_spread(assignment, ids) <= 1
                if partitions % broker_count == 0:
                    counts = Counter(r for replicas in assignment.values() for r in replicas)
                    assert set(counts.values()) == {partitions * rf // broker_count}, assignment
                    assert leader_spread(assignment, ids) == 0


@pytest.mark.parametrize("layout", sorted(RACK_LAYOUTS))
def test_rack_aware_every_shape_spreads_over_racks(layout: str) -> None:
    racks = RACK_LAYOUTS[layout]
    ids, rack_count = set(racks), len(set(racks.values()))
    for rf in range(1, min(len(racks), 4) + 1):
        for partitions in range(1, 3 * len(racks) + 1):
            for start in range(len(racks)):
                assignment = assign_replicas(placements(racks), partitions, rf, start_index=start)
                check_basic(assignment, ids, partitions, rf, first=0)
                assert leader_spread(assignment, ids) <= 1
                for replicas in assignment.values():
                    # No two replicas share a rack while some rack has none.
                    assert len({racks[r] for r in replicas}) == min(rf, rack_count), (layout, assignment)
                if layout in EVEN_RACKS and partitions % len(racks) == 0:
                    counts = Counter(r for replicas in assignment.values() for r in replicas)
                    assert set(counts.values()) == {partitions * rf // len(racks)}, (layout, assignment)


def test_random_start_is_valid_and_varies() -> None:
    rng = random.Random(7)
    brokers = unracked(5)
    leaders_of_partition_zero = set()
    for _ in range(200):
        assignment = assign_replicas(brokers, 10, 3, rng=rng)
        check_basic(assignment, set(range(5)), 10, 3, first=0)
        assert leader_spread(assignment, set(range(5))) == 0
        leaders_of_partition_zero.add(assignment[0][0])
    assert leaders_of_partition_zero == set(range(5))


def test_start_partition_numbers_new_partitions_for_expansion() -> None:
    racks = RACK_LAYOUTS["sparse ids"]
    assignment = assign_replicas(placements(racks), 12, 2, start_index=0, start_partition=12)
    check_basic(assignment, set(racks), 12, 2, first=12)
    assert leader_spread(assignment, set(racks)) == 0
    assert all(racks[a] != racks[b] for a, b in assignment.values())


def test_expansion_starts_at_partition_zeros_leader() -> None:
    assert expansion_start_index([1, 2, 3], [2, 3]) == 1
    assert expansion_start_index([3, 1, 2], [1, 2]) == 0
    assert expansion_start_index([1, 3, 5], [4, 1]) == 2  # leader gone: the next id up
    assert expansion_start_index([1, 2], [9, 1]) == 0  # nothing above: wrap to the start


# -- errors -------------------------------------------------------------------------------------


def test_bad_counts_raise_kafka_errors() -> None:
    with pytest.raises(InvalidReplicationFactorError, match="larger than 0"):
        assign_replicas(unracked(3), 1, 0)
    with pytest.raises(
        InvalidReplicationFactorError, match=r"Replication factor: 4 larger than available brokers: 3\."
    ):
        assign_replicas(unracked(3), 1, 4)
    with pytest.raises(InvalidPartitionsError, match="larger than 0"):
        assign_replicas(unracked(3), 0, 1)
    with pytest.raises(InvalidReplicationFactorError):
        assign_replicas([], 1, 1)


def test_some_brokers_without_rack_is_an_error_unless_racks_are_ignored() -> None:
    mixed = [BrokerPlacement(0, "a"), BrokerPlacement(1, None), BrokerPlacement(2, "b")]
    with pytest.raises(InvalidReplicaAssignmentError, match=r"without broker.rack: \[1\]"):
        assign_replicas(mixed, 3, 2)
    assignment = assign_replicas(mixed, 3, 2, ignore_racks=True, start_index=0)
    assert assignment == assign_replicas(unracked(3), 3, 2, start_index=0)


def test_validate_assignment_accepts_a_good_one() -> None:
    validate_assignment({0: [1, 2], 1: [2, 3]}, [1, 2, 3])
    validate_assignment({3: [1], 4: [2]}, [1, 2], first_partition=3, replication_factor=1)


@pytest.mark.parametrize(
    ("assignment", "options", "message"),
    [
        ({}, {}, "empty"),
        ({0: [1], 2: [2]}, {}, "consecutively"),
        ({0: []}, {}, "no replicas"),
        ({0: [1, 1]}, {}, "Duplicate brokers"),
        ({0: [1, 9]}, {}, r"Unknown broker\(s\) \[9\]"),
        ({0: [1, 2], 1: [1]}, {}, "same number of replicas"),
        ({3: [1]}, {"first_partition": 3, "replication_factor": 2}, "replication factor is 2"),
    ],
)
def test_validate_assignment_rejects(
    assignment: dict[int, list[int]], options: dict[str, int], message: str
) -> None:
    with pytest.raises(InvalidReplicaAssignmentError, match=message):
        validate_assignment(assignment, [1, 2, 3], **options)
