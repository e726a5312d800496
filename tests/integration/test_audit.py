"""The completeness audit end to end: an audited producer writes to dc1, a mirror copies into the aggregate,
`backbone audit count` counts both clusters, and `backbone audit report` proves the aggregate complete
(100.000%, exit 0), or names the buckets of records the aggregate lacks (exit 1)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from cli_support import run
from mirror_support import GROUP_SETTINGS, MirrorProcess, mirror_args, mirrors, target_cluster

from backbone.client import Admin, NewTopic, Producer
from backbone.client.audit import read_audit_counts
from backbone.client.audit.report import format_time, summarize

pytestmark = pytest.mark.integration

BUCKET_MS = 60_000
START_MS = 1_700_000_040_000  # a bucket boundary: 1_700_000_040_000 % 60_000 == 0
TIERS = ("producer", "dc1", "mirror-dc1-aggregate", "aggregate")
FAST = ["--bucket-ms", str(BUCKET_MS), "--interval-ms", "300"]


class AuditCountProcess(MirrorProcess):
    """`backbone audit count ...` in the background, logging to a file and killed when the test ends."""

    def __init__(self, log: Path, *args: str) -> None:
        super().__init__(log)
        self.args = [sys.executable, "-m", "backbone", "audit", "count", *args]


@pytest.fixture
def clusters(broker_factory, zookeeper, chroot, tmp_path):
    source = broker_factory(1, **{k.replace(".", "_"): v for k, v in GROUP_SETTINGS.items()})
    with target_cluster(zookeeper.connect_string + chroot + "-aggregate", tmp_path / "aggregate") as target:
        yield source, target


def produce_audited(source: str, audit_to: str, topic: str, count: int, spacing_ms: int) -> None:
    """`count` records at START_MS, START_MS + spacing_ms, ...; the producer counts what was acknowledged."""
    with Producer(
        bootstrap_servers=source,
        acks="all",
        audit_enable=True,
        audit_bootstrap_servers=audit_to,
        audit_bucket_ms=BUCKET_MS,
        audit_interval_ms=300,
    ) as producer:
        for i in range(count):
            producer.send(topic, b"value-%d" % i, key=b"key-%d" % i, timestamp_ms=START_MS + i * spacing_ms)
        producer.flush()
    # Closing published the producer's last counts.


def tier_counts(target: str, topic: str) -> dict[str, int]:
    messages, _ = read_audit_counts(target)
    totals: dict[str, int] = {}
    for bucket in summarize(messages, topics=[topic]).buckets:
        for tier, count in bucket.tiers.items():
            totals[tier] = totals.get(tier, 0) + count
    return totals


def test_the_report_proves_the_aggregate_complete_and_names_the_missing_bucket(
    clusters, tmp_path, wait_for
) -> None:
    source, target = clusters
    with Admin(bootstrap_servers=source.bootstrap) as admin:
        admin.create_topics([NewTopic("pageviews", 3, 1), NewTopic("secret-logs", 1, 1)])
    # 600 records 200 ms apart: two one-minute buckets of 300 (some batches span both).
    produce_audited(source.bootstrap, target.bootstrap, "pageviews", 600, 200)
    produce_audited(source.bootstrap, target.bootstrap, "secret-logs", 50, 1)
    with mirrors() as started:
        started.append(
            MirrorProcess(
                tmp_path / "mirror.log",
                *mirror_args(source.bootstrap, target.bootstrap, "--topics-regex", ".*"),
                "--exclude", "__.*|secret.*",
                "--property", f"audit.bootstrap.servers={target.bootstrap}",
                "--property", f"audit.bucket.ms={BUCKET_MS}", "--property", "audit.interval.ms=300",
            ).start()
        )  # fmt: skip
        started.append(
            AuditCountProcess(
                tmp_path / "count-dc1.log", "--bootstrap-server", source.bootstrap, "--tier", "dc1",
                "--publish-to", target.bootstrap, *FAST,
            ).start()
        )  # fmt: skip
        started.append(
            AuditCountProcess(
                tmp_path / "count-aggregate.log", "--bootstrap-server", target.bootstrap,
                "--tier", "aggregate", *FAST,
            ).start()
        )  # fmt: skip

        def every_tier_counted_all() -> bool:
            counts = tier_counts(target.bootstrap, "pageviews")
            return all(counts.get(tier) == 600 for tier in TIERS)

        wait_for(
            every_tier_counted_all,
            timeout=120,
            interval=0.5,
            what="600 pageviews counted at every tier",
        )
        assert tier_counts(target.bootstrap, "secret-logs") == {"producer": 50, "dc1": 50}

    complete = run("audit", "report", "--bootstrap-server", target.bootstrap, "--topic", "pageviews")
    text = complete.stdout.decode()
    assert complete.returncode == 0, text + complete.stderr.decode()
    first, second = format_time(START_MS), format_time(START_MS + BUCKET_MS)
    for bucket in (first, second):
        assert f"  {bucket} producer=300 dc1=300 mirror-dc1-aggregate=300 aggregate=300 100.000%" in text
    assert (
        "completeness of aggregate against producer: 100.000% (600 of 600 records); verdict: complete" in text
    )

    everything = run("audit", "report", "--bootstrap-server", target.bootstrap, "--json")
    assert everything.returncode == 1, everything.stderr.decode()
    report = json.loads(everything.stdout)
    assert report["complete"] is False
    assert report["missing_buckets"] == [
        {"topic": "secret-logs", "bucket": first, "bucket_start_ms": START_MS, "missing": 50}
    ]
    assert report["expected"] == 650 and report["missing"] == 50
    text = run("audit", "report", "--bootstrap-server", target.bootstrap).stdout.decode()
    assert "92.307%" in text and f"missing: secret-logs bucket {first}: 50 of 50 records" in text


def test_report_on_a_cluster_without_audit_topic_says_what_to_run(clusters) -> None:
    _source, target = clusters
    done = run("audit", "report", "--bootstrap-server", target.bootstrap)
    assert done.returncode == 1
    assert "no audit topic '__audit'" in done.stderr.decode() and "audit count" in done.stderr.decode()
