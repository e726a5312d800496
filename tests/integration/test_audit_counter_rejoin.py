"""A cluster's audit counter dropped from its group between publishing its counts and committing their
offsets (its event loop stalled past the session timeout, as when its cluster's ZooKeeper or coordinator
went away): when the group gives it the partitions back from the older committed offset, it must not count
those records again. A double count at a baseline tier (dc1, dc2) makes the aggregate look incomplete."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
from mirror_support import GROUP_SETTINGS

from backbone.client import Admin, KafkaClientError, KafkaError, NewTopic, Producer, TopicPartition
from backbone.client.audit import read_audit_counts
from backbone.mirror.audit import AuditorSettings, ClusterAuditor

pytestmark = pytest.mark.integration

SESSION_TIMEOUT_MS = 2000
FIRST, THEN = 100, 50


def produce(bootstrap: str, count: int) -> None:
    with Producer(bootstrap_servers=bootstrap, acks="all") as producer:
        for number in range(count):
            producer.send("views", b"%d" % number)


async def until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(0.05)


async def count_through_a_lost_commit(bootstrap: str) -> ClusterAuditor:
    views = TopicPartition("views", 0)
    auditor = ClusterAuditor(
        # Checkpoints only when the test asks: the automatic ones come once an hour.
        AuditorSettings(bootstrap, "dc1", bootstrap, interval_ms=3_600_000),
        consumer_config={"session.timeout.ms": SESSION_TIMEOUT_MS, "heartbeat.interval.ms": 300},
    )
    stop = asyncio.Event()
    running = asyncio.create_task(auditor.run(stop))
    try:
        await until(lambda: auditor.counted_total >= FIRST, 60, f"the first {FIRST} records counted")
        await auditor.checkpoint()
        assert auditor._committed.get(views) == FIRST
        await asyncio.to_thread(produce, bootstrap, THEN)
        await until(lambda: auditor.counted_total >= FIRST + THEN, 60, "the next records counted")
        # The loop stalls past the session timeout: the coordinator drops the member. The next checkpoint
        # publishes the counts; their commit fails, and the group assigns the partition again.
        time.sleep(2 * SESSION_TIMEOUT_MS / 1000)
        deadline = time.monotonic() + 60
        while auditor._committed.get(views) != FIRST + THEN:
            assert time.monotonic() < deadline, "the offsets after the lost commit were never committed"
            with contextlib.suppress(KafkaError, KafkaClientError):
                await auditor.checkpoint()
            await asyncio.sleep(0.2)
    finally:
        stop.set()
        await asyncio.wait_for(running, 60)
    return auditor


def test_a_counter_dropped_from_its_group_after_publishing_counts_each_record_once(
    broker_factory, caplog
) -> None:
    broker = broker_factory(1, **{k.replace(".", "_"): v for k, v in GROUP_SETTINGS.items()})
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        admin.create_topics([NewTopic("views", 1, 1)])
    produce(broker.bootstrap, FIRST)
    caplog.set_level("INFO", logger="backbone.mirror.audit")

    auditor = asyncio.run(count_through_a_lost_commit(broker.bootstrap))

    counts, _ = read_audit_counts(broker.bootstrap)
    counted = sum(c.count for c in counts if c.tier == "dc1" and c.topic == "views")
    print(f"views: produced {FIRST + THEN}, counted at tier dc1 {counted}, in memory {auditor.counted_total}")
    assert counted == FIRST + THEN
    assert auditor.counted_total == FIRST + THEN
    assert "event=audit_resumed_after_published" in caplog.text, "the partition was assigned again"
