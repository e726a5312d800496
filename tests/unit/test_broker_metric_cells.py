"""The broker's event counts, kept as plain integers on the hot path, read as Prometheus families."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from backbone.broker.metrics import BrokerMetrics
from backbone.protocol.api import ApiKey

pytestmark = pytest.mark.unit


def samples(metrics: BrokerMetrics) -> dict[tuple[str, tuple], float]:
    registry = CollectorRegistry()
    registry.register(metrics.events)  # the event counts only: no broker behind them
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_latencies_fall_in_prometheus_buckets_and_versions_share_one_series() -> None:
    metrics = BrokerMetrics(broker=None)  # type: ignore[arg-type]
    # queue 1 ms (exactly a bound: it belongs to that bucket), local 3 ms, remote 0, send and total.
    metrics.request_done(ApiKey.PRODUCE, 9, queued=10.0, started=10.001, ready=10.004, remote=0.0)
    metrics.request_done(ApiKey.PRODUCE, 8, queued=10.0, started=10.2, ready=10.3, remote=0.0)
    found = samples(metrics)
    api = (("api", "produce"),)
    assert found[("backbone_broker_requests_total", (("api", "produce"), ("version", "9")))] == 1
    assert found[("backbone_broker_requests_total", (("api", "produce"), ("version", "8")))] == 1
    queue = "backbone_broker_request_queue_seconds"
    assert found[(f"{queue}_bucket", (*api, ("le", "0.0005")))] == 0
    assert found[(f"{queue}_bucket", (*api, ("le", "0.001")))] == 1
    assert found[(f"{queue}_bucket", (*api, ("le", "0.25")))] == 2
    assert found[(f"{queue}_bucket", (*api, ("le", "+Inf")))] == 2
    assert found[(f"{queue}_count", api)] == 2
    assert found[(f"{queue}_sum", api)] == pytest.approx(0.201)
    local = "backbone_broker_request_local_seconds"
    assert found[(f"{local}_bucket", (*api, ("le", "0.005")))] == 1
    assert found[(f"{local}_sum", api)] == pytest.approx(0.103)


def test_topic_counts_and_refused_requests() -> None:
    metrics = BrokerMetrics(broker=None)  # type: ignore[arg-type]
    metrics.appended("pageviews", 10, 2_000)
    metrics.appended("pageviews", 5, 1_000)
    metrics.request_failed(ApiKey.METADATA, 1)
    found = samples(metrics)
    assert found[("backbone_broker_topic_messages_in_total", (("topic", "pageviews"),))] == 15
    assert found[("backbone_broker_topic_bytes_in_total", (("topic", "pageviews"),))] == 3_000
    assert found[("backbone_broker_request_errors_total", (("api", "metadata"), ("version", "1")))] == 1
