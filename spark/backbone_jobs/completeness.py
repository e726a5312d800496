"""The load's part in the completeness audit: its counts as the `etl` tier, and the hours' markers.

A run's counts are published under a process name of its own (`etl:<warehouse>:run-<n>`) with fixed
sequence numbers, so publishing them again after a crash adds nothing: the report counts a (process,
sequence) once. An hour of a topic is complete when the audit's `etl` tier holds as many records for its
buckets as the baseline tiers (the audited producers of every datacenter) counted; its marker names the
counts of every tier. Hours not complete yet are kept in `_etl/pending_hours.json` and checked again by
each run; an hour that gets late records is checked again and its marker rewritten.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from backbone.client import Producer
from backbone.client.audit import AuditCount, read_audit_counts
from backbone.client.audit.report import summarize
from backbone_jobs.warehouse import PENDING, Files

TIER = "etl"
HOUR_MS = 3_600_000


def hour_key(ms: int) -> str:
    """`YYYY-MM-DD/HH` of the hour holding `ms` (UTC)."""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d/%H")


def hour_start_ms(key: str) -> int:
    return int(datetime.strptime(key, "%Y-%m-%d/%H").replace(tzinfo=UTC).timestamp() * 1000)


def hour_folder(topic: str, key: str) -> str:
    day, hour = key.split("/")
    return f"{topic}/dt={day}/hour={hour}"


def publish_counts(bootstrap: str, audit_topic: str, warehouse: str, manifest: dict[str, Any]) -> None:
    """Send a committed run's counts (manifest["audit"]: topic, bucket_start_ms, bucket_ms, count)."""
    process = f"{TIER}:{warehouse}:run-{manifest['run']}"
    with Producer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True) as producer:
        futures = [
            producer.send(
                audit_topic,
                AuditCount(
                    TIER,
                    process,
                    number,
                    entry["topic"],
                    entry["bucket_start_ms"],
                    entry["bucket_ms"],
                    entry["count"],
                    manifest["committed_at_ms"],
                ).encode(),
                key=f"{TIER}|{entry['topic']}".encode(),
            )
            for number, entry in enumerate(manifest["audit"], start=1)
        ]
        producer.flush(60)
        for future in futures:
            future.get(60)


def hours_by_tier(
    messages: Iterable[AuditCount], topic: str, baseline: Sequence[str]
) -> dict[str, dict[str, int]]:
    """hour -> {tier: count} for `topic` (duplicate messages counted once)."""
    report = summarize(messages, baseline=baseline, aggregate=TIER, topics=[topic])
    hours: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for bucket in report.buckets:
        for tier, count in bucket.tiers.items():
            hours[hour_key(bucket.bucket_start_ms)][tier] += count
    return hours


def mark_complete_hours(
    files: Files, bootstrap: str, audit_topic: str, touched: dict[str, set[str]], baseline: Sequence[str]
) -> dict[str, list[str]]:
    """Write or rewrite the marker of every touched or pending hour the audit finds complete; return the
    hours still incomplete per topic (also saved for the next run)."""
    pending: dict[str, set[str]] = {t: set(h) for t, h in touched.items()}
    if files.exists(PENDING):
        for topic, hours in json.loads(files.read_text(PENDING)).items():
            pending.setdefault(topic, set()).update(hours)
    messages, _ = read_audit_counts(bootstrap, audit_topic)
    still: dict[str, list[str]] = {}
    for topic, hours in sorted(pending.items()):
        counts = hours_by_tier(messages, topic, baseline)
        for key in sorted(hours):
            tiers = counts.get(key, {})
            expected = sum(tiers.get(t, 0) for t in baseline)
            loaded = tiers.get(TIER, 0)
            if expected > 0 and loaded >= expected:
                marker = {
                    "topic": topic,
                    "hour": key,
                    "expected": expected,
                    "loaded": loaded,
                    "tiers": dict(sorted(tiers.items())),
                    "baseline": list(baseline),
                    "written_at": datetime.now(UTC).isoformat(timespec="seconds"),
                }
                files.write_atomically(
                    f"{hour_folder(topic, key)}/_COMPLETE", json.dumps(marker, indent=1) + "\n"
                )
            else:
                still.setdefault(topic, []).append(key)
    files.write_atomically(PENDING, json.dumps(still, indent=1))
    return still


def now_ms() -> int:
    return int(time.time() * 1000)
