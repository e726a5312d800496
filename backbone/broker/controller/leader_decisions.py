"""Choosing partition leaders: pure decisions the controller writes to ZooKeeper.

Kafka's rules: a new leader comes from the in-sync replicas, in assignment order (so the preferred
replica wins when it can); an out-of-sync replica only with `unclean.leader.election.enable`, and then the
ISR restarts with it alone. A partition nobody can lead goes offline (leader -1) keeping its last ISR,
which names who must come back. A leader in controlled shutdown hands over when another in-sync replica is
live, and otherwise keeps leading until it stops.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from backbone.coordination import PartitionState


@dataclass(frozen=True)
class Decision:
    leader: int
    isr: tuple[int, ...]
    new_epoch: bool  # a new leader (or none) gets a new leader epoch; an ISR-only change keeps it


def decide(
    state: PartitionState,
    replicas: Sequence[int],
    live: Set[int],
    *,
    shutting_down: Set[int] = frozenset(),
    unclean: bool = False,
) -> Decision | None:
    """The partition's next leader and ISR given which brokers are `live`; None when nothing changes.

    `live` excludes brokers that are dead, unreachable or in controlled shutdown.
    """
    live_isr = tuple(r for r in state.isr if r in live)
    if state.leader in live:
        if live_isr != tuple(state.isr):
            return Decision(state.leader, live_isr, new_epoch=False)  # dead followers leave the ISR
        return None
    in_sync = [r for r in replicas if r in live_isr]
    if in_sync:
        return Decision(in_sync[0], live_isr, new_epoch=True)
    if state.leader in shutting_down:
        return None  # nobody else is in sync: it keeps leading until it stops
    if unclean:
        candidates = [r for r in replicas if r in live]
        if candidates:
            return Decision(candidates[0], (candidates[0],), new_epoch=True)  # a new history starts
    if state.leader < 0:
        return None
    return Decision(-1, tuple(state.isr), new_epoch=True)


def preferred_leader(replicas: Sequence[int]) -> int:
    return replicas[0] if replicas else -1


PREFERRED = 0
UNCLEAN = 1


def elect_on_demand(
    election_type: int, state: PartitionState, replicas: Sequence[int], live: Set[int]
) -> tuple[Decision | None, ErrorCode]:
    """ElectLeaders for one partition: the decision to write, or why there is none (Kafka's error codes)."""
    live_isr = tuple(r for r in state.isr if r in live)
    if election_type == PREFERRED:
        preferred = preferred_leader(replicas)
        if state.leader == preferred:
            return None, ErrorCode.election_not_needed
        if preferred in live_isr:
            return Decision(preferred, live_isr, new_epoch=True), ErrorCode.none
        return None, ErrorCode.preferred_leader_not_available
    if election_type == UNCLEAN:
        if state.leader in live:
            return None, ErrorCode.election_not_needed
        decision = decide(state, replicas, live, unclean=True)
        if decision is None or decision.leader < 0:
            return None, ErrorCode.eligible_leaders_not_available
        return decision, ErrorCode.none
    return None, ErrorCode.invalid_request


def imbalanced_partitions(
    states: Mapping[tuple[str, int], PartitionState],
    assignments: Mapping[tuple[str, int], Sequence[int]],
    live: Set[int],
    percentage: int,
) -> list[tuple[str, int]]:
    """Partitions to hand back to their preferred leaders: those of every live broker whose share of
    preferred-but-not-led partitions is above `percentage` (leader.imbalance.per.broker.percentage), and
    whose preferred replica is live and in sync."""
    preferred_of: dict[int, list[tuple[str, int]]] = {}
    for key, replicas in assignments.items():
        if replicas and key in states:
            preferred_of.setdefault(replicas[0], []).append(key)
    chosen = []
    for broker, keys in preferred_of.items():
        if broker not in live:
            continue
        not_led = [k for k in keys if states[k].leader != broker]
        if not_led and len(not_led) * 100 > percentage * len(keys):
            chosen += [k for k in not_led if broker in states[k].isr]
    return sorted(chosen)
