"""Partition reassignment: replicas move to other brokers (the data copied byte for byte, the old copy
deleted), the replication factor goes up, a move can be cancelled, bad plans are refused, and a move
survives the controller's death; the CLI generates, executes, verifies and cancels plans, with progress.

A broker that must not copy yet is paused (SIGSTOP): it stays registered and, with a long
`broker.liveness.timeout.ms`, counts as live, so a move to it is accepted but cannot finish.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from cli_support import run, spawn

from backbone.broker.controller.reassignment_decisions import started
from backbone.client import Admin, NewTopic, Producer, TopicPartition
from backbone.protocol.errors import (
    InvalidReplicaAssignmentError,
    NoReassignmentInProgressError,
    NotControllerError,
    UnknownTopicOrPartitionError,
)
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.integration

TOPIC = "moving"
TP = TopicPartition(TOPIC, 0)
PATIENT = {"broker_liveness_timeout_ms": 60_000}  # a paused broker stays live


def cluster(broker_factory, replicas, records: int = 2000, cluster_store=None, **props):
    """Three brokers and a topic on `replicas` (or on `replicas(controller id)`), with records in it."""
    brokers = [broker_factory(i, **props) for i in (1, 2, 3)]
    bootstrap = ",".join(b.bootstrap for b in brokers)
    if callable(replicas):
        replicas = replicas(controller_of(cluster_store))
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic(TOPIC, replica_assignment={0: replicas})])
    with Producer(bootstrap_servers=bootstrap, acks="all") as producer:
        for i in range(records):
            producer.send(TOPIC, value=b"record %d" % i, partition=0)
        producer.flush()
    return brokers, bootstrap


def controller_of(cluster_store) -> int:
    wait_until(lambda: cluster_store.get_controller() is not None, timeout=30, what="a controller")
    return cluster_store.get_controller().broker_id


def others(controller: int) -> list[int]:
    """The two brokers that are not the controller, highest first."""
    return sorted({1, 2, 3} - {controller}, reverse=True)


@contextmanager
def paused(broker) -> Iterator[None]:
    os.kill(broker.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(broker.pid, signal.SIGCONT)


def log_bytes(broker) -> bytes | None:
    directory = broker.directory / "logs" / f"{TOPIC}-0"
    if not directory.exists():
        return None
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))


def test_a_partition_moves_to_other_brokers(broker_factory, cluster_store, wait_for) -> None:
    brokers, bootstrap = cluster(broker_factory, [1])
    original = log_bytes(brokers[0])
    assert original
    with Admin(bootstrap_servers=bootstrap) as admin:
        assert admin.alter_partition_reassignments({TP: [2, 3]}) == {TP: None}
        wait_for(lambda: cluster_store.get_topic(TOPIC).partitions[0] == (2, 3), timeout=60, what="the move")
        assert admin.list_partition_reassignments() == {}
        description = admin.describe_topics([TOPIC])[TOPIC].partitions[0]
        assert description.replicas == (2, 3) and description.leader in (2, 3)
        wait_for(lambda: log_bytes(brokers[0]) is None, timeout=30, what="the old replica deleted")
        sizes = admin.describe_log_dirs()
    assert log_bytes(brokers[1]) == original
    assert log_bytes(brokers[2]) == original
    assert TP not in sizes[1] and sizes[2][TP].size == sizes[3][TP].size == len(original)
    assert sizes[2][TP].offset_lag == sizes[3][TP].offset_lag == 0


def test_the_replication_factor_goes_up(broker_factory, cluster_store, wait_for) -> None:
    brokers, bootstrap = cluster(broker_factory, [2])
    with Admin(bootstrap_servers=bootstrap) as admin:
        assert admin.alter_partition_reassignments({TP: [2, 1, 3]}) == {TP: None}
    wait_for(
        lambda: cluster_store.get_topic(TOPIC).partitions[0] == (2, 1, 3), timeout=60, what="three replicas"
    )
    wait_for(lambda: len(cluster_store.get_partition_state(TOPIC, 0).isr) == 3, timeout=30, what="a full ISR")
    assert cluster_store.get_partition_state(TOPIC, 0).leader == 2
    assert log_bytes(brokers[0]) == log_bytes(brokers[1]) == log_bytes(brokers[2])


def test_bad_plans_are_refused_and_a_move_can_be_cancelled(broker_factory, cluster_store, wait_for) -> None:
    # The broker that will be paused is not the controller, and holds no replica yet.
    brokers, _ = cluster(broker_factory, lambda c: [others(c)[1], c], 10, cluster_store, **PATIENT)
    first, second = cluster_store.get_topic(TOPIC).partitions[0]
    target = brokers[others(controller_of(cluster_store))[0] - 1]
    with Admin(bootstrap_servers=",".join(b.bootstrap for b in brokers if b is not target)) as admin:
        for plan in ([], [1, 1], [1, -1], [1, 9]):
            outcome = admin.alter_partition_reassignments({TP: plan})[TP]
            assert isinstance(outcome, InvalidReplicaAssignmentError), plan
        unknown = [TopicPartition(TOPIC, 7), TopicPartition("nowhere", 0)]
        for tp, outcome in admin.alter_partition_reassignments({tp: [1] for tp in unknown}).items():
            assert isinstance(outcome, UnknownTopicOrPartitionError), tp
        assert isinstance(admin.alter_partition_reassignments({TP: None})[TP], NoReassignmentInProgressError)
        with paused(target):  # the move to it cannot finish; cancelling restores the old replicas
            assert admin.alter_partition_reassignments({TP: [first, target.broker_id]}) == {TP: None}
            ongoing = admin.list_partition_reassignments()
            assert ongoing[TP].adding == (target.broker_id,) and ongoing[TP].removing == (second,)
            assert cluster_store.get_topic(TOPIC).partitions[0] == (first, target.broker_id, second)
            assert admin.alter_partition_reassignments({TP: None}) == {TP: None}
            assert admin.list_partition_reassignments() == {}
            assert cluster_store.get_topic(TOPIC).partitions[0] == (first, second)

        def refused() -> bool:
            outcome = admin.alter_partition_reassignments({TP: [first, target.broker_id]})[TP]
            if outcome is None:  # asked before the probes found it dead: undo, ask again
                assert admin.alter_partition_reassignments({TP: None}) == {TP: None}
            return isinstance(outcome, InvalidReplicaAssignmentError) and "not live" in str(outcome)

        target.kill()  # still registered (its session lives on), but a dead broker cannot be a new replica
        wait_for(refused, timeout=15, what="a move to a dead broker refused")
    assert cluster_store.get_topic(TOPIC).partitions[0] == (first, second)
    assert log_bytes(target) is None


def test_a_move_survives_the_controllers_death(broker_factory, cluster_store, wait_for) -> None:
    brokers, _ = cluster(broker_factory, lambda c: [c, others(c)[1]], 2000, cluster_store, **PATIENT)
    controller, leaves = cluster_store.get_topic(TOPIC).partitions[0]
    stays_id = others(controller)[0]
    joining = brokers[stays_id - 1]
    with paused(joining):  # it cannot copy, so the move cannot finish before the controller dies
        with Admin(bootstrap_servers=brokers[controller - 1].bootstrap) as admin:
            assert admin.alter_partition_reassignments({TP: [controller, stays_id]}) == {TP: None}
        assert cluster_store.get_topic(TOPIC).adding_replicas == {0: (stays_id,)}
        brokers[controller - 1].kill()  # the controller and the partition's leader
        wait_for(
            lambda: (c := cluster_store.get_controller()) is not None and c.broker_id == leaves,
            timeout=30,
            what="a new controller",
        )
    assert cluster_store.get_topic(TOPIC).adding_replicas == {0: (stays_id,)}
    brokers[controller - 1].start()  # in the target too, so the move waits for it to catch up
    wait_for(
        lambda: cluster_store.get_topic(TOPIC).partitions[0] == (controller, stays_id),
        timeout=60,
        what="the move",
    )
    assert cluster_store.get_controller().broker_id == leaves  # finished by the new controller
    wait_for(lambda: log_bytes(brokers[leaves - 1]) is None, timeout=30, what="the old replica deleted")
    state = cluster_store.get_partition_state(TOPIC, 0)
    assert state.leader == controller and set(state.isr) == {controller, stays_id}
    assert log_bytes(brokers[controller - 1]) == log_bytes(joining)


def reassign(bootstrap: str, *args: str, timeout: float = 90.0):
    done = run("topics", "reassign", "--bootstrap-server", bootstrap, *args, timeout=timeout)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def test_the_cli_moves_a_partition_showing_progress_and_cancels(
    broker_factory, cluster_store, wait_for, tmp_path
) -> None:
    brokers, _ = cluster(broker_factory, lambda c: [c], 5000, cluster_store, **PATIENT)
    (leader,) = cluster_store.get_topic(TOPIC).partitions[0]
    bootstrap = brokers[leader - 1].bootstrap  # the controller: the CLI never waits on the paused broker
    target = brokers[others(leader)[0] - 1]
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {"version": 1, "partitions": [{"topic": TOPIC, "partition": 0, "replicas": [target.broker_id]}]}
        )
    )
    verify = ("--verify", "--reassignment-json-file", str(plan))
    size = len(log_bytes(brokers[leader - 1]) or b"")
    execute = ("--execute", "--reassignment-json-file", str(plan), "--wait", "--timeout", "60")
    with paused(target), spawn("topics", "reassign", "--bootstrap-server", bootstrap, *execute) as waiting:
        waiting.wait_for("out", f"{TOPIC}-0: reassignment started: replicas -> [{target.broker_id}]".encode())
        waiting.wait_for("out", f"broker {target.broker_id} unreachable".encode())
        code, out, _ = reassign(bootstrap, *verify)
        assert code == 0 and f"{TOPIC}-0: in progress: replicas [{target.broker_id}, {leader}]" in out
        assert f"leader {leader} holds {size:,} bytes" in out
        code, out, err = reassign(bootstrap, "--cancel", "--topic", TOPIC, "--partition", "0")
        assert code == 0, err
        assert f"{TOPIC}-0: reassignment cancelled, replicas back to [{leader}]" in out
        assert waiting.finish(timeout=30) == 1  # it saw the move end elsewhere than planned
        assert f"rather than [{target.broker_id}] (was it cancelled?)" in waiting.err.decode()
    code, out, err = reassign(bootstrap, "--execute", "--reassignment-json-file", str(plan), "--wait")
    assert code == 0, err
    assert f"{TOPIC}-0: reassignment complete, replicas [{target.broker_id}]" in out
    assert "all reassignments done" in out
    assert cluster_store.get_topic(TOPIC).partitions[0] == (target.broker_id,)
    code, out, _ = reassign(bootstrap, *verify)
    assert code == 0 and "reassignment complete" in out
    code, out, _ = reassign(bootstrap, "--cancel", "--topic", TOPIC, "--partition", "0")
    assert code == 1
    code, _, err = reassign(bootstrap, "--topic", TOPIC, "--partition", "0")
    assert code == 2 and "--replicas is required" in err
    wait_for(lambda: log_bytes(brokers[leader - 1]) is None, timeout=30, what="the old replica deleted")


def test_the_cli_generates_a_plan_and_executes_it(broker_factory, cluster_store, tmp_path) -> None:
    brokers = [broker_factory(i) for i in (1, 2, 3)]
    bootstrap = ",".join(b.bootstrap for b in brokers)
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic("spread", replica_assignment={p: [1] for p in range(4)})])
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"version": 1, "topics": [{"topic": "spread"}]}))
    code, out, err = reassign(bootstrap, "--generate", "--topics-to-move-json-file", str(topics),
                              "--broker-list", "2,3")  # fmt: skip
    assert code == 0, err
    current, proposed = out.split("Proposed partition reassignment configuration\n")
    assert json.loads(current.split("\n")[1])["partitions"][0]["replicas"] == [1]
    proposal = json.loads(proposed)
    assert {tuple(p["replicas"]) for p in proposal["partitions"]} == {(2,), (3,)}
    plan = tmp_path / "plan.json"
    plan.write_text(proposed)
    code, out, err = reassign(bootstrap, "--execute", "--reassignment-json-file", str(plan), "--wait")
    assert code == 0, err
    assignment = cluster_store.get_topic("spread").partitions
    assert {p: list(r) for p, r in assignment.items()} == {
        p["partition"]: p["replicas"] for p in proposal["partitions"]
    }
    code, _, err = reassign(bootstrap, "--generate", "--topics-to-move-json-file", str(topics),
                            "--broker-list", "2,9")  # fmt: skip
    assert code == 1 and "[9] that are not in the cluster" in err
    plan.write_text(
        json.dumps({"version": 1, "partitions": [{"topic": "nowhere", "partition": 0, "replicas": [2]}]})
    )
    code, _, err = reassign(bootstrap, "--execute", "--reassignment-json-file", str(plan))
    assert code == 1 and "nowhere-0: not started: UNKNOWN_TOPIC_OR_PARTITION" in err


def test_a_replaced_controller_cannot_change_an_assignment(broker, cluster_store) -> None:
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        admin.create_topics([NewTopic(TOPIC, replica_assignment={0: [1]})])
    before = cluster_store.get_topic(TOPIC)
    stale = cluster_store.get_controller_epoch().zk_version + 1  # a version it has not reached
    with pytest.raises(NotControllerError):
        cluster_store.update_topic_assignment(TOPIC, started({0: (1, 2)}), controller_epoch_version=stale)
    assert cluster_store.get_topic(TOPIC) == before
