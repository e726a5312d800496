"""Two clusters (a source `dc1` and a target `aggregate`) on the session's ZooKeeper, mirror processes
between them, and reading a whole topic back, for the mirror tests.

Mirror processes write to a log file rather than a pipe, so a long run never blocks on a full pipe; every
process started here is killed when the test ends, however it ends.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from backbone.client import Admin, Consumer, Producer, TopicPartition
from backbone.coordination import ZooKeeperServer, find_free_port
from backbone.dev.processes import BrokerProcess
from backbone.mirror import provenance
from tests.helpers.waiting import wait_until

GROUP_SETTINGS = {
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 1000,
    "offsets.topic.num.partitions": 3,
}

TARGET_BROKERS = 3


class MirrorProcess:
    def __init__(self, log: Path, *args: str) -> None:
        self.args = [sys.executable, "-m", "backbone", "mirror", *args]
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> MirrorProcess:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(self.args, stdin=subprocess.DEVNULL, stdout=out, stderr=out)
        return self

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)

    def terminate(self, timeout: float = 60.0) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=timeout)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def copied(self) -> int:
        """Records copied so far, as the last progress line says (0 before the first)."""
        found = re.findall(r"event=mirror_progress copied=(\d+)", self.output())
        return int(found[-1]) if found else 0

    def wait_caught_up(self, source: str, group: str, topic: str, timeout: float = 120) -> None:
        """Wait until `group` committed the end of `topic`; a failure shows the end of the mirror's log."""
        try:
            wait_until(lambda: caught_up(source, group, topic), timeout, what="the mirror caught up")
        except pytest.fail.Exception as failed:
            tail = "\n".join(self.output().splitlines()[-30:])
            pytest.fail(f"{failed}\nthe mirror's output ends:\n{tail}")


@contextmanager
def mirrors() -> Iterator[list[MirrorProcess]]:
    started: list[MirrorProcess] = []
    try:
        yield started
    finally:
        for mirror in started:
            mirror.kill()


@contextmanager
def target_cluster(connect: str, directory: Path, **properties: object) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(1, connect, directory, properties={**GROUP_SETTINGS, **properties})
    broker.start()
    try:
        yield broker
    finally:
        broker.stop(timeout=15)


def mirror_args(source: str, target: str, *extra: str) -> list[str]:
    return [
        "--source-bootstrap", source, "--target-bootstrap", target, "--source-alias", "dc1",
        "--target-alias", "aggregate", "--property", "commit.interval.ms=200",
        "--property", "progress.interval.ms=1000", *extra,
    ]  # fmt: skip


def read_all(bootstrap: str, topic: str, timeout_s: float = 10.0) -> list:
    """Every record of `topic` from the beginning up to the end offsets seen at the start."""
    with Consumer(bootstrap_servers=bootstrap) as consumer:
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
        consumer.assign(partitions)
        ends = consumer.end_offsets(partitions)
        consumer.seek_to_beginning(*partitions)
        records: list = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and any(consumer.position(tp) < ends[tp] for tp in partitions):
            for batch in consumer.poll(timeout_ms=200).values():
                records.extend(batch)
        return records


def end_total(bootstrap: str, topic: str) -> int:
    """The sum of the topic's end offsets; 0 while it does not exist."""
    with Consumer(bootstrap_servers=bootstrap) as consumer:
        if topic not in consumer.topics():
            return 0
        partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
        return sum(consumer.end_offsets(partitions).values())


def origins(records: list) -> list[provenance.Provenance | None]:
    return [provenance.origin(r.headers) for r in records]


def committed_total(bootstrap: str, group: str, topic: str) -> int:
    with Admin(bootstrap_servers=bootstrap) as admin:
        committed = admin.list_consumer_group_offsets(group)
    return sum(o.offset for tp, o in committed.items() if tp.topic == topic)


def caught_up(bootstrap: str, group: str, topic: str) -> bool:
    """Whether `group` has committed the end of every partition of `topic` (a mirror copied it all)."""
    end = end_total(bootstrap, topic)
    return end > 0 and committed_total(bootstrap, group, topic) == end


class KeyedProducer:
    """Numbered records spread over every partition (acks=all) until stopped; remembers where each
    acknowledged one landed: (partition, offset), what the mirror's provenance header names."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
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
            self.producer.send(self.topic, b"%d" % number, key=b"%d" % number, callback=self._answer)
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
    """Its own ZooKeeper and three brokers (acks=all needs two in sync), stopped and started together."""

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
