"""Liveness verdicts (backbone/broker/controller/liveness.py) and what the controller does with dead and
stopping brokers (backbone/broker/controller/leader_decisions.py `decide`)."""

from __future__ import annotations

import pytest

from backbone.broker.controller.leader_decisions import decide
from backbone.broker.controller.liveness import Outcome, judge
from backbone.coordination import PartitionState

TIMEOUT = 3.0


def verdict(outcome: Outcome, *, in_grace=False, silent_s=0.0, others_answer=True) -> bool | None:
    return judge(
        outcome, in_grace=in_grace, silent_s=silent_s, timeout_s=TIMEOUT, others_answer=others_answer
    )[0]


def test_an_answer_makes_a_broker_reachable_whatever_came_before() -> None:
    assert verdict(Outcome.ANSWERED, silent_s=100.0) is True


def test_a_refused_connection_is_conclusive_at_once() -> None:
    assert verdict(Outcome.REFUSED, silent_s=0.5) is False
    assert verdict(Outcome.REFUSED, silent_s=0.5, others_answer=False) is False


def test_a_refusal_just_after_registering_is_not_held_against_the_broker() -> None:
    # It registers a moment before its listeners serve.
    assert verdict(Outcome.REFUSED, in_grace=True, silent_s=0.5) is None


def test_silence_counts_only_after_the_timeout() -> None:
    assert verdict(Outcome.FAILED, silent_s=TIMEOUT - 0.1) is None
    assert verdict(Outcome.FAILED, silent_s=TIMEOUT) is False


def test_a_prober_that_hears_from_nobody_suspects_itself() -> None:
    assert verdict(Outcome.FAILED, silent_s=10 * TIMEOUT, others_answer=False) is None


def test_every_verdict_says_why() -> None:
    assert judge(Outcome.REFUSED, in_grace=False, silent_s=0, timeout_s=1, others_answer=True)[1]
    assert (
        "no answer for 4.0s"
        in judge(Outcome.FAILED, in_grace=False, silent_s=4, timeout_s=1, others_answer=True)[1]
    )


def state(leader: int, isr: tuple[int, ...], epoch: int = 5) -> PartitionState:
    return PartitionState(leader=leader, leader_epoch=epoch, isr=isr, controller_epoch=1)


REPLICAS = (1, 2, 3)


def test_a_dead_follower_leaves_the_isr_without_a_new_leader_epoch() -> None:
    decision = decide(state(1, (1, 2, 3)), REPLICAS, live={1, 2})
    assert decision is not None
    assert (decision.leader, decision.isr, decision.new_epoch) == (1, (1, 2), False)


def test_nothing_changes_while_every_isr_member_is_live() -> None:
    assert decide(state(1, (1, 2)), REPLICAS, live={1, 2, 3}) is None


def test_a_dead_leader_is_replaced_by_the_next_live_in_sync_replica() -> None:
    decision = decide(state(1, (1, 2, 3)), REPLICAS, live={2, 3})
    assert decision is not None
    assert (decision.leader, decision.isr, decision.new_epoch) == (2, (2, 3), True)


def test_a_partition_nobody_in_sync_can_lead_goes_offline_keeping_its_last_isr() -> None:
    decision = decide(state(1, (1, 2)), REPLICAS, live={3})
    assert decision is not None
    assert (decision.leader, decision.isr) == (-1, (1, 2))
    assert decide(state(-1, (1, 2)), REPLICAS, live={3}) is None


@pytest.mark.parametrize("alone", [False, True])
def test_a_leader_in_controlled_shutdown_hands_over_only_to_a_live_in_sync_replica(alone: bool) -> None:
    isr = (1,) if alone else (1, 2, 3)
    decision = decide(state(1, isr), REPLICAS, live={2, 3}, shutting_down={1})
    if alone:
        assert decision is None  # it keeps leading until it stops
    else:
        assert decision is not None
        assert (decision.leader, decision.isr, decision.new_epoch) == (2, (2, 3), True)


def test_a_follower_in_controlled_shutdown_leaves_the_isr() -> None:
    decision = decide(state(1, (1, 2, 3)), REPLICAS, live={1, 2}, shutting_down={3})
    assert decision is not None
    assert (decision.leader, decision.isr, decision.new_epoch) == (1, (1, 2), False)
