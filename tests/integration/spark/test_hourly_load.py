"""The hourly load end to end on a live dev topology (dc1, dc2 mirrored into the aggregate, the schema
registry): generated traffic lands in Parquet exactly once, checked event by event against what the
generators had acknowledged; a run killed with SIGKILL before its commit leaves no hour visible and the
next run completes it; a repeated run writes nothing; the _COMPLETE markers agree with the audit, and late
records make a marker be rewritten; an undecodable record is quarantined with its offset."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from datetime import UTC, datetime

import pyarrow.dataset as ds
import pytest
from hourly_load_support import (
    HOUR,
    acked_events,
    at,
    finished,
    folder,
    generate,
    load,
    loaded,
    markers,
    wait_mirrored,
)

from backbone.client import Producer
from backbone.dev import topology
from backbone_jobs.hourly_load import PAUSE_BEFORE_COMMIT


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

    # Run again over the same offsets, this time given to spark-submit: nothing is written twice.
    output = finished(load(backbone, warehouse, submit=True), warehouse)
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
