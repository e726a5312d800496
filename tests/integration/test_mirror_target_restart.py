"""The whole target cluster restarted under a running mirror: its ZooKeeper and every broker stop together
and start again (as `docker compose restart` does to the aggregate), every leader moves, while records keep
being produced into the source. The mirror goes on copying afterwards, and every acknowledged source record
reaches the target."""

from __future__ import annotations

import re
import signal
import threading
from pathlib import Path

import pytest
from mirror_support import GROUP_SETTINGS, MirrorProcess, caught_up, mirror_args, mirrors, origins, read_all

from backbone.client import Admin, NewTopic, Producer
from backbone.coordination import ZooKeeperServer, find_free_port
from backbone.dev.processes import BrokerProcess
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.integration

GROUP = "restart-mirror"
TOPIC = "clicks"
PARTITIONS = 6
TARGET_BROKERS = 3


class KeyedProducer:
    """Numbered records spread over every partition (acks=all) until stopped; remembers where each
    acknowledged one landed: (partition, offset), what the mirror's provenance header names."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = Producer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
        self.acknowledged: set[tuple[int, int]] = set()
        self.failed = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> KeyedProducer:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _run(self) -> None:
        number = 0
        while not self._stop.wait(0.002):
            self.producer.send(TOPIC, b"%d" % number, key=b"%d" % number, callback=self._answer)
            number += 1

    def _answer(self, metadata, error) -> None:
        with self._lock:
            if error is None:
                self.acknowledged.add((metadata.partition, metadata.offset))
            else:
                self.failed += 1

    def count(self) -> int:
        with self._lock:
            return len(self.acknowledged)

    def stop(self) -> None:
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join(timeout=30)
            self.producer.flush(timeout=120)
            self.producer.close()


class TargetCluster:
    """Its own ZooKeeper and three brokers, stopped and started together."""

    def __init__(self, directory: Path) -> None:
        self.zookeeper = ZooKeeperServer(directory / "zookeeper", find_free_port())
        settings = {
            **GROUP_SETTINGS,
            "default.replication.factor": TARGET_BROKERS,
            "min.insync.replicas": 2,
            "offsets.topic.replication.factor": TARGET_BROKERS,
            "zookeeper.session.timeout.ms": 6000,
        }
        self.brokers = [
            BrokerProcess(
                broker_id,
                f"{self.zookeeper.connect_string}/aggregate",
                directory / f"broker-{broker_id}",
                properties=settings,
            )
            for broker_id in range(1, TARGET_BROKERS + 1)
        ]

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers)

    def start(self) -> None:
        self.zookeeper.start(timeout=60)
        for broker in self.brokers:
            broker.start(timeout=60)

    def stop(self, how: signal.Signals = signal.SIGTERM) -> None:
        """Every broker at once (SIGTERM: clean shutdowns; SIGKILL: a crash), then ZooKeeper."""
        for broker in self.brokers:
            if broker.is_running():
                broker.process.send_signal(how)
        for broker in self.brokers:
            broker.stop(timeout=30)
        self.zookeeper.stop()


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["stopped", "killed"])
def test_the_whole_target_cluster_restarted_under_a_running_mirror(broker_factory, tmp_path, how) -> None:
    source = broker_factory(1, **{k.replace(".", "_"): v for k, v in GROUP_SETTINGS.items()})
    with Admin(bootstrap_servers=source.bootstrap) as admin:
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])
    target = TargetCluster(tmp_path / "aggregate")
    try:
        target.start()
        # As the datacenters' mirrors run: a static member, publishing audit counts into the target.
        args = mirror_args(
            source.bootstrap, target.bootstrap, "--topics-regex", TOPIC, "--group", GROUP,
            "--property", f"instance.id={GROUP}-1", "--property", "audit.interval.ms=1000",
            "--property", f"audit.bootstrap.servers={target.bootstrap}",
        )  # fmt: skip
        with mirrors() as started, KeyedProducer(source.bootstrap) as producer:
            mirror = MirrorProcess(tmp_path / "mirror.log", *args).start()
            started.append(mirror)

            def copied() -> int:
                found = re.findall(r"event=mirror_progress copied=(\d+)", mirror.output())
                return int(found[-1]) if found else 0

            wait_until(lambda: copied() > 500, 60, what="records copied before the restart")
            target.stop(how)
            acknowledged = producer.count()
            wait_until(
                lambda: producer.count() > acknowledged + 2000, 60, what="records while the target is down"
            )
            target.start()
            copied_before = copied()
            wait_until(lambda: copied() > copied_before, 90, what="the mirror copying after the restart")
            produced_after = producer.count()
            wait_until(lambda: producer.count() > produced_after + 2000, 60, what="records after the restart")
            producer.stop()
            try:
                wait_until(
                    lambda: caught_up(source.bootstrap, GROUP, TOPIC), 120, what="the mirror caught up"
                )
            except pytest.fail.Exception as failed:
                tail = "\n".join(mirror.output().splitlines()[-30:])
                pytest.fail(f"{failed}\nthe mirror's output ends:\n{tail}")
            found = {(hop.partition, hop.offset) for hop in origins(read_all(target.bootstrap, TOPIC, 120))}
            missing = producer.acknowledged - found
            assert not missing, f"{len(missing)} acknowledged records missing, e.g. {sorted(missing)[:5]}"
            assert producer.failed == 0
            assert mirror.terminate() == 0
    finally:
        target.stop()
