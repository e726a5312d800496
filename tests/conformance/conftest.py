"""A real 3-broker cluster, shared by every conformance test of the session, and the clients' helpers.

The cluster runs as Backbone's own broker processes against a real ZooKeeper, as `backbone dev up` runs
them, with the settings Kafka's own client test suites expect: 4 partitions and 3 replicas on
auto-created topics, `min.insync.replicas=2`. Every process started here is stopped at the end.

With `BACKBONE_CONFORMANCE_RESULTS=<dir>` (set by `ops/conformance`) the run writes one result file per
client into that directory (`<client>.json`, the format `backbone.protocol.compat_doc` reads and
describes). Tests of features Backbone leaves out carry `@pytest.mark.left_out("why")`.
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Iterator
from importlib.metadata import version

import pytest

from backbone.coordination import ZooKeeperServer, find_free_port
from backbone.dev.processes import BrokerProcess
from tests.conformance.support import BROKERS, PARTITIONS, Cluster, wait_until
from tests.helpers.requests import metadata_request
from tests.helpers.wire import RawConnection

# Which client a test drives, by the start of its module or test name.
CLIENTS = {
    "test_confluent_kafka": ("confluent-kafka (librdkafka)", "confluent-kafka"),
    "test_kafka_python": ("kafka-python", "kafka-python"),
    "test_aiokafka": ("aiokafka", "aiokafka"),
}
_HERE = os.path.dirname(__file__)
_left_out: dict[str, str] = {}
_outcomes: dict[str, str] = {}


def _client_of(nodeid: str) -> str | None:
    module, _, name = nodeid.rpartition("::")
    for prefix, (client, _) in CLIENTS.items():
        if os.path.basename(module).startswith(prefix) or name.startswith(prefix):
            return client
    return None


def _version_of(client: str) -> str:
    package = next(package for name, package in CLIENTS.values() if name == client)
    text = version(package)
    if package == "confluent-kafka":
        import confluent_kafka

        text += f" (librdkafka {confluent_kafka.libversion()[0]})"
    return text


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        marker = item.get_closest_marker("left_out")
        if marker is not None and str(item.path).startswith(_HERE):
            _left_out[item.nodeid] = marker.args[0]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not report.nodeid.startswith("tests/conformance/"):
        return
    if report.when == "call" or report.outcome != "passed":
        _outcomes[report.nodeid] = "failed" if report.outcome == "failed" else report.outcome


def pytest_sessionfinish(session: pytest.Session) -> None:
    directory = os.environ.get("BACKBONE_CONFORMANCE_RESULTS")
    if not directory or not _outcomes:
        return
    os.makedirs(directory, exist_ok=True)
    by_client: dict[str, list[str]] = {}
    for nodeid in _outcomes:
        client = _client_of(nodeid)
        if client is not None:
            by_client.setdefault(client, []).append(nodeid)
    for client, nodeids in sorted(by_client.items()):
        counted = [n for n in nodeids if n not in _left_out]
        result = {
            "client": client,
            "version": _version_of(client),
            "suite": "backbone",
            "command": "ops/conformance",
            "python": platform.python_version(),
            "passed": sum(_outcomes[n] == "passed" for n in counted),
            "failed": sum(_outcomes[n] == "failed" for n in nodeids),
            "skipped": sum(_outcomes[n] == "skipped" for n in nodeids),
            "left_out": [
                {"test": n.rpartition("::")[2], "reason": _left_out[n]}
                for n in sorted(nodeids)
                if n in _left_out and _outcomes[n] == "passed"
            ],
            "failures": [
                {"test": n.rpartition("::")[2], "reason": "failed"}
                for n in sorted(nodeids)
                if _outcomes[n] == "failed"
            ],
        }
        name = next(package for c, package in CLIENTS.values() if c == client)
        with open(os.path.join(directory, f"{name}.json"), "w", encoding="utf-8") as out:
            json.dump(result, out, indent=2)
            out.write("\n")


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
