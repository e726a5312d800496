"""The audit report's arithmetic: sum the tiers' count messages and compare the aggregate with the baseline.

Pure functions over `AuditCount` messages (no I/O), so the numbers are tested on their own:

- exact duplicates (the same process and sequence, written twice by a retried publish) count once;
- per tier, topic and bucket the deltas are summed;
- per topic and bucket, the aggregate tier's count is compared with the baseline tiers' (the producers by
  default, or the datacenter clusters): records missing are baseline - aggregate when positive, extra
  ones (duplicates an at-least-once mirror wrote) aggregate - baseline when positive;
- completeness = (baseline - missing) / baseline over the buckets that can be judged: "100.000%" only when
  nothing is missing (rounded down, so 99.9996% never shows as complete);
- a bucket no baseline tier counted cannot be judged (the aggregate's records there are neither complete
  nor duplicates), and a baseline tier that published no counts at all is named: either makes the verdict
  "cannot judge", never 100%.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from backbone.client.audit.counts import AuditCount

DEFAULT_BASELINE = ("producer",)
DEFAULT_AGGREGATE = "aggregate"


@dataclass
class BucketCounts:
    """One topic's bucket: the count at each tier, and how the aggregate compares with the baseline."""

    topic: str
    bucket_start_ms: int
    bucket_ms: int
    tiers: dict[str, int] = field(default_factory=dict)
    expected: int = 0  # the baseline tiers' sum
    arrived: int = 0  # the aggregate tier's

    judged: bool = True  # some baseline tier counted it

    @property
    def missing(self) -> int:
        return max(0, self.expected - self.arrived)

    @property
    def extra(self) -> int:
        return max(0, self.arrived - self.expected) if self.judged else 0

    @property
    def label(self) -> str:
        return format_time(self.bucket_start_ms)

    @property
    def span(self) -> str:
        """`2026-05-01 14:00-14:10` (UTC)."""
        start = datetime.fromtimestamp(self.bucket_start_ms / 1000, UTC)
        end = datetime.fromtimestamp((self.bucket_start_ms + self.bucket_ms) / 1000, UTC)
        return f"{start:%Y-%m-%d %H:%M}-{end:%H:%M}"


@dataclass
class Report:
    baseline: tuple[str, ...]
    aggregate: str
    buckets: list[BucketCounts]
    tiers: list[str]
    duplicate_messages: int = 0
    unreported: list[str] = field(default_factory=list)
    """Baseline tiers that published no counts at all."""

    @property
    def expected(self) -> int:
        return sum(b.expected for b in self.buckets)

    @property
    def missing(self) -> int:
        return sum(b.missing for b in self.buckets)

    @property
    def extra(self) -> int:
        return sum(b.extra for b in self.buckets)

    @property
    def complete(self) -> bool:
        return self.missing == 0 and self.judgeable

    @property
    def judgeable(self) -> bool:
        """Every bucket has baseline counts, every baseline tier reported, and there is something to judge."""
        return bool(self.buckets) and not self.unreported and not self.unjudged_buckets()

    @property
    def verdict(self) -> str:
        if self.missing:
            return "incomplete"
        return "complete" if self.judgeable else "cannot judge"

    @property
    def completeness(self) -> float | None:
        """The fraction of the baseline's records found in the aggregate; None when nothing was expected."""
        return None if self.expected == 0 else (self.expected - self.missing) / self.expected

    def incomplete_buckets(self) -> list[BucketCounts]:
        return [b for b in self.buckets if b.missing]

    def unjudged_buckets(self) -> list[BucketCounts]:
        return [b for b in self.buckets if not b.judged]


