"""Fixtures for the Spark data source's tests: one SparkSession and one live broker per test module.

Spark's start-up is the slow part, so a module shares its session; the JVM runs with
-XX:TieredStopAtLevel=1 (quick to warm up, plenty for test-sized data). Every process started here is
stopped after the module, also when a test fails.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from spark_support import TEST_JAVA_OPTIONS

from backbone.coordination import ZooKeeperServer
from backbone.dev.processes import BrokerProcess

pytest.importorskip("pyspark", reason="the spark extra is not installed (pip install -e '.[spark]')")

# Spark's workers run our interpreter (with backbone_spark installed) and bind to loopback only.
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.spark)
            item.add_marker(pytest.mark.integration)


def start_broker(
    zookeeper: ZooKeeperServer, directory: Path, broker_id: int = 1, **properties: object
) -> BrokerProcess:
    props = {"zookeeper.session.timeout.ms": 6000, "num.partitions": 1, "log.flush.interval.ms": 1000}
    props.update({key.replace("_", "."): value for key, value in properties.items()})
    chroot = f"/spark-{uuid.uuid4().hex[:8]}"
    process = BrokerProcess(broker_id, zookeeper.connect_string + chroot, directory, properties=props)
    process.start()
    return process


@pytest.fixture(scope="module")
def live_broker(
    zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    """One broker on its own cluster chroot, for the whole module."""
    process = start_broker(zookeeper, tmp_path_factory.mktemp("broker"))
    try:
        yield process
    finally:
        process.stop(timeout=15)


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from pyspark.sql import SparkSession

    from backbone_spark import register

    session = (
        SparkSession.builder.master("local[2]")
        .appName("backbone-spark-tests")
        .config("spark.driver.extraJavaOptions", TEST_JAVA_OPTIONS)
        .config("spark.executor.extraJavaOptions", TEST_JAVA_OPTIONS)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.local.dir", str(tmp_path_factory.mktemp("spark-local")))
        .getOrCreate()
    )
    register(session)
    try:
        yield session
    finally:
        session.stop()
