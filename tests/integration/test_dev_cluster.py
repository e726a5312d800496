"""`backbone dev up|status|down` as a user runs it: real processes, topology.json, restart of the dead."""

from __future__ import annotations

import http.cookiejar
import json
import os
import re
import signal
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from mirror_support import end_total, read_all

from backbone.dev.topology import process_alive
from backbone.mirror.provenance import origin
from backbone.tracking.serde import AvroDecoder, RegistryClient
from tests.helpers.waiting import wait_until

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
    assert (
        stopped.returncode == 0 and "stopped 4 process(es)" in stopped.stdout
    )  # 2 brokers, ZooKeeper, console
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


def test_dev_up_mirrors_each_datacenter_into_the_aggregate(dev_dir: Path) -> None:
    started = backbone("dev", "up", "--dir", str(dev_dir), "--brokers", "1")
    assert started.returncode == 0, started.stderr
    assert "mirror: dc1 -> aggregate" in started.stdout and "mirror: dc2 -> aggregate" in started.stdout
    topology = json.loads((dev_dir / "topology.json").read_text())
    clusters = topology["clusters"]
    assert [(m["source"], m["target"]) for m in topology["mirrors"]] == [
        ("dc1", "aggregate"),
        ("dc2", "aggregate"),
    ]
    for mirror in topology["mirrors"]:
        assert process_alive(mirror["pid"], mirror["marker"])
        start = mirror["start"]
        assert start[start.index("--source-bootstrap") + 1] == clusters[mirror["source"]]["bootstrap"]
        assert start[start.index("--target-bootstrap") + 1] == clusters["aggregate"]["bootstrap"]
        assert start[start.index("--metrics-port") + 1] == str(mirror["metrics_port"])
        assert start[start.index("--instance-id") + 1] == f"{mirror['group']}-1"
        assert Path(mirror["output"]).is_relative_to(dev_dir.resolve())
        with urllib.request.urlopen(f"http://127.0.0.1:{mirror['metrics_port']}/metrics", timeout=10) as page:
            assert page.status == 200
    for cluster in clusters.values():  # every broker serves its Prometheus metrics on its own port
        (broker,) = cluster["brokers"]
        with urllib.request.urlopen(f"http://127.0.0.1:{broker['metrics_port']}/metrics", timeout=10) as page:
            assert b"backbone_broker_leader_partitions" in page.read()
    assert [a["tier"] for a in topology["auditors"]] == ["dc1", "dc2", "aggregate"]
    status = backbone("dev", "status", "--dir", str(dev_dir))
    # 3 brokers, 2 mirrors, 3 audit counters, the schema registry, ZooKeeper and the console
    assert status.returncode == 0 and status.stdout.count("running") == 11
    console = topology["console"]
    assert f"console: {console['url']}  user operator  password {console['password']}" in started.stdout
    browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    with browser.open(console["url"] + "login", timeout=10) as page:
        token = re.search(r'name="csrf_token" value="([^"]+)"', page.read().decode()).group(1)
    form = {"user": console["user"], "password": console["password"], "csrf_token": token}
    with browser.open(
        console["url"] + "login", data=urllib.parse.urlencode(form).encode(), timeout=10
    ) as page:
        assert page.status == 200 and page.url == console["url"], "logged in and sent to the overview"
    with urllib.request.urlopen(topology["schema_registry"]["url"] + "/subjects", timeout=10) as subjects:
        assert json.loads(subjects.read()) == []

    # The same topic in both datacenters merges into one topic of the aggregate, each record marked with
    # where it came from.
    for name in ("dc1", "dc2"):
        producer = KafkaProducer(bootstrap_servers=clusters[name]["bootstrap"])
        producer.send("pageviews", f"from {name}".encode()).get(timeout=30)
        producer.close(10)
    aggregate = clusters["aggregate"]["bootstrap"]
    wait_until(lambda: end_total(aggregate, "pageviews") == 2, 60, 0.5, what="both records in the aggregate")
    arrived = {record.value: origin(record.headers) for record in read_all(aggregate, "pageviews")}
    assert {value: hop.cluster for value, hop in arrived.items()} == {b"from dc1": "dc1", b"from dc2": "dc2"}

    # A mirror killed with kill -9 is started again, with its recorded command, by the next `up`.
    victim = topology["mirrors"][0]
    os.kill(victim["pid"], signal.SIGKILL)
    assert backbone("dev", "status", "--dir", str(dev_dir)).returncode == 1
    again = backbone("dev", "up", "--dir", str(dev_dir), "--brokers", "1")
    assert again.returncode == 0, again.stderr
    assert "restarting mirror dc1 -> aggregate" in again.stdout
    restarted = json.loads((dev_dir / "topology.json").read_text())["mirrors"][0]
    assert restarted["pid"] != victim["pid"] and process_alive(restarted["pid"], restarted["marker"])

    stopped = backbone("dev", "down", "--dir", str(dev_dir))
    assert stopped.returncode == 0 and "stopped 11 process(es)" in stopped.stdout
    lines = stopped.stdout.splitlines()
    assert lines[0].startswith("stopping console"), "the console first: it only reads"
    assert all(line.startswith("stopping audit count") for line in lines[1:4]), "then the counters"
    assert lines[4].startswith("stopping mirror") and lines[5].startswith("stopping mirror"), "then mirrors"
    final = json.loads((dev_dir / "topology.json").read_text())
    assert all(m["pid"] is None for m in final["mirrors"])
    assert not process_alive(restarted["pid"], restarted["marker"])


