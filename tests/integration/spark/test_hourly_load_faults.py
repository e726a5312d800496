"""The hourly load's faults, each against its own live aggregate cluster and schema registry, with real
load processes:

- killed with SIGKILL after its manifest's commit, before its counts reached the audit (frozen the moment
  the committed manifest, or the mark that its files were moved, appears on disk): the next run moves what
  is left, publishes the counts once, marks the hours, and writes no record twice;
- records deleted (by retention) before the load read them: the default run stops, naming partition and
  offsets, and commits nothing; `--retention-gap quarantine` loads the rest and records the gap, by
  partition and offsets, in its manifest, its quarantine folder and its closing line.
"""

from __future__ import annotations

import json
import os
import re
import signal
from collections import Counter
from datetime import UTC, datetime

import pytest
from hourly_load_support import (
    HOUR,
    acked_events,
    at,
    finished,
    folder,
    generate,
    load,
    load_log,
    loaded,
    markers,
    wait_mirrored,
)

from backbone.client import Admin, Consumer, TopicPartition
from backbone.client.audit.reading import read_audit_counts
from backbone.dev import topology
from backbone_jobs.task_write import FAIL_FIRST_ATTEMPT
from tests.helpers.waiting import wait_until
from tests.helpers.warehouse import partition_offsets

MANIFESTS = ("_etl", "manifests")


@pytest.fixture
def backbone(tmp_path_factory):
    """One aggregate cluster (a broker) with the registry: the load's whole world, fresh for each test."""
    directory = tmp_path_factory.mktemp("dev")
    started = topology.up(directory, ("aggregate",), 1, progress=lambda _: None, preferred_ports=False)
    try:
        yield started.data
    finally:
        topology.down(directory, progress=lambda _: None)


def etl_counts(bootstrap: str) -> dict[tuple[str, int], int]:
    """(process, sequence) -> count of every `etl` tier message in the audit topic."""
    messages, _ = read_audit_counts(bootstrap)
    return {(m.process, m.sequence): m.count for m in messages if m.tier == "etl"}


@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    ("frozen_at", "writer"),
    [("run-000001.json", "pyarrow"), ("run-000001.published", "spark")],  # each writer once
)
def test_run_killed_after_its_commit_is_finished_by_the_next(backbone, tmp_path, frozen_at, writer):
    aggregate = backbone["clusters"]["aggregate"]["bootstrap"]
    warehouse = tmp_path / "warehouse"
    warehouse.mkdir()
    first_hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - 2 * HOUR
    generate(backbone, "aggregate", tmp_path / "acked.jsonl", at(first_hour, 30), 300, 3, 1800)
    expected = acked_events(tmp_path / "acked.jsonl")
    assert len(expected) > 600 and max(expected.values()) == 1
    wait_mirrored(aggregate, expected)

    # The point is a real one on disk: the manifest renamed into place (the commit), or the mark written
    # once its files were moved. The whole process group (driver and JVM) is frozen the moment it appears,
    # checked, then killed.
    point = warehouse.joinpath(*MANIFESTS, frozen_at)
    crashing = load(backbone, warehouse, "--writer", writer)
    try:
        wait_until(lambda: point.exists() or crashing.poll() is not None, 600, 0.001, f"{point.name}")
        os.killpg(crashing.pid, signal.SIGSTOP)
        assert crashing.poll() is None, load_log(warehouse)[-4000:]
        assert warehouse.joinpath(*MANIFESTS, "run-000001.json").exists()
        assert not warehouse.joinpath(*MANIFESTS, "run-000001.audited").exists()
    finally:
        os.killpg(crashing.pid, signal.SIGKILL)
        crashing.wait()
    assert etl_counts(aggregate) == {}, "killed before its counts were published"
    assert not markers(warehouse)

    output = finished(load(backbone, warehouse, "--writer", writer), warehouse)
    assert "finishing committed run 1" in output and "no new records; nothing committed" in output
    assert loaded(warehouse) == expected  # every event once: nothing lost, nothing moved twice
    assert not list((warehouse / "_etl" / "staging").rglob("*.parquet"))
    assert warehouse.joinpath(*MANIFESTS, "run-000001.audited").exists()
    assert not warehouse.joinpath(*MANIFESTS, "run-000002.json").exists()
    counts = etl_counts(aggregate)
    assert {process for process, _ in counts} == {f"etl:file://{warehouse}:run-1"}
    assert sum(counts.values()) == len(expected)
    hours = markers(warehouse)
    assert {key.split("/", 1)[1] for key in hours} == {folder(first_hour + h * HOUR) for h in range(2)}
    for key, marker in hours.items():
        assert marker["loaded"] == marker["expected"] == marker["tiers"]["producer"] > 0, key
    assert sum(m["loaded"] for m in hours.values()) == len(expected)


