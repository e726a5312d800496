"""Partition reassignment (KIP-455): the pure decisions; reassignment_work.py carries them out.

A reassignment of a partition from replicas O to a target T is recorded in the topic's znode:
replicas = T followed by what of O is not in T, adding = T - O, removing = O - T. The brokers in `adding`
see themselves assigned and start following the leader (replica_manager.py); the leader adds each to the
ISR once it has caught up. When every replica of T is in sync, the controller finishes: a new leader from T
if the current one is leaving, the ISR cut down to T, then replicas = T with no adding/removing, at which
point the brokers no longer assigned delete their copy. Cancelling finishes the same way towards O (the
replicas minus `adding`), at once, since O was in sync before. Everything lives in ZooKeeper, so a new
controller carries on where a dead one stopped; every write is fenced by the controller epoch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence, Set

from backbone.coordination import PartitionState, TopicAssignment
from backbone.wire.reassignment import PartitionReassignment as Ongoing


def begin(current: Sequence[int], target: Sequence[int]) -> Ongoing:
    """The recorded state of a reassignment from `current` to `target`."""
    replicas = (*target, *(r for r in current if r not in target))
    adding = tuple(r for r in target if r not in current)
    removing = tuple(r for r in current if r not in target)
    return Ongoing(replicas, adding, removing)


def check_target(target: Sequence[int], current: Sequence[int], live: Set[int]) -> str | None:
    """Why moving replicas `current` to `target` is invalid (INVALID_REPLICA_ASSIGNMENT), or None.

    Only the brokers that would start copying must be live, as in Kafka: a move away from a dead broker is
    how an operator replaces it.
    """
    if not target:
        return "the replica list is empty: name at least one broker"
    if len(set(target)) != len(target):
        return f"replicas {list(target)} name a broker twice"
    if any(r < 0 for r in target):
        return f"replicas {list(target)} include a negative broker id"
    down = sorted(r for r in set(target) - set(current) if r not in live)
    if down:
        return (
            f"brokers {down} are not live (not registered, unreachable or shutting down; live: "
            f"{sorted(live)}): start them first or choose live brokers"
        )
    return None


def settle(keep: Sequence[int], state: PartitionState, live: Set[int]) -> tuple[int, tuple[int, ...]] | None:
    """Leader and ISR once the replicas are cut down to `keep`; None when no kept replica could lead.

    The leader stays when it is kept and live; otherwise the first kept replica that is live and in sync
    takes over (assignment order, so the preferred one wins when it can).
    """
    isr = tuple(r for r in state.isr if r in keep)
    if state.leader in keep and state.leader in live:
        return state.leader, isr
    candidates = [r for r in keep if r in isr and r in live]
    if not candidates:
        return None
    return candidates[0], isr


def ongoing(assignment: TopicAssignment, partition: int) -> Ongoing | None:
    adding = tuple(assignment.adding_replicas.get(partition, ()))
    removing = tuple(assignment.removing_replicas.get(partition, ()))
    if not adding and not removing:
        return None
    return Ongoing(tuple(assignment.partitions[partition]), adding, removing)


def with_partition(
    assignment: TopicAssignment, partition: int, state: Ongoing | None, replicas: Sequence[int]
) -> TopicAssignment:
    """The assignment with one partition's replicas and reassignment state replaced."""
    partitions = dict(assignment.partitions)
    adding = dict(assignment.adding_replicas)
    removing = dict(assignment.removing_replicas)
    partitions[partition] = tuple(replicas)
    adding.pop(partition, None)
    removing.pop(partition, None)
    if state is not None:
        if state.adding:
            adding[partition] = state.adding
        if state.removing:
            removing[partition] = state.removing
    return TopicAssignment(assignment.topic, partitions, assignment.topic_id, adding, removing)


def started(changes: Mapping[int, Sequence[int]]) -> Callable[[TopicAssignment], TopicAssignment]:
    """The change recording new targets; a partition already moving keeps its original replicas (O)."""

    def change(assignment: TopicAssignment) -> TopicAssignment:
        for partition, target in changes.items():
            state = ongoing(assignment, partition)
            new = begin(state.original if state is not None else assignment.partitions[partition], target)
            moving = new if new.adding or new.removing else None
            assignment = with_partition(assignment, partition, moving, new.replicas)
        return assignment

    return change


def concluded(
    partition: int, seen: Ongoing, keep: Sequence[int]
) -> Callable[[TopicAssignment], TopicAssignment]:
    """The change ending a reassignment with replicas `keep`, unless it is no longer the one `seen`."""

    def change(assignment: TopicAssignment) -> TopicAssignment:
        if ongoing(assignment, partition) != seen:
            return assignment
        return with_partition(assignment, partition, None, keep)

    return change
