"""The hourly warehouse load on the compose topology's Spark standalone cluster (the `spark` profile: a
master and two workers on the aggregate's network), with a worker killed while its executor runs tasks.

The load runs as a one-off driver container (`compose run hourly-load`) over the tracking events the
generators put in the aggregate. When the driver's REST API shows a task running on a worker's executor,
that worker's container is killed (SIGKILL: the worker and its executor go at once). The job must finish
on the other worker, and its warehouse (Parquet read back on the host) must hold every record of the
offset ranges its manifest committed exactly once: none lost with the killed executor's tasks, none
written twice by their retries.
"""

from __future__ import annotations

import io
import json
import tarfile
import time
from collections import Counter
from pathlib import Path

import pytest
import requests
from compose_support import SPARK, ComposeTopology, records_in, wait_for

from backbone.coordination import find_free_port
from tests.helpers.warehouse import partition_offsets

pytestmark = [pytest.mark.system, pytest.mark.timeout(3600)]  # a busy machine: JVMs start slowly

TOPICS = ("page_views", "searches", "impressions", "invitations")
WORKERS = ("spark-worker-1", "spark-worker-2")
ENOUGH_EVENTS = 2000  # page views in the aggregate before the load: work for both executors
LOAD_S = 900.0


def driver_api(port: int, path: str) -> list | dict | None:
    """The load's driver's REST API (None while it does not answer: not started yet, or finished)."""
    try:
        answer = requests.get(f"http://127.0.0.1:{port}/api/v1/applications{path}", timeout=10)
        return answer.json() if answer.ok else None
    except (requests.RequestException, ValueError):  # not JSON yet: the UI answers before its API is up
        return None


def worker_running_tasks(port: int) -> str | None:
    """The worker whose executor runs a task of the load now, if one does."""
    applications = driver_api(port, "")
    if not applications:
        return None
    executors = driver_api(port, f"/{applications[0]['id']}/executors") or []
    for executor in executors:
        host = executor["hostPort"].rsplit(":", 1)[0]
        if executor["id"] != "driver" and executor["activeTasks"] > 0 and host in WORKERS:
            return host
    return None


def copy_out(backbone: ComposeTopology, service: str, path: str, into: Path) -> Path:
    """`path` of a running container of `service`, copied into `into` (the warehouse is a volume)."""
    stream, _ = backbone.container(service).get_archive(path)
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as archive:
        archive.extractall(into, filter="data")
    return into / Path(path).name


def test_a_spark_worker_killed_during_the_hourly_load_loses_and_repeats_nothing(
    backbone: ComposeTopology, tmp_path: Path
) -> None:
    started = time.monotonic()
    backbone.up("spark-master", *WORKERS, options=SPARK)
    print(f"spark master and workers healthy after {time.monotonic() - started:.1f} s")

    aggregate = backbone.bootstrap("aggregate")
    wait_for(
        lambda: (
            records_in(aggregate, "page_views") >= ENOUGH_EVENTS
            and all(records_in(aggregate, topic) > 0 for topic in TOPICS)
        ),
        600,
        f"{ENOUGH_EVENTS} generated page views (and every event type) in the aggregate",
        5,
    )
    driver_ui = find_free_port()
    output = tmp_path / "hourly-load.log"
    run = [*SPARK, "run", "--rm", "--no-deps", "-T", "-p", f"127.0.0.1:{driver_ui}:4040"]
    load = backbone.compose_in_background(*run, "hourly-load", "hourly-load", output=output)
    try:
        victim: list[str | None] = [None]

        def tasks_on_a_worker() -> bool:
            assert load.poll() is None, (
                f"the load ended before a worker ran a task:\n{output.read_text()[-4000:]}"
            )
            victim[0] = worker_running_tasks(driver_ui)
            return victim[0] is not None

        wait_for(tasks_on_a_worker, 1200, "a task of the load running on a worker", 0.2)
        killed = victim[0]
        assert killed is not None
        backbone.container(killed).kill(signal="SIGKILL")
        assert load.poll() is None, "the load ended before the worker was killed"
        print(f"killed {killed} while its executor ran the load's tasks")
        assert load.wait(timeout=LOAD_S) == 0, output.read_text()[-6000:]
    finally:
        if load.poll() is None:
            load.kill()
            load.wait()
    log = output.read_text()
    print(log.strip().splitlines()[-1])

    survivor = next(worker for worker in WORKERS if worker != killed)
    warehouse = copy_out(backbone, survivor, "/warehouse", tmp_path)
    manifest = json.loads((warehouse / "_etl" / "manifests" / "run-000001.json").read_text())
    assert not list((warehouse / "_etl" / "staging").rglob("*.parquet")), "staged files left behind"
    total = 0
    for topic in TOPICS:
        ranges = manifest["ranges"].get(topic, {})
        expected = Counter(
            (int(partition), offset)
            for partition, (start, until) in ranges.items()
            for offset in range(start, until)
        )
        assert expected, f"the load found no {topic} records"
        assert manifest["quarantined"][topic] == 0, f"{topic}: generated events failed to decode"
        found = partition_offsets(warehouse, topic)
        lost = expected - found
        twice = sum(n - 1 for n in found.values() if n > 1)
        in_ranges = sum(expected.values())
        print(f"hourly load {topic}: acknowledged {in_ranges}, lost {len(lost)}, written twice {twice}")
        assert not lost, f"{topic}: records not in the warehouse: {sorted(lost)[:20]}"
        assert found == expected, f"{topic}: records written twice or from outside the run's ranges"
        total += in_ranges
    print(f"hourly load on the Spark cluster with {killed} killed: {total} records, each written once")
