"""`backbone dev up|status|down` as a user runs it: real processes, topology.json, restart of the dead."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from backbone.dev.topology import process_alive

pytestmark = pytest.mark.integration


def backbone(*args: str, timeout: float = 180.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "backbone", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture
def dev_dir(tmp_path: Path):
    directory = tmp_path / "dev"
    try:
        yield directory
    finally:
        backbone("dev", "down", "--dir", str(directory))


def test_dev_up_runs_isolated_clusters_and_restarts_what_died(dev_dir: Path) -> None:
    started = backbone("dev", "up", "--dir", str(dev_dir), "--clusters", "east,west", "--brokers", "1")
    assert started.returncode == 0, started.stderr
    topology = json.loads((dev_dir / "topology.json").read_text())
    assert set(topology["clusters"]) == {"east", "west"}
    for name, cluster in topology["clusters"].items():
        assert cluster["zookeeper"].endswith(f"/{name}")
        (broker,) = cluster["brokers"]
        assert cluster["bootstrap"] == f"{broker['host']}:{broker['port']}"
        assert broker["start"][:3] == [sys.executable, "-m", "backbone"]
        assert broker["start"][-4:-2] == ["broker", "start"]
        assert process_alive(broker["pid"], broker["marker"])
    east = topology["clusters"]["east"]["bootstrap"]
    west = topology["clusters"]["west"]["bootstrap"]

    producer = KafkaProducer(bootstrap_servers=east)
    producer.send("clicks", b"only in east").get(timeout=30)
    producer.close(10)
    consumer = KafkaConsumer(bootstrap_servers=west, consumer_timeout_ms=5000)
    assert "clicks" not in consumer.topics(), "clusters under different chroots share nothing"
    consumer.close()

    victim = topology["clusters"]["east"]["brokers"][0]
    os.kill(victim["pid"], signal.SIGKILL)
    status = backbone("dev", "status", "--dir", str(dev_dir))
    assert status.returncode == 1 and "stopped" in status.stdout
    again = backbone("dev", "up", "--dir", str(dev_dir), "--clusters", "east,west", "--brokers", "1")
    assert again.returncode == 0, again.stderr
    assert "restarting" in again.stdout
    assert backbone("dev", "status", "--dir", str(dev_dir)).returncode == 0

    # The restarted broker recovered its log: the record is still there.
    consumer = KafkaConsumer(bootstrap_servers=east, consumer_timeout_ms=20000)
    consumer.assign([TopicPartition("clicks", 0)])
    consumer.seek_to_beginning()
    assert next(iter(consumer)).value == b"only in east"
    consumer.close()

    stopped = backbone("dev", "down", "--dir", str(dev_dir))
    assert stopped.returncode == 0 and "stopped 3 process(es)" in stopped.stdout
    final = json.loads((dev_dir / "topology.json").read_text())
    recorded = [b for c in topology["clusters"].values() for b in c["brokers"]] + [topology["zookeeper"]]
    assert all(not process_alive(entry["pid"], entry["marker"]) for entry in recorded)
    assert final["zookeeper"]["pid"] is None
    assert all(b["pid"] is None for c in final["clusters"].values() for b in c["brokers"])


def test_dev_up_refuses_a_different_topology_in_the_same_directory(dev_dir: Path) -> None:
    assert backbone("dev", "up", "--dir", str(dev_dir), "--clusters", "solo").returncode == 0
    refused = backbone("dev", "up", "--dir", str(dev_dir), "--clusters", "solo,other")
    assert refused.returncode == 2
    assert "dev down" in refused.stderr and "--purge" in refused.stderr
