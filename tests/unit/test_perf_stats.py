"""The measuring behind `backbone perf`: percentiles, a bounded latency reservoir, pacing, summaries."""

from __future__ import annotations

import io

import pytest

from backbone.cli import perf_stats
from backbone.cli.perf_stats import LatencySamples, Progress, Summary, Throttle

pytestmark = pytest.mark.unit


def test_percentiles_of_known_latencies() -> None:
    samples = LatencySamples()
    for value in range(1, 1001):  # 1..1000 ms
        samples.add(float(value))
    marks = samples.percentiles()
    assert marks == {"p50": 501.0, "p95": 951.0, "p99": 991.0, "p99.9": 1000.0, "max": 1000.0}
    assert samples.count == 1000 and samples.average_ms == pytest.approx(500.5)


def test_the_reservoir_stays_bounded_and_keeps_the_true_maximum() -> None:
    samples = LatencySamples(limit=100)
    for value in range(100_000):
        samples.add(float(value % 1000))
    assert len(samples._values) < 100
    assert samples.count == 100_000 and samples.max_ms == 999.0
    assert 400 <= samples.percentiles()["p50"] <= 600  # still spread over the whole range


def test_nothing_measured_gives_no_percentiles() -> None:
    assert LatencySamples().percentiles() == {}
    assert "latency_ms" not in Summary(0, 0, 0.0).as_dict()


def test_throttle_sleeps_until_each_operation_is_due(monkeypatch) -> None:
    now = [100.0]
    slept: list[float] = []
    monkeypatch.setattr(perf_stats.time, "sleep", lambda s: slept.append(s))
    throttle = Throttle(10, clock=lambda: now[0])
    throttle.wait_for(0)
    assert slept == []
    throttle.wait_for(5)  # due half a second after the start
    assert slept == [pytest.approx(0.5)]
    now[0] = 102.0  # behind schedule: no sleep
    throttle.wait_for(10)
    assert len(slept) == 1
    Throttle(-1).wait_for(10**9)  # unthrottled
    assert len(slept) == 1


def test_throttle_sends_in_bursts_of_at_least_its_minimum_sleep(monkeypatch) -> None:
    now = [0.0]
    slept: list[float] = []
    monkeypatch.setattr(perf_stats.time, "sleep", lambda s: slept.append(s))
    throttle = Throttle(10_000, clock=lambda: now[0], min_sleep=0.002)
    for done in range(20):  # due within 2 ms: they go at once
        throttle.wait_for(done)
    assert slept == []
    throttle.wait_for(20)  # due in 2 ms
    assert slept == [pytest.approx(0.002)]


def test_summary_line_and_json() -> None:
    latency = LatencySamples()
    latency.add(2.0)
    summary = Summary(records=1000, bytes=200_000, seconds=2.0, latency=latency)
    assert summary.as_dict()["records_per_second"] == 500.0
    assert summary.as_dict()["mb_per_second"] == 0.1
    assert summary.line().startswith("1,000 records in 2.00 s: 500.0 records/s (0.10 MB/s); latency ms")


def test_progress_prints_at_most_once_per_interval() -> None:
    stream = io.StringIO()
    progress = Progress(stream, "sent", interval=3600)
    progress.update(10)
    assert stream.getvalue() == ""
    progress.interval = 0
    progress.update(20)
    assert stream.getvalue().startswith("20 records sent, ")
