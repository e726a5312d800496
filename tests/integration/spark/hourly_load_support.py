"""Helpers for the hourly load's tests: generated traffic, load runs as real processes, the warehouse read
back with pyarrow."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow.dataset as ds
from spark_support import TEST_JAVA_OPTIONS

from backbone.client import Consumer, TopicPartition

TOPICS = ("page_views", "searches", "impressions", "invitations")
HOUR = timedelta(hours=1)


def at(hour: datetime, minute: int) -> str:
    return (hour + timedelta(minutes=minute)).strftime("%Y-%m-%dT%H:%M:%S")


def folder(hour: datetime) -> str:
    return hour.strftime("dt=%Y-%m-%d/hour=%H")


def generate(
    data: dict,
    datacenter: str,
    acked: Path,
    start: str,
    rate: int,
    duration: float,
    scale: float,
    audit_cluster: str = "aggregate",
) -> None:
    """`backbone generate` into `datacenter`; its audit counts (tier producer) go to `audit_cluster`."""
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
            data["clusters"][audit_cluster]["bootstrap"],
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


def load(
    data: dict,
    warehouse: Path,
    *options: str,
    topics: tuple[str, ...] = TOPICS,
    submit: bool = False,
    **env: str,
) -> subprocess.Popen:
    """The hourly load as its own process group (so a test can stop or kill all of it, JVM included):
    `python -m backbone_jobs.hourly_load`, or with `submit` the job's file given to `spark-submit`."""
    if submit:
        import pyspark

        from backbone_jobs import hourly_load

        spark_submit = str(Path(pyspark.__file__).parent / "bin" / "spark-submit")
        start = [spark_submit, "--master", "local[2]", "--driver-java-options", TEST_JAVA_OPTIONS]
        start.append(hourly_load.__file__)
    else:
        start = [sys.executable, "-m", "backbone_jobs.hourly_load", "--master", "local[2]"]
    args = [
        *start,
        "--bootstrap-server",
        data["clusters"]["aggregate"]["bootstrap"],
        "--schema-registry",
        data["schema_registry"]["url"],
        "--warehouse",
        f"file://{warehouse}",
        "--topics",
        ",".join(topics),
        *options,
    ]
    log = open(warehouse.parent / "load.log", "a")  # noqa: SIM115 - the child writes it
    return subprocess.Popen(args, stdout=log, stderr=log, env={**os.environ, **env}, start_new_session=True)


def load_log(warehouse: Path) -> str:
    return (warehouse.parent / "load.log").read_text()


def finished(process: subprocess.Popen, warehouse: Path, exit_code: int = 0) -> str:
    assert process.wait(timeout=900) == exit_code, load_log(warehouse)[-4000:]
    return load_log(warehouse)


def loaded(warehouse: Path, topics: tuple[str, ...] = TOPICS, column: str = "header") -> Counter:
    """(topic, event id) of every loaded event, counted (so a duplicate shows as 2)."""
    found = Counter()
    for topic in topics:
        if (warehouse / topic).exists():
            table = ds.dataset(warehouse / topic, format="parquet", partitioning="hive").to_table(
                columns=[column]
            )
            found.update((topic, header["event_id"]) for header in table.column(column).to_pylist())
    return found


def markers(warehouse: Path) -> dict[str, dict]:
    return {
        str(marker.parent.relative_to(warehouse)): json.loads(marker.read_text())
        for marker in sorted(warehouse.glob("*/dt=*/hour=*/_COMPLETE"))
    }
