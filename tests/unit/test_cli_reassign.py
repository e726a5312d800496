"""`backbone topics reassign` without a cluster: Kafka's plan files, proposals for --generate and the
progress lines (backbone/cli/reassign.py)."""

from __future__ import annotations

import json

import pytest

from backbone.cli import UsageError
from backbone.cli.reassign import (
    parse_broker_list,
    plan_json,
    progress_line,
    propose,
    read_plan,
    read_topics_to_move,
)
from backbone.client import BrokerInfo, PartitionReassignment, TopicPartition

pytestmark = pytest.mark.unit

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


def plan_text(*entries: dict) -> str:
    return json.dumps({"version": 1, "partitions": list(entries)})


# -- plan files --------------------------------------------------------------------------------------------


def test_a_kafka_plan_is_read_and_written_back_the_same() -> None:
    text = plan_text(
        {"topic": "t", "partition": 0, "replicas": [2, 3], "log_dirs": ["any", "any"]},
        {"topic": "t", "partition": 1, "replicas": [3]},
    )
    plan = read_plan(text, "plan.json")
    assert plan == {T0: (2, 3), T1: (3,)}
    assert read_plan(plan_json(plan), "again") == plan
    assert json.loads(plan_json(plan))["partitions"][0] == {
        "topic": "t",
        "partition": 0,
        "replicas": [2, 3],
        "log_dirs": ["any", "any"],
    }


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("not json", "must hold"),
        ('{"version": 1}', "must hold"),
        (plan_text(), "lists no partitions"),
        (plan_text({"topic": "t", "partition": "0", "replicas": [1]}), "expected an integer"),
        (plan_text({"topic": "t", "partition": 0, "replicas": [True]}), "expected an integer"),
        (plan_text({"topic": 7, "partition": 0, "replicas": [1]}), "expected a string"),
        (plan_text(*[{"topic": "t", "partition": 0, "replicas": [1]}] * 2), "lists t-0 twice"),
        (plan_text({"topic": "t", "partition": 0, "replicas": [1], "log_dirs": ["/d"]}), "not supported"),
    ],
)
def test_a_bad_plan_is_a_usage_error_naming_the_file(text: str, words: str) -> None:
    with pytest.raises(UsageError) as caught:
        read_plan(text, "plan.json")
    assert "plan.json" in str(caught.value) and words in str(caught.value)


def test_topics_to_move_and_broker_lists() -> None:
    assert read_topics_to_move('{"version": 1, "topics": [{"topic": "b"}, {"topic": "a"}]}', "f") == [
        "a",
        "b",
    ]
    with pytest.raises(UsageError, match="lists no topics"):
        read_topics_to_move('{"topics": []}', "f")
    with pytest.raises(UsageError, match="must hold"):
        read_topics_to_move('{"topics": ["a"]}', "f")
    assert parse_broker_list("3,1,2", "--broker-list") == (3, 1, 2)
    with pytest.raises(UsageError, match="separated by commas"):
        parse_broker_list("1;2", "--broker-list")
    with pytest.raises(UsageError, match="twice"):
        parse_broker_list("1,1", "--broker-list")


# -- --generate --------------------------------------------------------------------------------------------


def test_a_proposal_keeps_partition_counts_and_replication_factors_on_the_listed_brokers() -> None:
    current = {TopicPartition("a", p): (1, 2) for p in range(4)} | {TopicPartition("b", 0): (1,)}
    proposal = propose(current, [BrokerInfo(b, "h", 1) for b in (3, 4, 5)])
    assert set(proposal) == set(current)
    for tp, replicas in proposal.items():
        assert len(replicas) == len(current[tp]) and len(set(replicas)) == len(replicas)
        assert set(replicas) <= {3, 4, 5}
    leaders = [proposal[TopicPartition("a", p)][0] for p in range(4)]
    assert len(set(leaders)) == 3  # round-robin: leaders spread over the brokers


def test_a_proposal_places_replicas_on_different_racks() -> None:
    brokers = [BrokerInfo(1, "h", 1, "r1"), BrokerInfo(2, "h", 1, "r1"), BrokerInfo(3, "h", 1, "r2")]
    proposal = propose({TopicPartition("a", p): (1, 2) for p in range(6)}, brokers)
    racks = {1: "r1", 2: "r1", 3: "r2"}
    assert all(len({racks[r] for r in replicas}) == 2 for replicas in proposal.values())


# -- progress ----------------------------------------------------------------------------------------------


MOVE = PartitionReassignment(replicas=(3, 2, 1), adding=(3, 2), removing=(1,))


def test_progress_compares_each_new_replica_with_the_leader() -> None:
    line = progress_line(T0, MOVE, 1, {1: {T0: 4000}, 2: {T0: 1000}, 3: {}})
    assert line == (
        "t-0: in progress: replicas [3, 2, 1], adding [3, 2], removing [1]; leader 1 holds 4,000 bytes; "
        "broker 3 has 0% (0 bytes), broker 2 has 25% (1,000 bytes)"
    )


def test_progress_names_brokers_that_do_not_answer_and_a_missing_leader() -> None:
    assert progress_line(T0, MOVE, 1, {1: {T0: 10}, 2: None, 3: {T0: 10}}).endswith(
        "broker 3 has 100% (10 bytes), broker 2 unreachable"
    )
    assert progress_line(T0, MOVE, 1, {1: None}).endswith("leader 1 is unreachable")
    assert progress_line(T0, MOVE, -1, {}).endswith("no leader right now, nothing is copied")
    shrink = PartitionReassignment(replicas=(1, 2), adding=(), removing=(2,))
    assert progress_line(T0, shrink, 1, {1: {T0: 0}}).endswith("leader 1 holds 0 bytes; nothing to copy")