def test_dev_up_stops_what_it_started_when_a_mirror_cannot_start(dev_dir: Path) -> None:
    # "dc.1" is a fine ZooKeeper chroot but no mirror alias (letters, digits, - and _): its mirror exits.
    failed = backbone("dev", "up", "--dir", str(dev_dir), "--clusters", "dc.1,aggregate", "--brokers", "1")
    assert failed.returncode == 1
    assert "mirror dc.1 -> aggregate exited" in failed.stderr and "source.alias" in failed.stderr
    assert (dev_dir / "dc.1" / "broker-1").is_dir(), "the brokers had started"
    assert not (dev_dir / "topology.json").exists(), "nothing recorded: the next `up` starts afresh"
    assert processes_mentioning(dev_dir.resolve()) == [], "ZooKeeper and the brokers were stopped again"


def processes_mentioning(directory: Path) -> list[int]:
    """Pids whose command line names `directory` (brokers name their config file, ZooKeeper its data)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if str(directory).encode() in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
        except OSError:
            continue  # gone meanwhile
    return found


def test_dev_up_generate_runs_a_generator_per_datacenter_into_the_aggregate(dev_dir: Path) -> None:
    started = backbone("dev", "up", "--dir", str(dev_dir), "--brokers", "1", "--generate", "40")
    assert started.returncode == 0, started.stderr
    topology = json.loads((dev_dir / "topology.json").read_text())
    generators = topology["generators"]
    assert [g["name"] for g in generators] == ["generator dc1", "generator dc2"]
    clusters = topology["clusters"]
    for generator in generators:
        assert process_alive(generator["pid"], generator["marker"])
        start = generator["start"]
        datacenter = start[start.index("--datacenter") + 1]
        assert start[start.index("--bootstrap-server") + 1] == clusters[datacenter]["bootstrap"]
        assert start[start.index("--schema-registry") + 1] == topology["schema_registry"]["url"]
        assert start[start.index("--audit-bootstrap") + 1] == clusters["aggregate"]["bootstrap"]

    # Page views generated in both datacenters reach the aggregate through the mirrors, decodable through
    # the registry and stamped with the datacenter that made them.
    aggregate = clusters["aggregate"]["bootstrap"]
    decoder = AvroDecoder(RegistryClient(topology["schema_registry"]["url"]))

    def datacenters_seen() -> set[str]:
        if end_total(aggregate, "page_views") == 0:
            return set()
        seen = set()
        for record in read_all(aggregate, "page_views"):
            event = decoder.decode(record.value)[1]
            assert origin(record.headers).cluster == event["header"]["datacenter"]
            seen.add(event["header"]["datacenter"])
        return seen

    wait_until(lambda: datacenters_seen() == {"dc1", "dc2"}, 90, 1.0, what="page views of dc1 and dc2")
    status = backbone("dev", "status", "--dir", str(dev_dir))
    assert status.returncode == 0 and status.stdout.count("running") == 13
    assert "generator dc1" in status.stdout and "generator dc2" in status.stdout

    stopped = backbone("dev", "down", "--dir", str(dev_dir))
    assert stopped.returncode == 0 and "stopped 13 process(es)" in stopped.stdout
    lines = stopped.stdout.splitlines()
    assert lines[1].startswith("stopping generator") and lines[2].startswith("stopping generator"), (
        "the generators right after the console, before the counters that count their records"
    )
    assert not any(process_alive(g["pid"], g["marker"]) for g in generators)
