"""The audit report's arithmetic: deltas summed per tier, exact duplicate messages dropped, the aggregate
compared with the baseline tiers per bucket, and completeness that reads 100.000% only when complete."""

from __future__ import annotations

import pytest

from backbone.client.audit import AuditCount
from backbone.client.audit.report import format_percent, render_text, summarize, to_json

pytestmark = pytest.mark.unit

BUCKET = 600_000
_sequences: dict[str, int] = {}


def count(tier: str, topic: str, bucket: int, n: int, process: str | None = None) -> AuditCount:
    process = process or f"{tier}-process"
    _sequences[process] = _sequences.get(process, 0) + 1
    return AuditCount(tier, process, _sequences[process], topic, bucket * BUCKET, BUCKET, n, 0)


def test_deltas_from_several_processes_are_summed_per_tier() -> None:
    messages = [
        count("producer", "pv", 1, 400, "app-1"),
        count("producer", "pv", 1, 100, "app-1"),
        count("producer", "pv", 1, 500, "app-2"),
        count("dc1", "pv", 1, 1000),
        count("aggregate", "pv", 1, 600),
        count("aggregate", "pv", 1, 400),
    ]
    report = summarize(messages)
    [bucket] = report.buckets
    assert bucket.tiers == {"producer": 1000, "dc1": 1000, "aggregate": 1000}
    assert report.complete and report.completeness == 1.0
    assert report.tiers == ["producer", "dc1", "aggregate"]


def test_an_exact_duplicate_message_counts_once() -> None:
    produced = count("producer", "pv", 1, 10)
    arrived = count("aggregate", "pv", 1, 10)
    report = summarize([produced, arrived, produced, arrived, arrived])
    assert report.buckets[0].tiers == {"producer": 10, "aggregate": 10}
    assert report.duplicate_messages == 3
    assert report.complete


def test_missing_records_are_named_by_bucket_and_extra_ones_are_duplicates_not_gains() -> None:
    messages = [
        count("producer", "pv", 1, 1000),
        count("aggregate", "pv", 1, 992),
        count("producer", "pv", 2, 500),
        count("aggregate", "pv", 2, 510),  # an at-least-once mirror copied 10 twice
    ]
    report = summarize(messages)
    assert not report.complete
    assert (report.expected, report.missing, report.extra) == (1500, 8, 10)
    assert format_percent(report.completeness) == "99.466%"
    [incomplete] = report.incomplete_buckets()
    assert (incomplete.topic, incomplete.bucket_start_ms, incomplete.missing) == ("pv", BUCKET, 8)
    text = render_text(report)
    assert "missing: pv bucket 1970-01-01T00:10:00Z: 8 of 1000 records" in text
    assert "99.466%" in text and "duplicates=10" in text
    as_json = to_json(report)
    assert as_json["complete"] is False
    assert as_json["missing_buckets"] == [
        {"topic": "pv", "bucket": "1970-01-01T00:10:00Z", "bucket_start_ms": BUCKET, "missing": 8}
    ]


def test_a_topic_the_aggregate_never_saw_is_zero_percent() -> None:
    report = summarize(
        [count("producer", "secret", 3, 7), count("producer", "pv", 3, 5), count("aggregate", "pv", 3, 5)]
    )
    assert report.missing == 7 and format_percent(report.completeness) == "41.666%"
    assert summarize([count("producer", "pv", 4, 5), count("aggregate", "pv", 4, 5)], topics=["pv"]).complete


def test_completeness_is_rounded_down_so_only_complete_shows_100() -> None:
    assert format_percent(1.0) == "100.000%"
    assert format_percent(999_999 / 1_000_000) == "99.999%"
    assert format_percent(0.992) == "99.200%"
    assert format_percent(0.0) == "0.000%"


def test_baseline_tiers_are_summed_and_buckets_filtered_by_topic_and_time() -> None:
    messages = [
        count("dc1", "pv", 1, 30),
        count("dc2", "pv", 1, 20),
        count("aggregate", "pv", 1, 50),
        count("dc1", "pv", 5, 9),
        count("dc1", "other", 5, 9),
    ]
    report = summarize(messages, baseline=["dc1", "dc2"], topics=["pv"], since_ms=2 * BUCKET)
    assert [(b.topic, b.bucket_start_ms) for b in report.buckets] == [("pv", 5 * BUCKET)]
    assert report.missing == 9
    both = summarize(messages, baseline=["dc1", "dc2"], topics=["pv"], since_ms=2 * BUCKET - 1)
    assert both.missing == 9 and len(both.buckets) == 2  # a bucket ending after `since` is kept
    whole = summarize(messages, baseline=["dc1", "dc2"], topics=["pv"])
    assert whole.buckets[0].expected == 50 and whole.buckets[0].arrived == 50


def test_no_counts_cannot_be_judged_and_says_so() -> None:
    report = summarize([])
    assert not report.complete and report.completeness is None and report.verdict == "cannot judge"
    text = render_text(report)
    assert "no audit counts found" in text and "100.000%" not in text


def test_a_bucket_without_producer_counts_cannot_be_judged_not_called_complete() -> None:
    report = summarize([count("dc1", "pageviews", 85, 22067), count("aggregate", "pageviews", 85, 22067)])
    assert report.verdict == "cannot judge" and not report.complete
    assert report.extra == 0, "the aggregate's records are not duplicates of nothing"
    text = render_text(report)
    assert "no producer counts for pageviews 1970-01-01 14:10-14:20: cannot judge" in text
    assert "100.000%" not in text
    assert to_json(report)["verdict"] == "cannot judge"


def test_a_baseline_tier_that_never_reported_is_named() -> None:
    messages = [count("dc1", "pv", 1, 10), count("aggregate", "pv", 1, 20)]
    report = summarize(messages, baseline=["dc1", "dc2"])
    assert report.unreported == ["dc2"] and report.verdict == "cannot judge"
    assert "baseline tier dc2 published no counts" in render_text(report)
    assert summarize([*messages, count("dc2", "pv", 1, 10)], baseline=["dc1", "dc2"]).verdict == "complete"