@pytest.mark.timeout(900)
def test_files_of_a_failed_task_attempt_are_not_loaded(backbone, tmp_path):
    aggregate = backbone["clusters"]["aggregate"]["bootstrap"]
    warehouse = tmp_path / "warehouse"
    warehouse.mkdir()
    first_hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - 2 * HOUR
    generate(backbone, "aggregate", tmp_path / "acked.jsonl", at(first_hour, 30), 300, 2, 1800)
    expected = acked_events(tmp_path / "acked.jsonl")
    wait_mirrored(aggregate, expected)
    # local[2,2]: a failed task is tried once more. Every first attempt writes its files, then fails.
    running = load(backbone, warehouse, "--master", "local[2,2]", **{FAIL_FIRST_ATTEMPT: "1"})
    output = finished(running, warehouse)
    assert FAIL_FIRST_ATTEMPT in output  # the first attempts did fail
    assert loaded(warehouse) == expected  # and each event is loaded once, from the second attempts
    assert not (warehouse / "_etl" / "staging").exists() or not list(
        (warehouse / "_etl" / "staging").rglob("*")
    )


@pytest.mark.timeout(900)
def test_retention_gap_fails_or_is_quarantined_by_partition_and_offsets(backbone, tmp_path):
    aggregate = backbone["clusters"]["aggregate"]["bootstrap"]
    warehouse = tmp_path / "warehouse"
    warehouse.mkdir()
    topics = ("searches",)
    early = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - 3 * HOUR
    generate(backbone, "aggregate", tmp_path / "a.jsonl", at(early, 10), 300, 2, 60)
    first = Counter({key: n for key, n in acked_events(tmp_path / "a.jsonl").items() if key[0] in topics})
    wait_mirrored(aggregate, first)
    finished(load(backbone, warehouse, topics=topics), warehouse)
    assert loaded(warehouse, topics) == first
    positions = json.loads(warehouse.joinpath(*MANIFESTS, "run-000001.json").read_text())["offsets"]

    # More events (two hours later), then retention takes the older half of each partition's new records.
    generate(backbone, "aggregate", tmp_path / "b.jsonl", at(early + 2 * HOUR, 10), 300, 2, 60)
    second = Counter({key: n for key, n in acked_events(tmp_path / "b.jsonl").items() if key[0] in topics})
    wait_mirrored(aggregate, first + second)
    partitions = [TopicPartition("searches", int(p)) for p in positions["searches"]]
    with Consumer(bootstrap_servers=aggregate) as consumer:
        ends = {tp.partition: end for tp, end in consumer.end_offsets(partitions).items()}
    with Admin(bootstrap_servers=aggregate) as admin:
        cut = {
            tp: positions["searches"][str(tp.partition)]
            + (ends[tp.partition] - positions["searches"][str(tp.partition)]) // 2
            for tp in partitions
        }
        cut = {tp: offset for tp, offset in cut.items() if offset > positions["searches"][str(tp.partition)]}
        assert cut, "the second batch put searches into some partition"
        admin.delete_records(cut)
    gaps = {
        str(tp.partition): {
            "from": positions["searches"][str(tp.partition)],
            "until": offset,
            "records": offset - positions["searches"][str(tp.partition)],
        }
        for tp, offset in cut.items()
    }
    named = [
        f"searches[{p}] offsets {g['from']}..{g['until'] - 1} ({g['records']} records)"
        for p, g in gaps.items()
    ]

    # By default the run stops before writing anything, and says where records were lost.
    output = finished(load(backbone, warehouse, topics=topics), warehouse, exit_code=1)
    assert all(n in output for n in named), output[-3000:]
    assert not warehouse.joinpath(*MANIFESTS, "run-000002.json").exists()
    assert not (warehouse / "_etl" / "staging").exists() or not list(
        (warehouse / "_etl" / "staging").iterdir()
    )
    assert loaded(warehouse, topics) == first

    # Quarantine: the rest is loaded, the gap is recorded by partition and offsets.
    output = finished(load(backbone, warehouse, "--retention-gap", "quarantine", topics=topics), warehouse)
    closing = re.search(r"run 2 committed: .*", output)
    assert closing and all(n in closing.group(0) for n in named), output[-3000:]
    manifest = json.loads(warehouse.joinpath(*MANIFESTS, "run-000002.json").read_text())
    assert manifest["data_loss"] == {"searches": gaps}
    report = json.loads((warehouse / "_quarantine" / "searches" / "run=2" / "retention_gap.json").read_text())
    assert report["gaps"] == gaps and report["topic"] == "searches"
    offsets = partition_offsets(warehouse, "searches")
    assert max(offsets.values()) == 1
    lost = {(int(p), o) for p, g in gaps.items() for o in range(g["from"], g["until"])}
    everything = {(tp.partition, o) for tp in partitions for o in range(ends[tp.partition])}
    assert set(offsets) == everything - lost
    got = loaded(warehouse, topics)
    assert max(got.values()) == 1 and set(got) <= set(first + second)
    assert len(got) == len(first) + len(second) - len(lost)
    # The audit sees the loss: the hours that lost records are not marked complete.
    assert not any(key.endswith(folder(early + 2 * HOUR)) for key in markers(warehouse))
    assert folder(early + 2 * HOUR).replace("dt=", "").replace("/hour=", "/") in closing.group(0)
