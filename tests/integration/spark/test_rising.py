"""The rising job on live traffic: a generator compresses 80 minutes of event time into a few seconds
while one page's share of page views grows; the job (window 40 minutes, buckets of 10) names that page
first in the JSON it publishes, and none of the steady pages anywhere near it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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


def generate(bootstrap: str, registry_url: str, start: str, scale: int, seconds: int, *options: str) -> None:
    generated = subprocess.run(
        [sys.executable, "-m", "backbone", "generate", "--bootstrap-server", bootstrap,
         "--schema-registry", registry_url, "--datacenter", "dc1", "--start-time", start,
         "--time-scale", str(scale), "--duration", str(seconds), *options],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert generated.returncode == 0, generated.stderr


def run_rising(bootstrap: str, registry_url: str, checkpoint: Path) -> None:
    """One AvailableNow run of the job (window 40 minutes, buckets of 10, 10 minutes of lateness)."""
    job = subprocess.run(
        [sys.executable, "-m", "backbone_jobs.rising", "--master", "local[2]", "--bootstrap-server",
         bootstrap, "--schema-registry", registry_url, "--window", "40m", "--slide", "10m",
         "--watermark", "10m", "--top", "5", "--min-views", "50", "--starting-offsets", "earliest",
         "--checkpoint", str(checkpoint), "--available-now"],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert job.returncode == 0, job.stderr[-4000:]


@pytest.mark.timeout(1500)  # Spark, twice, on a busy 2-core machine
def test_rising_names_the_page_made_to_rise(live_broker, registry_url, tmp_path):
    bootstrap = live_broker.bootstrap
    # 80 minutes of event time (10:00 to 11:20) in 8 seconds; page-rising's share grows to 0.4.
    traffic = ("--rate", "1000", "--pages", "30", "--members", "500", "--seed", "3")
    generate(bootstrap, registry_url, "2026-01-01T10:00:00", 600, 8, *traffic, "--rising", "page-rising",
             "--rising-share", "0.4")  # fmt: skip
    checkpoint = tmp_path / "checkpoint"
    run_rising(bootstrap, registry_url, checkpoint)
    top = last_record(bootstrap, "rising_pages")
    pages = top["pages"]
    assert top["window_ms"] == 40 * 60_000
    assert pages and pages[0]["page_key"] == "page-rising", pages
    # The steady pages kept their share: none grew like the rising page did.
    assert all(p["growth"] < pages[0]["growth"] / 2 for p in pages[1:]), pages

    # Restarted on its checkpoint: page views of page-late at 10:45, 35 minutes behind the newest event,
    # are later than the watermark allows and are not counted; steady pages' views at 11:19 are. The
    # ranking still spans the whole window, not only the buckets seen since the restart.
    generate(bootstrap, registry_url, "2026-01-01T10:45:00", 1, 2, "--rate", "1000", "--pages", "30",
             "--rising", "page-late", "--rising-share", "1.0", "--seed", "4")  # fmt: skip
    generate(bootstrap, registry_url, "2026-01-01T11:19:00", 1, 2, "--rate", "200", "--pages", "30",
             "--seed", "5")  # fmt: skip
    run_rising(bootstrap, registry_url, checkpoint)
    after = last_record(bootstrap, "rising_pages")
    assert after != top, "the restarted job published a new ranking"
    assert all(p["page_key"] != "page-late" for p in after["pages"]), after["pages"]
    assert after["pages"][0] == pages[0], "page-rising's views and growth are unchanged"