def summarize(
    messages: Iterable[AuditCount],
    baseline: Sequence[str] = DEFAULT_BASELINE,
    aggregate: str = DEFAULT_AGGREGATE,
    topics: Iterable[str] | None = None,
    since_ms: int | None = None,
) -> Report:
    """Sum the messages per tier, topic and bucket (for the topics asked, for buckets ending after
    `since_ms`) and compare `aggregate` with the sum of the `baseline` tiers."""
    wanted = set(topics) if topics else None
    seen: set[tuple[str, int]] = set()
    duplicates = 0
    buckets: dict[tuple[str, int, int], BucketCounts] = {}
    tiers: set[str] = set()
    reported: set[str] = set()
    for message in messages:
        if (message.process, message.sequence) in seen:
            duplicates += 1
            continue
        seen.add((message.process, message.sequence))
        reported.add(message.tier)
        if not message.topic:
            continue  # a tier announcing that it counts: no records
        if wanted is not None and message.topic not in wanted:
            continue
        if since_ms is not None and message.bucket_start_ms + message.bucket_ms <= since_ms:
            continue
        key = (message.topic, message.bucket_start_ms, message.bucket_ms)
        bucket = buckets.get(key)
        if bucket is None:
            bucket = buckets[key] = BucketCounts(*key)
        bucket.tiers[message.tier] = bucket.tiers.get(message.tier, 0) + message.count
        tiers.add(message.tier)
    for bucket in buckets.values():
        bucket.expected = sum(bucket.tiers.get(tier, 0) for tier in baseline)
        bucket.arrived = bucket.tiers.get(aggregate, 0)
        bucket.judged = any(tier in bucket.tiers for tier in baseline)
    return Report(
        baseline=tuple(baseline),
        aggregate=aggregate,
        buckets=[buckets[key] for key in sorted(buckets)],
        tiers=_tier_order(tiers, baseline, aggregate),
        duplicate_messages=duplicates,
        unreported=[tier for tier in baseline if tier not in reported],
    )


def _tier_order(tiers: set[str], baseline: Sequence[str], aggregate: str) -> list[str]:
    """Baseline tiers first, the aggregate last, the others (clusters, mirrors) between, by name."""
    middle = sorted(tiers - set(baseline) - {aggregate})
    return [t for t in baseline if t in tiers] + middle + ([aggregate] if aggregate in tiers else [])


def format_percent(fraction: float) -> str:
    """Three decimals, rounded down: "100.000%" means nothing is missing."""
    return f"{math.floor(fraction * 100_000) / 1000:.3f}%"


def format_time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def render_text(report: Report) -> str:
    """Per topic and bucket the count at each tier and the bucket's completeness; then the verdict."""
    lines = []
    topic = None
    for bucket in report.buckets:
        if bucket.topic != topic:
            topic = bucket.topic
            lines.append(f"topic {topic}")
        counts = " ".join(f"{tier}={bucket.tiers.get(tier, 0)}" for tier in report.tiers)
        if bucket.judged:
            share = format_percent(
                (bucket.expected - bucket.missing) / bucket.expected if bucket.expected else 1.0
            )
        else:
            share = "cannot judge"
        notes = f" missing={bucket.missing}" if bucket.missing else ""
        notes += f" duplicates={bucket.extra}" if bucket.extra else ""
        lines.append(f"  {bucket.label} {counts} {share}{notes}")
    if not report.buckets:
        lines.append("no audit counts found for the topics and time asked: cannot judge")
    baseline = "+".join(report.baseline)
    for tier in report.unreported:
        lines.append(f"baseline tier {tier} published no counts: cannot judge what it handled")
    for bucket in report.unjudged_buckets():
        lines.append(f"no {baseline} counts for {bucket.topic} {bucket.span}: cannot judge")
    judged = "nothing to judge" if report.completeness is None else format_percent(report.completeness)
    lines.append(
        f"completeness of {report.aggregate} against {baseline}: {judged} "
        f"({report.expected - report.missing} of {report.expected} records"
        + (f", {report.extra} duplicates" if report.extra else "")
        + f"); verdict: {report.verdict}"
    )
    for bucket in report.incomplete_buckets():
        lines.append(
            f"missing: {bucket.topic} bucket {bucket.label}: {bucket.missing} of {bucket.expected} records"
        )
    return "\n".join(lines) + "\n"


def to_json(report: Report) -> dict[str, object]:
    return {
        "baseline": list(report.baseline),
        "aggregate": report.aggregate,
        "tiers": report.tiers,
        "complete": report.complete,
        "verdict": report.verdict,
        "unreported_baseline_tiers": report.unreported,
        "unjudged_buckets": [{"topic": b.topic, "bucket": b.label} for b in report.unjudged_buckets()],
        "completeness": report.completeness,
        "expected": report.expected,
        "missing": report.missing,
        "duplicates": report.extra,
        "duplicate_messages_dropped": report.duplicate_messages,
        "buckets": [
            {
                "topic": b.topic,
                "bucket_start_ms": b.bucket_start_ms,
                "bucket_ms": b.bucket_ms,
                "bucket": b.label,
                "tiers": b.tiers,
                "expected": b.expected,
                "arrived": b.arrived,
                "missing": b.missing,
                "duplicates": b.extra,
            }
            for b in report.buckets
        ],
        "missing_buckets": [
            {"topic": b.topic, "bucket": b.label, "bucket_start_ms": b.bucket_start_ms, "missing": b.missing}
            for b in report.incomplete_buckets()
        ],
    }
