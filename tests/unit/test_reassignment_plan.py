"""Partition reassignment decisions (backbone/broker/controller/reassignment_decisions.py): the recorded
state of a move, which targets are refused, the leader and ISR when a move ends or is cancelled, and the topic
znode changes."""

from __future__ import annotations

import pytest

from backbone.broker.controller.reassignment_decisions import (
    Ongoing,
    begin,
    check_target,
    concluded,
    ongoing,
    settle,
    started,
    with_partition,
)
from backbone.coordination import PartitionState, TopicAssignment

pytestmark = pytest.mark.unit


def state(leader: int, isr: tuple[int, ...]) -> PartitionState:
    return PartitionState(leader=leader, leader_epoch=5, isr=isr, controller_epoch=1)


def topic(**partitions: tuple[int, ...]) -> TopicAssignment:
    return TopicAssignment("t", {int(p[1:]): r for p, r in partitions.items()}, "id")


# -- the recorded state ------------------------------------------------------------------------------------


def test_a_move_lists_the_target_first_then_the_replicas_leaving() -> None:
    move = begin((1,), (2, 3))
    assert move == Ongoing(replicas=(2, 3, 1), adding=(2, 3), removing=(1,))
    assert move.target == (2, 3) and move.original == (1,)


def test_raising_the_replication_factor_only_adds() -> None:
    move = begin((2,), (2, 1, 3))
    assert move == Ongoing(replicas=(2, 1, 3), adding=(1, 3), removing=())
    assert move.original == (2,)


def test_a_partial_overlap_keeps_the_shared_replicas() -> None:
    move = begin((1, 2, 3), (3, 4, 5))
    assert move == Ongoing(replicas=(3, 4, 5, 1, 2), adding=(4, 5), removing=(1, 2))
    assert move.target == (3, 4, 5) and move.original == (3, 1, 2)


def test_a_new_order_is_no_move() -> None:
    assert begin((1, 2), (2, 1)) == Ongoing(replicas=(2, 1), adding=(), removing=())


# -- refused targets ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "words"),
    [
        ((), "empty"),
        ((1, 1), "twice"),
        ((1, -2), "negative"),
        ((1, 4), "[4] are not live"),
    ],
)
def test_invalid_targets_say_why(target: tuple[int, ...], words: str) -> None:
    problem = check_target(target, (1,), {1, 2, 3})
    assert problem is not None and words in problem


def test_only_brokers_that_would_start_copying_must_be_live() -> None:
    # Broker 3 is dead: moving its replica away is how an operator replaces it.
    assert check_target((1, 2), (1, 3), live={1, 2}) is None
    assert "[3] are not live" in (check_target((3, 2), (1, 2), live={1, 2}) or "")


# -- leader and ISR when a move ends -----------------------------------------------------------------------


def test_a_leader_that_stays_keeps_leading_and_the_isr_loses_the_replicas_leaving() -> None:
    assert settle((1, 4, 5), state(1, (1, 2, 3, 4, 5)), {1, 2, 3, 4, 5}) == (1, (1, 4, 5))


def test_a_leader_that_leaves_hands_over_to_the_first_target_replica_in_sync() -> None:
    assert settle((1, 4, 5), state(2, (2, 3, 4, 5, 1)), {1, 2, 3, 4, 5}) == (1, (4, 5, 1))
    assert settle((1, 4, 5), state(2, (2, 4, 5)), {2, 4, 5}) == (4, (4, 5))


def test_a_dead_replica_does_not_take_over() -> None:
    assert settle((4, 5), state(2, (2, 4, 5)), {2, 5}) == (5, (4, 5))


def test_nobody_kept_in_sync_and_live_means_no_settlement() -> None:
    assert settle((4, 5), state(2, (2, 4)), {2, 5}) is None
    assert settle((1, 2), state(-1, (1,)), {2}) is None


def test_cancelling_gives_leadership_back_to_an_original_replica() -> None:
    move = begin((1, 2, 3), (1, 4, 5))  # a failover made 4 the leader meanwhile
    assert settle(move.original, state(4, (1, 2, 3, 4)), {1, 2, 3, 4, 5}) == (1, (1, 2, 3))


# -- the topic znode ---------------------------------------------------------------------------------------


def test_starting_records_the_move_and_leaves_other_partitions_alone() -> None:
    changed = started({0: (2, 3)})(topic(p0=(1,), p1=(1,)))
    assert changed.partitions == {0: (2, 3, 1), 1: (1,)}
    assert changed.adding_replicas == {0: (2, 3)} and changed.removing_replicas == {0: (1,)}
    assert ongoing(changed, 0) == Ongoing((2, 3, 1), (2, 3), (1,)) and ongoing(changed, 1) is None


def test_a_new_target_for_a_moving_partition_starts_from_its_original_replicas() -> None:
    moving = started({0: (2, 3)})(topic(p0=(1,)))
    again = started({0: (3, 4)})(moving)
    assert ongoing(again, 0) == Ongoing((3, 4, 1), (3, 4), (1,))  # broker 2 is no longer involved
    back = started({0: (1,)})(moving)
    assert back.partitions == {0: (1,)} and ongoing(back, 0) is None


def test_a_target_equal_to_the_replicas_changes_nothing() -> None:
    assignment = topic(p0=(1, 2))
    assert started({0: (1, 2)})(assignment) == assignment


def test_concluding_writes_the_kept_replicas_only_for_the_move_it_saw() -> None:
    moving = started({0: (2, 3)})(topic(p0=(1,)))
    seen = ongoing(moving, 0)
    assert seen is not None
    done = concluded(0, seen, seen.target)(moving)
    assert done.partitions == {0: (2, 3)} and ongoing(done, 0) is None
    cancelled = concluded(0, seen, seen.original)(moving)
    assert cancelled.partitions == {0: (1,)} and ongoing(cancelled, 0) is None
    retargeted = started({0: (3,)})(moving)
    assert concluded(0, seen, seen.target)(retargeted) == retargeted  # another move now: left alone


def test_with_partition_keeps_the_topic_id_and_the_other_moves() -> None:
    moving = started({0: (2,), 1: (3,)})(topic(p0=(1,), p1=(1,)))
    done = with_partition(moving, 0, None, (2,))
    assert done.topic_id == "id"
    assert done.partitions == {0: (2,), 1: (3, 1)}
    assert done.adding_replicas == {1: (3,)} and done.removing_replicas == {1: (1,)}
