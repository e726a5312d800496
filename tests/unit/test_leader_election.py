"""Leader choices on demand (ElectLeaders), unclean failover and the automatic preferred-leader rebalance
(backbone/broker/controller/leader_decisions.py). Failover among in-sync replicas:
tests/unit/test_broker_liveness.py."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from backbone.broker.controller.leader_decisions import (
    PREFERRED,
    UNCLEAN,
    decide,
    elect_on_demand,
    imbalanced_partitions,
)
from backbone.coordination import PartitionState

REPLICAS = (1, 2, 3)


def state(leader: int, isr: tuple[int, ...], epoch: int = 5) -> PartitionState:
    return PartitionState(leader=leader, leader_epoch=epoch, isr=isr, controller_epoch=1)


def outcome(election_type: int, current: PartitionState, live: set[int]):
    decision, error = elect_on_demand(election_type, current, REPLICAS, live)
    return (None if decision is None else (decision.leader, decision.isr, decision.new_epoch)), error


# -- preferred elections ----------------------------------------------------------------------------------


def test_a_preferred_election_gives_leadership_back_to_the_first_replica_with_a_new_epoch() -> None:
    assert outcome(PREFERRED, state(2, (2, 3, 1)), {1, 2, 3}) == ((1, (2, 3, 1), True), ErrorCode.none)


def test_no_preferred_election_is_needed_when_the_first_replica_leads() -> None:
    assert outcome(PREFERRED, state(1, (1, 2, 3)), {1, 2, 3}) == (None, ErrorCode.election_not_needed)


@pytest.mark.parametrize(
    ("isr", "live"),
    [
        ((2, 3), {1, 2, 3}),  # back, but not caught up yet
        ((1, 2, 3), {2, 3}),  # in the ISR the controller last wrote, but dead or shutting down
        ((2, 3), {2, 3}),
    ],
)
def test_the_preferred_replica_must_be_live_and_in_sync(isr: tuple[int, ...], live: set[int]) -> None:
    assert outcome(PREFERRED, state(2, isr), live) == (None, ErrorCode.preferred_leader_not_available)


def test_a_preferred_election_drops_dead_replicas_from_the_isr() -> None:
    assert outcome(PREFERRED, state(2, (1, 2, 3)), {1, 2}) == ((1, (1, 2), True), ErrorCode.none)


def test_an_offline_partition_gets_its_preferred_replica_back_when_it_is_in_the_last_isr() -> None:
    assert outcome(PREFERRED, state(-1, (1,)), {1, 3}) == ((1, (1,), True), ErrorCode.none)


# -- unclean elections ------------------------------------------------------------------------------------


def test_an_unclean_election_is_not_needed_while_the_leader_is_live() -> None:
    assert outcome(UNCLEAN, state(2, (2,)), {1, 2, 3}) == (None, ErrorCode.election_not_needed)


def test_an_unclean_election_prefers_a_live_in_sync_replica() -> None:
    assert outcome(UNCLEAN, state(-1, (1, 3)), {2, 3}) == ((3, (3,), True), ErrorCode.none)


def test_an_unclean_election_gives_an_offline_partition_any_live_replica_and_a_new_isr() -> None:
    assert outcome(UNCLEAN, state(-1, (1,)), {3, 2}) == ((2, (2,), True), ErrorCode.none)


def test_an_unclean_election_fails_when_no_replica_is_live() -> None:
    assert outcome(UNCLEAN, state(-1, (1,)), {4}) == (None, ErrorCode.eligible_leaders_not_available)


def test_an_unknown_election_type_is_an_invalid_request() -> None:
    assert outcome(7, state(2, (2,)), {1, 2}) == (None, ErrorCode.invalid_request)


def test_failover_elects_an_out_of_sync_replica_only_when_unclean_elections_are_enabled() -> None:
    clean = decide(state(1, (1,)), REPLICAS, live={2, 3})
    assert clean is not None and (clean.leader, clean.isr) == (-1, (1,))
    unclean = decide(state(1, (1,)), REPLICAS, live={2, 3}, unclean=True)
    assert unclean is not None and (unclean.leader, unclean.isr, unclean.new_epoch) == (2, (2,), True)


def test_failover_picks_in_sync_replicas_in_assignment_order_so_the_preferred_one_wins() -> None:
    decision = decide(state(3, (3, 2, 1)), REPLICAS, live={1, 2})
    assert decision is not None and (decision.leader, decision.isr) == (1, (2, 1))


# -- automatic rebalancing --------------------------------------------------------------------------------


def cluster(leaders: dict[tuple[str, int], int], isr: tuple[int, ...] = (1, 2, 3)):
    """Partitions of topic t whose preferred replica is broker (partition % 3) + 1."""
    assignments = {}
    for key in leaders:
        first = key[1] % 3 + 1
        assignments[key] = (first, *(b for b in (1, 2, 3) if b != first))
    return {key: state(leader, isr) for key, leader in leaders.items()}, assignments


def test_a_broker_leading_too_few_of_its_preferred_partitions_gets_them_back() -> None:
    # Broker 1 is preferred for partitions 0 and 3 and leads neither: 100% > 10%.
    states, assignments = cluster({("t", 0): 2, ("t", 1): 2, ("t", 2): 3, ("t", 3): 3})
    assert imbalanced_partitions(states, assignments, {1, 2, 3}, 10) == [("t", 0), ("t", 3)]


def test_an_imbalance_at_or_under_the_threshold_is_tolerated() -> None:
    # Broker 1 is preferred for 0, 3, 6, 9 and leads all but partition 9: 25%.
    leaders = {("t", p): (p % 3) + 1 for p in range(12)}
    leaders[("t", 9)] = 2
    states, assignments = cluster(leaders)
    assert imbalanced_partitions(states, assignments, {1, 2, 3}, 25) == []
    assert imbalanced_partitions(states, assignments, {1, 2, 3}, 24) == [("t", 9)]


def test_brokers_that_are_not_live_are_not_rebalanced_to() -> None:
    states, assignments = cluster({("t", 0): 2, ("t", 1): 2, ("t", 2): 3})
    assert imbalanced_partitions(states, assignments, {2, 3}, 10) == []


def test_partitions_whose_preferred_replica_is_out_of_sync_stay_where_they_are() -> None:
    states, assignments = cluster({("t", 0): 2, ("t", 1): 2, ("t", 2): 3}, isr=(2, 3))
    assert imbalanced_partitions(states, assignments, {1, 2, 3}, 10) == []


def test_a_balanced_cluster_needs_nothing() -> None:
    states, assignments = cluster({("t", p): (p % 3) + 1 for p in range(6)})
    assert imbalanced_partitions(states, assignments, {1, 2, 3}, 0) == []
