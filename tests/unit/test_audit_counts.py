"""Audit counts: records bucketed by timestamp, counted per batch, taken as deltas with fresh sequence
numbers, and encoded as the documented JSON message."""

from __future__ import annotations

import json
import threading

import pytest

from backbone.cli import UsageError
from backbone.cli.audit import parse_since
from backbone.client.audit import AuditCount, AuditCounter, bucket_start

pytestmark = pytest.mark.unit

MINUTE = 60_000


def test_buckets_are_aligned_on_the_epoch() -> None:
    assert bucket_start(0, 600_000) == 0
    assert bucket_start(599_999, 600_000) == 0
    assert bucket_start(600_000, 600_000) == 600_000
    assert bucket_start(1_700_000_123_456, 600_000) == 1_699_999_800_000


def test_a_batch_in_one_bucket_counts_once_and_one_spanning_two_counts_each_record() -> None:
    counter = AuditCounter("producer", MINUTE, process="p1")
    counter.add_timestamps("pageviews", [MINUTE + 5, MINUTE + 1, MINUTE + 59_999])
    counter.add_timestamps("pageviews", [2 * MINUTE - 1, 2 * MINUTE, 2 * MINUTE + 3, 3 * MINUTE])
    counter.add_timestamps("pageviews", [])
    counter.add("clicks", 10)
    taken = {(m.topic, m.bucket_start_ms): m.count for m in counter.take(now_ms=99)}
    assert taken == {
        ("clicks", 0): 1,
        ("pageviews", MINUTE): 4,
        ("pageviews", 2 * MINUTE): 2,
        ("pageviews", 3 * MINUTE): 1,
    }


def test_each_take_is_a_delta_with_new_sequence_numbers() -> None:
    counter = AuditCounter("dc1", MINUTE, process="p1")
    counter.add("t", 5, 3)
    first = counter.take(now_ms=1000)
    assert counter.take() == []  # nothing new: no message
    counter.add("t", 6, 2)
    second = counter.take(now_ms=2000)
    assert [(m.count, m.sequence) for m in first + second] == [(3, 1), (2, 2)]
    assert {m.process for m in first + second} == {"p1"}
    assert second[0].emitted_at_ms == 2000 and second[0].bucket_ms == MINUTE and second[0].tier == "dc1"


def test_concurrent_counting_loses_nothing() -> None:
    counter = AuditCounter("producer", MINUTE)
    taken: list[AuditCount] = []

    def count() -> None:
        for _ in range(2000):
            counter.add_timestamps("t", [1, 2])

    threads = [threading.Thread(target=count) for _ in range(4)]
    for thread in threads:
        thread.start()
    while any(t.is_alive() for t in threads):
        taken += counter.take()
    taken += counter.take()
    assert sum(m.count for m in taken) == 4 * 2000 * 2
    assert len({m.sequence for m in taken}) == len(taken)


def test_process_ids_differ_between_counters() -> None:
    assert AuditCounter("a").process != AuditCounter("a").process


def test_messages_round_trip_as_the_documented_json() -> None:
    message = AuditCount("mirror-dc1-aggregate", "host:1:ab", 7, "pageviews", 600_000, 600_000, 42, 600_123)
    fields = json.loads(message.encode())
    assert fields == {
        "tier": "mirror-dc1-aggregate",
        "process": "host:1:ab",
        "sequence": 7,
        "topic": "pageviews",
        "bucket_start_ms": 600_000,
        "bucket_ms": 600_000,
        "count": 42,
        "emitted_at_ms": 600_123,
    }
    assert AuditCount.decode(message.encode()) == message


@pytest.mark.parametrize(
    "value",
    [
        b"",
        b"not json",
        b"[]",
        b'{"tier": "x"}',
        b"\xff\xfe",
        None,
        b'{"tier":"a","process":"p",'
        b'"sequence":1,"topic":"t","bucket_start_ms":0,"bucket_ms":0,"count":1,"emitted_at_ms":0}',
    ],
)
def test_anything_else_is_refused_with_value_error(value: bytes | None) -> None:
    with pytest.raises(ValueError):
        AuditCount.decode(value)  # type: ignore[arg-type]


def test_a_bucket_must_be_positive() -> None:
    with pytest.raises(ValueError):
        AuditCounter("producer", 0)


def test_since_takes_durations_iso_times_and_epoch_ms() -> None:
    now = 10 * 86_400_000
    assert parse_since("30m", now) == now - 30 * MINUTE
    assert parse_since("2h", now) == now - 120 * MINUTE
    assert parse_since("1d", now) == now - 86_400_000
    assert parse_since("1700000000000", now) == 1_700_000_000_000
    assert parse_since("1970-01-01T00:10:00Z", now) == 10 * MINUTE
    assert parse_since("1970-01-01T00:10:00", now) == 10 * MINUTE
    with pytest.raises(UsageError):
        parse_since("yesterday", now)


def test_a_mirror_audits_only_when_told_where_to_publish() -> None:
    from backbone.mirror.config import MirrorConfig

    base = {"source.bootstrap.servers": "a:1", "target.bootstrap.servers": "b:2", "source.alias": "dc1"}
    assert MirrorConfig.from_properties({**base, "topics": "t"}).audit_bootstrap == ""
    audited = MirrorConfig.from_properties(
        {**base, "topics": "t", "audit.bootstrap.servers": "b:2", "audit.bucket.ms": "60000"}
    )
    assert (audited.audit_bootstrap, audited.audit_topic, audited.audit_bucket_ms) == (
        "b:2",
        "__audit",
        60_000,
    )
