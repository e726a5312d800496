"""A real 3-broker cluster, shared by every conformance test of the session, and the clients' helpers.

The cluster runs as Backbone's own broker processes against a real ZooKeeper, as `backbone dev up` runs
them, with the settings Kafka's own client test suites expect: 4 partitions and 3 replicas on
auto-created topics, `min.insync.replicas=2`. Every process started here is stopped at the end.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from backbone.coordination import ZooKeeperServer, find_free_port
from backbone.dev.processes import BrokerProcess
from tests.helpers.requests import metadata_request
from tests.helpers.wire import RawConnection

BROKERS = 3
PARTITIONS = 4


def wait_until(condition: Callable[[], object], timeout: float = 30.0, what: str = "") -> object:
    """Poll `condition` until it returns something truthy (returned); fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what or condition}")
        time.sleep(0.05)


@dataclass
class Cluster:
    brokers: list[BrokerProcess]

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers)

    def topic(self, prefix: str) -> str:
        """A topic name no other test uses."""
        return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    directory = tmp_path_factory.mktemp("conformance")
    zookeeper = ZooKeeperServer(directory / "zookeeper", find_free_port(), tick_time_ms=200, force_sync=False)
    zookeeper.start(timeout=60.0)
    brokers: list[BrokerProcess] = []
    try:
        properties = {
            "num.partitions": PARTITIONS,
            "default.replication.factor": BROKERS,
            "offsets.topic.replication.factor": BROKERS,
            "offsets.topic.num.partitions": 10,
            "min.insync.replicas": 2,
            "group.initial.rebalance.delay.ms": 0,
            "log.flush.interval.ms": 1000,
            "zookeeper.session.timeout.ms": 6000,
        }
        for broker_id in range(1, BROKERS + 1):
            broker = BrokerProcess(
                broker_id,
                zookeeper.connect_string + "/conformance",
                directory / f"broker-{broker_id}",
                properties=properties,
            )
            brokers.append(broker)
            broker.start()
        wanted = {b.broker_id for b in brokers}

        def all_listed() -> bool:
            for broker in brokers:
                with RawConnection(broker.bootstrap) as raw:
                    if {int(b.node_id) for b in raw.request(metadata_request()).brokers} != wanted:
                        return False
            return True

        wait_until(all_listed, what="every broker listing the others")
        yield Cluster(brokers)
    finally:
        for broker in brokers:
            broker.stop(timeout=15)
        zookeeper.stop()
