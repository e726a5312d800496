"""A throw-away 3-broker Backbone cluster for client conformance runs: a real ZooKeeper and real broker
processes on free loopback ports, in a directory of the caller's choosing, stopped again on exit.

Configured like the cluster the clients' own suites expect (librdkafka's default scenario: topics
auto-created with 4 partitions and 3 replicas).
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from backbone.coordination import ZooKeeperServer, find_free_port
from backbone.dev.processes import BrokerProcess

BROKERS = 3
# Kafka's names; values as in librdkafka's "default" test scenario.
SUITE_PROPERTIES: Mapping[str, str] = {
    "auto.create.topics.enable": "true",
    "num.partitions": "4",
    "default.replication.factor": "3",
    "min.insync.replicas": "1",
    "offsets.topic.replication.factor": "3",
    # group.initial.rebalance.delay.ms stays Kafka's 3 s: librdkafka's group tests count on two
    # consumers that subscribe together being assigned in one rebalance.
}


@dataclass
class Cluster:
    zookeeper: ZooKeeperServer
    brokers: list[BrokerProcess]

    @property
    def bootstrap(self) -> str:
        return ",".join(broker.bootstrap for broker in self.brokers)

    def dead_brokers(self) -> list[int]:
        return [broker.broker_id for broker in self.brokers if not broker.is_running()]


@contextlib.contextmanager
def running_cluster(
    directory: Path, properties: Mapping[str, str] = SUITE_PROPERTIES, brokers: int = BROKERS
) -> Iterator[Cluster]:
    """Start ZooKeeper and `brokers` brokers under `directory`; stop them all on exit, even on failure."""
    zookeeper = ZooKeeperServer(directory / "zookeeper", find_free_port(), force_sync=False)
    zookeeper.start(timeout=60)
    started: list[BrokerProcess] = []
    try:
        for broker_id in range(1, brokers + 1):
            broker = BrokerProcess(
                broker_id,
                f"{zookeeper.connect_string}/conformance",
                directory / f"broker-{broker_id}",
                properties=properties,
            )
            started.append(broker)
            broker.start(timeout=60)
        yield Cluster(zookeeper, started)
    finally:
        # A second Ctrl-C or SIGTERM must not cut the stopping short and leave processes behind.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            for broker in started:
                broker.stop(timeout=15)
            zookeeper.stop()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
