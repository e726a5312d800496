"""No acknowledged record is lost while brokers die: a producer with acks=all (replication factor 3,
min.insync.replicas=2, idempotent) sends numbered records while the test kills leaders, the controller, or
a broker's ZooKeeper session; afterwards every acknowledged record is on every replica exactly once and in
order. Each test prints its audit line: acknowledged, lost (always 0), duplicated."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from replication_harness import NumberedProducer, audit, read_numbers

from backbone.client import Admin, NewTopic
from backbone.coordination import ClusterStore
from backbone.dev import topology

pytestmark = pytest.mark.integration

TOPIC = "numbered"
KILLS = 10


class DevCluster:
    """One cluster of `backbone dev up` (3 brokers), with ways to kill and restart its brokers."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.topology = topology.up(
            directory, clusters=("dc1",), brokers=3, progress=lambda _: None, preferred_ports=False
        )
        cluster = self.topology.data["clusters"]["dc1"]
        self.bootstrap = cluster["bootstrap"]
        self.store = ClusterStore(cluster["zookeeper"], session_timeout=10.0)
        self.store.start()

    def close(self) -> None:
        self.store.close()
        topology.down(self.directory, progress=lambda _: None, timeout=20)

    def pid(self, broker_id: int) -> int:
        return next(
            b["pid"] for b in self.topology.data["clusters"]["dc1"]["brokers"] if b["id"] == broker_id
        )

    def kill(self, broker_id: int) -> None:
        os.kill(self.pid(broker_id), signal.SIGKILL)
        with_timeout(lambda: _reaped(self.pid(broker_id)), 10, f"broker {broker_id} to die")

    def restart_dead(self) -> None:
        self.topology = topology.up(self.directory, clusters=("dc1",), brokers=3, progress=lambda _: None)

    def state(self):
        return self.store.get_partition_state(TOPIC, 0)


def _reaped(pid: int) -> bool:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == pid
    except ChildProcessError:
        return not Path(f"/proc/{pid}").exists()


def with_timeout(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.05)


@pytest.fixture
def dev_cluster(tmp_path: Path) -> Iterator[DevCluster]:
    cluster = DevCluster(tmp_path / "dev")
    try:
        with Admin(bootstrap_servers=cluster.bootstrap) as admin:
            admin.create_topics([NewTopic(TOPIC, 1, 3, configs={"min.insync.replicas": "2"})])
        with_timeout(lambda: len(cluster.state().isr) == 3, 30, "a full ISR")
        yield cluster
    finally:
        cluster.close()


def kill_and_recover(cluster: DevCluster, producer: NumberedProducer, victim: int) -> None:
    """Kill `victim`, wait until acknowledged writes flow again, restart it and wait until it is in sync."""
    acked = producer.ledger.acked
    cluster.kill(victim)
    assert producer.wait_for_acks(acked + 20, timeout=60), f"no acknowledged write after killing {victim}"
    state = cluster.state()
    assert state.leader not in (-1, victim)
    cluster.restart_dead()
    with_timeout(lambda: len(cluster.state().isr) == 3, 60, f"broker {victim} back in the ISR")


def check_no_loss(cluster: DevCluster, producer: NumberedProducer) -> None:
    producer.stop()
    numbers = read_numbers(cluster.bootstrap, TOPIC, producer.ledger.acked)
    result = audit(producer.ledger, numbers)
    print(f"audit: {result} sent={producer.ledger.sent} failed={producer.ledger.failed}")
    assert result.acknowledged > 0
    assert result.lost == 0, result
    assert result.duplicated == 0, result
    assert result.out_of_order == 0, result
    replicas = {b: _log_bytes(cluster, b) for b in (1, 2, 3)}
    with_timeout(
        lambda: len({_log_bytes(cluster, b) for b in (1, 2, 3)}) == 1, 30, "identical logs on every replica"
    )
    assert replicas


def _log_bytes(cluster: DevCluster, broker_id: int) -> bytes:
    directory = cluster.directory / "dc1" / f"broker-{broker_id}" / "logs" / f"{TOPIC}-0"
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))


def test_killing_the_leader_again_and_again_loses_no_acknowledged_record(dev_cluster: DevCluster) -> None:
    with NumberedProducer(dev_cluster.bootstrap, TOPIC) as producer:
        assert producer.wait_for_acks(100, timeout=30)
        leaders = []
        for _ in range(KILLS):
            leader = dev_cluster.state().leader
            leaders.append(leader)
            kill_and_recover(dev_cluster, producer, leader)
        check_no_loss(dev_cluster, producer)
    assert len(leaders) == KILLS


def test_killing_the_controller_loses_no_acknowledged_record(dev_cluster: DevCluster) -> None:
    with NumberedProducer(dev_cluster.bootstrap, TOPIC) as producer:
        assert producer.wait_for_acks(100, timeout=30)
        for _ in range(3):
            controller = dev_cluster.store.get_controller()
            assert controller is not None
            kill_and_recover(dev_cluster, producer, controller.broker_id)
            with_timeout(
                lambda c=controller: (
                    (now := dev_cluster.store.get_controller()) is not None and now.broker_id >= 0
                ),
                30,
                "a controller",
            )
        check_no_loss(dev_cluster, producer)


def test_an_expired_zookeeper_session_loses_no_acknowledged_record(broker_factory, cluster_store) -> None:
    """A broker paused past its session timeout loses its session; when it resumes it registers again,
    catches up and rejoins the ISR."""
    brokers = [broker_factory(i, zookeeper_session_timeout_ms=4000) for i in (1, 2, 3)]
    bootstrap = ",".join(b.bootstrap for b in brokers)
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic(TOPIC, 1, 3, configs={"min.insync.replicas": "2"})])
    with_timeout(lambda: len(cluster_store.get_partition_state(TOPIC, 0).isr) == 3, 30, "a full ISR")
    with NumberedProducer(bootstrap, TOPIC) as producer:
        assert producer.wait_for_acks(100, timeout=30)
        victim = brokers[cluster_store.get_partition_state(TOPIC, 0).leader - 1]
        os.kill(victim.pid, signal.SIGSTOP)
        try:
            with_timeout(
                lambda: victim.broker_id not in cluster_store.broker_ids(), 30, "the session to expire"
            )
            acked = producer.ledger.acked
            assert producer.wait_for_acks(acked + 50, timeout=30)
        finally:
            os.kill(victim.pid, signal.SIGCONT)
        with_timeout(
            lambda: victim.broker_id in cluster_store.broker_ids(), 30, "the broker registered again"
        )
        with_timeout(
            lambda: len(cluster_store.get_partition_state(TOPIC, 0).isr) == 3,
            60,
            "the broker back in the ISR",
        )
        producer.stop()
        numbers = read_numbers(bootstrap, TOPIC, producer.ledger.acked)
        result = audit(producer.ledger, numbers)
        print(f"audit: {result}")
        assert result.lost == 0 and result.duplicated == 0 and result.out_of_order == 0, result
