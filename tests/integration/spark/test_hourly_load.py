"""The hourly load end to end on a live dev topology (dc1, dc2 mirrored into the aggregate, the schema
registry): generated traffic lands in Parquet exactly once, checked event by event against what the
generators had acknowledged; a run killed with SIGKILL before its commit leaves no hour visible and the
next run completes it; a repeated run writes nothing; the _COMPLETE markers agree with the audit, and late
records make a marker be rewritten; an undecodable record is quarantined with its offset."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from backbone.client import Consumer, Producer, TopicPartition
from backbone.dev import topology
from backbone_jobs.hourly_load import PAUSE_BEFORE_COMMIT

TOPICS = ("page_views", "searches", "impressions", "invitations")
HOUR = timedelta(hours=1)


def at(hour: datetime, minute: int) -> str:
    return (hour + timedelta(minutes=minute)).strftime("%Y-%m-%dT%H:%M:%S")


def folder(hour: datetime) -> str:
    return hour.strftime("dt=%Y-%m-%d/hour=%H")


@pytest.fixture(scope="module")
def backbone(tmp_path_factory):
    directory = tmp_path_factory.mktemp("dev")
    started = topology.up(
        directory, ("dc1", "dc2", "aggregate"), 1, progress=lambda _: None, preferred_ports=False
    )
    try:
        yield started.data
    finally:
        topology.down(directory, progress=lambda _: None)


def generate(
    data, datacenter: str, acked: Path, start: str, rate: int, duration: float, scale: float
) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "backbone",
            "generate",
            "--bootstrap-server",
            data["clusters"][datacenter]["bootstrap"],
            "--schema-registry",
            data["schema_registry"]["url"],
            "--datacenter",
            datacenter,
            "--rate",
            str(rate),
            "--duration",
            str(duration),
            "--start-time",
            start,
            "--time-scale",
            str(scale),
            "--audit-bootstrap",
            data["clusters"]["aggregate"]["bootstrap"],
            "--audit-interval-ms",
            "500",
            "--acked-log",
            str(acked),
            "--pages",
            "40",
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr


def acked_events(*logs: Path) -> Counter:
    return Counter(
        (entry["topic"], entry["event_id"])
        for log in logs
        for entry in map(json.loads, log.read_text().splitlines())
    )


def wait_mirrored(bootstrap: str, expected: Counter) -> None:
    wanted = Counter(topic for topic, _ in expected.elements())
    with Consumer(bootstrap_servers=bootstrap) as consumer:
        for _ in range(240):
            ends = {}
            for topic in wanted:
                partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
                ends[topic] = sum(consumer.end_offsets(partitions).values()) if partitions else 0
            if all(ends[t] >= wanted[t] for t in wanted):
                return
            time.sleep(0.5)
    raise AssertionError(f"the aggregate holds {ends}, expected {wanted}")


def load(data, warehouse: Path, **env: str) -> subprocess.Popen:
    args = [
        sys.executable,
        "-m",
        "backbone_jobs.hourly_load",
        "--master",
        "local[2]",
        "--bootstrap-server",
        data["clusters"]["aggregate"]["bootstrap"],
        "--schema-registry",
        data["schema_registry"]["url"],
        "--warehouse",
        f"file://{warehouse}",
        "--topics",
        ",".join(TOPICS),
    ]
    log = open(warehouse.parent / "load.log", "a")  # noqa: SIM115 - the child writes it
    return subprocess.Popen(args, stdout=log, stderr=log, env={**os.environ, **env}, start_new_session=True)


def finished(process: subprocess.Popen, warehouse: Path) -> str:
    assert process.wait(timeout=900) == 0, (warehouse.parent / "load.log").read_text()[-4000:]
    return (warehouse.parent / "load.log").read_text()


def loaded(warehouse: Path) -> Counter:
    found = Counter()
    for topic in TOPICS:
        if (warehouse / topic).exists():
            table = ds.dataset(warehouse / topic, format="parquet", partitioning="hive").to_table(
                columns=["header"]
            )
            found.update((topic, header["event_id"]) for header in table.column("header").to_pylist())
    return found


def markers(warehouse: Path) -> dict[str, dict]:
    return {
        str(marker.parent.relative_to(warehouse)): json.loads(marker.read_text())
        for marker in sorted(warehouse.glob("*/dt=*/hour=*/_COMPLETE"))
    }


@pytest.mark.timeout(1500)  # four Spark runs on a busy 2-core machine
def test_hourly_load_exactly_once_crash_safe_and_audited(backbone, tmp_path):
    warehouse = tmp_path / "warehouse"
    warehouse.mkdir()
    # Event times over the three hours before this one: recent, so retention keeps them.
    first_hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - 3 * HOUR
    logs = [tmp_path / "dc1.jsonl", tmp_path / "dc2.jsonl"]
    for datacenter, log in zip(("dc1", "dc2"), logs, strict=True):
        generate(backbone, datacenter, log, at(first_hour, 30), 300, 4, 1800)
    expected = acked_events(*logs)
    assert len(expected) > 1500 and max(expected.values()) == 1
    wait_mirrored(backbone["clusters"]["aggregate"]["bootstrap"], expected)
    with Producer(bootstrap_servers=backbone["clusters"]["aggregate"]["bootstrap"]) as producer:
        garbage = producer.send("searches", b"not avro at all").get(30)

    # Killed after writing its files, before its commit: nothing is visible, and nothing is committed.
    killed = load(backbone, warehouse, **{PAUSE_BEFORE_COMMIT: "300"})
    for _ in range(600):
        if "event=load_staged" in (tmp_path / "load.log").read_text() or killed.poll() is not None:
            break
        time.sleep(0.5)
    assert killed.poll() is None, (tmp_path / "load.log").read_text()[-4000:]
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait()
    assert list((warehouse / "_etl" / "staging").rglob("*.parquet")), "the killed run had written its files"
    assert not [p for p in warehouse.iterdir() if p.name != "_etl"] and loaded(warehouse) == Counter()
    assert not list((warehouse / "_etl" / "manifests").glob("run-*.json"))

    # The next run discards the staged files, loads everything once, and marks every hour complete.
    output = finished(load(backbone, warehouse), warehouse)
    assert "run 1 committed" in output and "1 quarantined" in output and "incomplete hours: none" in output
    assert loaded(warehouse) == expected
    assert not list((warehouse / "_etl" / "staging").rglob("*.parquet"))
    quarantined = ds.dataset(warehouse / "_quarantine" / "searches", format="parquet").to_table().to_pylist()
    assert [(q["kafka_partition"], q["kafka_offset"], q["raw"]) for q in quarantined] == [
        (garbage.partition, garbage.offset, b"not avro at all")
    ]
    first = markers(warehouse)
    assert {key.split("/", 1)[1] for key in first} == {folder(first_hour + h * HOUR) for h in range(3)}
    for key, marker in first.items():
        assert marker["loaded"] == marker["expected"] == marker["tiers"]["producer"] > 0, key
    assert sum(m["loaded"] for m in first.values()) == len(expected)

    # Run again over the same offsets: nothing is written twice.
    output = finished(load(backbone, warehouse), warehouse)
    assert "no new records; nothing committed" in output
    assert loaded(warehouse) == expected

    # Late records for 10:xx arrive: a later run loads them and rewrites that hour's marker.
    late = tmp_path / "late.jsonl"
    generate(backbone, "dc1", late, at(first_hour + HOUR, 20), 50, 1, 1)
    everything = expected + acked_events(late)
    wait_mirrored(backbone["clusters"]["aggregate"]["bootstrap"], everything)
    finished(load(backbone, warehouse), warehouse)
    assert loaded(warehouse) == everything
    second = markers(warehouse)
    grew = {key for key in second if second[key]["loaded"] != first[key]["loaded"]}
    assert grew and all(key.endswith(folder(first_hour + HOUR)) for key in grew)
    assert all(m["loaded"] == m["expected"] for m in second.values())
