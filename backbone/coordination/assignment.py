"""Replica assignment for new topics and partitions: Kafka's AdminUtils.assignReplicasToBrokers.

Pure functions. Goals, as in Kafka:
1. Spread replicas evenly over the brokers.
2. Give each replica of a partition to a different broker (and, with racks, a different rack while
   there are racks without one).
3. Shift the followers so partitions led by one broker have their followers spread over the others.

Without racks: partition p's leader is broker (p + start) mod n in id order; its followers follow at a
distance that grows by one every n partitions. With racks the brokers are first interleaved by rack
(r1-b, r2-b, r3-b, r1-b...) and a follower is skipped if its rack (or the broker) already has a
replica while another rack (or broker) has none.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from backbone.protocol.errors import (
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
)

__all__ = [
    "BrokerPlacement",
    "assign_replicas",
    "expansion_start_index",
    "rack_alternated_brokers",
    "validate_assignment",
]


@dataclass(frozen=True)
class BrokerPlacement:
    """What placement needs to know about a broker: its id and its rack (None when unset)."""

    broker_id: int
    rack: str | None = None


def _replica_index(first_index: int, shift: int, replica: int, broker_count: int) -> int:
    step = 1 + (shift + replica) % (broker_count - 1)
    return (first_index + step) % broker_count


def rack_alternated_brokers(racks: Mapping[int, str]) -> list[int]:
    """Broker ids interleaved by rack: racks in name order, brokers in id order within a rack."""
    by_rack: dict[str, list[int]] = {}
    for broker_id in sorted(racks):
        by_rack.setdefault(racks[broker_id], []).append(broker_id)
    columns = [by_rack[rack] for rack in sorted(by_rack)]
    depth = max((len(column) for column in columns), default=0)
    return [column[row] for row in range(depth) for column in columns if row < len(column)]


def assign_replicas(
    brokers: Iterable[BrokerPlacement],
    partitions: int,
    replication_factor: int,
    *,
    start_index: int | None = None,
    start_partition: int = 0,
    ignore_racks: bool = False,
    rng: random.Random | None = None,
) -> dict[int, list[int]]:
    """Partition id -> replica broker ids (first is the preferred leader).

    `start_index` fixes where the round-robin starts (Kafka's fixedStartIndex; random when None, so
    leaders of many small topics do not all land on the lowest broker id). `start_partition` numbers
    the partitions from that id, for CreatePartitions. Racks are used when every broker has one;
    some brokers with a rack and some without is an error unless `ignore_racks` is set.
    """
    placements = sorted(brokers, key=lambda b: b.broker_id)
    if partitions <= 0:
        raise InvalidPartitionsError("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise InvalidReplicationFactorError("Replication factor must be larger than 0.")
    if replication_factor > len(placements):
        raise InvalidReplicationFactorError(
            f"Replication factor: {replication_factor} larger than available brokers: {len(placements)}."
        )
    racked = [b for b in placements if b.rack is not None]
    positions = _leader_positions(
        len(placements), partitions, start_index, start_partition, rng or random.Random()
    )
    if ignore_racks or not racked:
        return _assign_rack_unaware([b.broker_id for b in placements], replication_factor, positions)
    if len(racked) != len(placements):
        missing = sorted(b.broker_id for b in placements if b.rack is None)
        raise InvalidReplicaAssignmentError(
            f"Not all brokers have rack information for replica rack aware assignment "
            f"(brokers without broker.rack: {missing}); set broker.rack on every broker or on none"
        )
    racks = {b.broker_id: b.rack for b in racked if b.rack is not None}
    return _assign_rack_aware(racks, replication_factor, positions)


def _leader_positions(
    count: int, partitions: int, start_index: int | None, start_partition: int, rng: random.Random
) -> Iterator[tuple[int, int, int]]:
    """(partition, leader position, follower shift) for each new partition, Kafka's round-robin.

    The leader walks the broker list one step per partition; the followers' shift grows by one each
    time the leader wraps around, so a broker's partitions get different followers.
    """
    fixed = start_index is not None and start_index >= 0
    start = start_index if fixed and start_index is not None else rng.randrange(count)
    shift = start_index if fixed and start_index is not None else rng.randrange(count)
    for partition in range(max(0, start_partition), max(0, start_partition) + partitions):
        if partition > 0 and partition % count == 0:
            shift += 1
        yield partition, (partition + start) % count, shift


def _assign_rack_unaware(
    broker_ids: Sequence[int], replication_factor: int, positions: Iterator[tuple[int, int, int]]
) -> dict[int, list[int]]:
    count = len(broker_ids)
    result: dict[int, list[int]] = {}
    for partition, first, shift in positions:
        followers = [
            broker_ids[_replica_index(first, shift, j, count)] for j in range(replication_factor - 1)
        ]
        result[partition] = [broker_ids[first], *followers]
    return result


def _assign_rack_aware(
    racks: Mapping[int, str], replication_factor: int, positions: Iterator[tuple[int, int, int]]
) -> dict[int, list[int]]:
    """Like rack-unaware, but over the rack-interleaved broker list, skipping followers whose rack
    (or broker) already holds a replica while another rack (or broker) holds none."""
    arranged = rack_alternated_brokers(racks)
    count = len(arranged)
    rack_count = len(set(racks.values()))
    result: dict[int, list[int]] = {}
    for partition, first, shift in positions:
        leader = arranged[first]
        replicas = [leader]
        racks_used = {racks[leader]}
        brokers_used = {leader}
        k = 0
        for _ in range(replication_factor - 1):
            # Each pass over the arranged list visits every broker once (the steps 1..count-1 cover all
            # other positions), and a broker without a replica always qualifies in the end, so this loop
            # ends within `count` steps; the bound makes that explicit.
            for _attempt in range(count * count):
                broker = arranged[_replica_index(first, shift * rack_count, k, count)]
                rack = racks[broker]
                k += 1
                rack_ok = rack not in racks_used or len(racks_used) == rack_count
                broker_ok = broker not in brokers_used or len(brokers_used) == count
                if rack_ok and broker_ok:
                    replicas.append(broker)
                    racks_used.add(rack)
                    brokers_used.add(broker)
                    break
            else:  # pragma: no cover - unreachable by the argument above
                raise InvalidReplicaAssignmentError(f"could not place replica for partition {partition}")
        result[partition] = replicas
    return result


def expansion_start_index(broker_ids: Sequence[int], partition_zero_replicas: Sequence[int]) -> int:
    """Where CreatePartitions starts the round-robin: at the first broker of partition 0's replicas.

    As Kafka's AdminZkClient.createPartitions: the index of the first broker id >= that leader.
    """
    ordered = sorted(broker_ids)
    leader = partition_zero_replicas[0]
    return next((i for i, broker_id in enumerate(ordered) if broker_id >= leader), 0)


def validate_assignment(
    assignment: Mapping[int, Sequence[int]],
    live_brokers: Iterable[int],
    *,
    first_partition: int = 0,
    replication_factor: int | None = None,
) -> None:
    """Check a manual assignment as Kafka's CreateTopics/CreatePartitions do.

    Partition ids must run without gaps from `first_partition`, each replica list must be non-empty
    with distinct, registered brokers, and all lists must have one length (or `replication_factor`).
    """
    if not assignment:
        raise InvalidReplicaAssignmentError("The replica assignment is empty.")
    expected_ids = list(range(first_partition, first_partition + len(assignment)))
    if sorted(assignment) != expected_ids:
        raise InvalidReplicaAssignmentError(
            f"Partitions must be numbered consecutively from {first_partition}, got {sorted(assignment)}."
        )
    live = set(live_brokers)
    lengths = {len(replicas) for replicas in assignment.values()}
    for partition, replicas in sorted(assignment.items()):
        if not replicas:
            raise InvalidReplicaAssignmentError(f"Partition {partition} has no replicas.")
        if len(set(replicas)) != len(replicas):
            raise InvalidReplicaAssignmentError(
                f"Duplicate brokers in the replicas of partition {partition}: {replicas}"
            )
        unknown = sorted(set(replicas) - live)
        if unknown:
            raise InvalidReplicaAssignmentError(
                f"Unknown broker(s) {unknown} in the replicas of partition {partition}; "
                f"registered brokers: {sorted(live)}"
            )
    if len(lengths) > 1:
        raise InvalidReplicaAssignmentError("All partitions should have the same number of replicas.")
    if replication_factor is not None and lengths != {replication_factor}:
        raise InvalidReplicaAssignmentError(
            f"Replica lists have {lengths.pop()} replicas, "
            f"the topic's replication factor is {replication_factor}."
        )
