"""Broker start and stop: configuration errors name the key, and SIGTERM always ends in a clean shutdown,
even when ZooKeeper is already gone."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from kafka import KafkaProducer

from backbone.coordination import ZooKeeperServer, find_free_port
from backbone.dev.processes import BrokerProcess

pytestmark = pytest.mark.integration


def test_sigterm_without_zookeeper_still_shuts_down_cleanly(tmp_path: Path) -> None:
    zookeeper = ZooKeeperServer(tmp_path / "zk", find_free_port(), tick_time_ms=200, force_sync=False)
    zookeeper.start(timeout=60)
    broker = BrokerProcess(1, zookeeper.connect_string + "/lonely", tmp_path / "broker")
    try:
        broker.start()
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
        producer.send("kept", b"written before the outage").get(timeout=30)
        producer.close(10)
        zookeeper.stop()
        started = time.monotonic()
        assert broker.stop(timeout=45) == 0
        assert time.monotonic() - started < 45
        partition_dir = tmp_path / "broker" / "logs" / "kept-0"
        assert (partition_dir / ".clean_shutdown").exists(), "the log was closed cleanly"
        assert "shutdown_step_skipped" in broker.output()
    finally:
        broker.kill()
        zookeeper.stop()


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("num.partitions=zero", "num.partitions='zero' is not a valid int"),
        ("num.partitons=3", "unknown configuration key 'num.partitons'; did you mean num.partitions?"),
        ("log.retention.ms=-5", "log.retention.ms"),
        ("listeners=PLAINTEXT//nowhere", "must look like PLAINTEXT://host:port"),
        ("listeners=SSL://127.0.0.1:9093", "SSL and SASL_SSL listeners need ssl.keystore.location"),
    ],
)
def test_a_bad_configuration_stops_the_broker_naming_the_key(tmp_path: Path, line: str, message: str) -> None:
    config = tmp_path / "broker.properties"
    config.write_text(f"broker.id=1\nzookeeper.connect=127.0.0.1:1/x\nlog.dirs={tmp_path}/logs\n{line}\n")
    result = subprocess.run(
        [sys.executable, "-m", "backbone", "broker", "start", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert message in result.stderr
    assert not (tmp_path / "logs").exists(), "nothing is created before the configuration is valid"
