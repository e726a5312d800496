"""`backbone perf`: produce, consume and end-to-end runs against a real broker report what they moved, and
refuse bad input with a message saying what to do."""

from __future__ import annotations

import json

import pytest
from cli_support import run, run_ok

from tests.helpers.names import unique_name

pytestmark = pytest.mark.integration

LATENCY_KEYS = {"average", "p50", "p95", "p99", "p99.9", "max"}


def perf(*args: str, timeout: float = 120.0) -> dict:
    return json.loads(run_ok("perf", *args, "--json", timeout=timeout))


def test_produce_then_consume_count_every_record(broker) -> None:
    topic = unique_name("perf")
    common = ("--bootstrap-server", broker.bootstrap, "--topic", topic)
    produced = perf("produce", *common, "--num-records", "3000", "--record-size", "100", "--partitions", "2")
    assert (produced["records"], produced["bytes"], produced["errors"]) == (3000, 300_000, 0)
    assert set(produced["latency_ms"]) == LATENCY_KEYS
    assert 0 < produced["latency_ms"]["p50"] <= produced["latency_ms"]["max"]
    consumed = perf("consume", *common, "--num-records", "3000")
    assert (consumed["records"], consumed["bytes"]) == (3000, 300_000)
    assert consumed["records_per_second"] > 0


def test_end_to_end_latency_is_measured_for_every_record(broker) -> None:
    topic = unique_name("e2e")
    result = perf(
        "e2e", "--bootstrap-server", broker.bootstrap, "--topic", topic, "--partitions", "1",
        "--num-records", "400", "--throughput", "1000", "--acks", "all",
    )  # fmt: skip
    assert (result["records"], result["errors"]) == (400, 0)
    latency = result["latency_ms"]
    assert 0 < latency["p50"] <= latency["p99"] <= latency["max"]


def test_a_missing_topic_and_bad_sizes_are_named(broker) -> None:
    done = run(
        "perf", "consume", "--bootstrap-server", broker.bootstrap, "--topic", "nowhere", "--num-records", "1"
    )
    assert done.returncode == 1
    assert b"nowhere" in done.stderr
    done = run("perf", "produce", "--topic", "t", "--num-records", "1", "--record-size", "4")
    assert done.returncode == 2 and b"--record-size" in done.stderr
