"""The rising job on live traffic: a generator compresses 80 minutes of event time into a few seconds
while one page's share of page views grows; the job (window 40 minutes, buckets of 10) names that page
first in the JSON it publishes, and none of the steady pages anywhere near it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from backbone.client import Consumer, TopicPartition
from backbone.coordination import find_free_port
from backbone.dev import registry
from backbone.dev.processes import stop_child


@pytest.fixture
def registry_url(live_broker, tmp_path):
    started: list = []
    entry = registry.start(tmp_path, live_broker.bootstrap, "127.0.0.1", find_free_port("127.0.0.1"), started)
    try:
        yield entry["url"]
    finally:
        for process in started:
            stop_child(process, timeout=15)


def last_record(bootstrap: str, topic: str) -> dict:
    with Consumer(bootstrap_servers=bootstrap) as consumer:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        end = consumer.end_offsets([tp])[tp]
        assert end > 0, f"nothing was published to {topic}"
        consumer.seek(tp, end - 1)
        for _ in range(60):
            for records in consumer.poll(timeout_ms=500).values():
                return json.loads(records[-1].value)
    raise AssertionError(f"could not read the last record of {topic}")


@pytest.mark.timeout(1200)  # Spark on a busy 2-core machine
def test_rising_names_the_page_made_to_rise(live_broker, registry_url, tmp_path):
    generated = subprocess.run(
        [
            sys.executable,
            "-m",
            "backbone",
            "generate",
            "--bootstrap-server",
            live_broker.bootstrap,
            "--schema-registry",
            registry_url,
            "--datacenter",
            "dc1",
            "--rate",
            "1000",
            "--duration",
            "8",
            "--start-time",
            "2026-01-01T10:00:00",
            "--time-scale",
            "600",
            "--pages",
            "30",
            "--members",
            "500",
            "--rising",
            "page-rising",
            "--rising-share",
            "0.4",
            "--seed",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert generated.returncode == 0, generated.stderr
    job = subprocess.run(
        [
            sys.executable,
            "-m",
            "backbone_jobs.rising",
            "--master",
            "local[2]",
            "--bootstrap-server",
            live_broker.bootstrap,
            "--schema-registry",
            registry_url,
            "--window",
            "40m",
            "--slide",
            "10m",
            "--watermark",
            "10m",
            "--top",
            "5",
            "--min-views",
            "50",
            "--starting-offsets",
            "earliest",
            "--checkpoint",
            str(tmp_path / "checkpoint"),
            "--available-now",
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert job.returncode == 0, job.stderr[-4000:]
    top = last_record(live_broker.bootstrap, "rising_pages")
    pages = top["pages"]
    assert top["window_ms"] == 40 * 60_000
    assert pages and pages[0]["page_key"] == "page-rising", pages
    # The steady pages kept their share: none grew like the rising page did.
    assert all(p["growth"] < pages[0]["growth"] / 2 for p in pages[1:]), pages
