"""A cluster's audit counter dropped from its group between publishing its counts and committing their
offsets (its event loop stalled past the session timeout, as when its cluster's ZooKeeper or coordinator
went away): when the group gives it the partitions back from the older committed offset, it must not count
those records again, also when the coordinator cannot say what was committed. Nor may a commit that
fails end the process (a restarted one counts again what it read since its last commit). A double count
at a baseline tier (dc1, dc2) makes the aggregate look incomplete."""

from __future__ import annotations

import asyncio
import time

import pytest
from mirror_support import GROUP_SETTINGS

from backbone.client import Admin, KafkaTimeoutError, NewTopic, Producer, TopicPartition
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


def coordinator_silent(auditor: ClusterAuditor) -> None:
    """The group's coordinator does not answer the auditor's committed-offsets lookups (as when it moved
    and the lookup ran out of time)."""

    async def committed(partitions, **_):
        raise KafkaTimeoutError("the committed offsets were not fetched within default.api.timeout.ms")

    auditor.consumer.committed = committed  # type: ignore[method-assign]


async def count_then_more(auditor: ClusterAuditor, bootstrap: str) -> None:
    """The first records counted, published and committed; then more produced and counted."""
    await until(lambda: auditor.counted_total >= FIRST, 60, f"the first {FIRST} records counted")
    await auditor.checkpoint()
    assert auditor._committed.get(TopicPartition("views", 0)) == FIRST
    await asyncio.to_thread(produce, bootstrap, THEN)
    await until(lambda: auditor.counted_total >= FIRST + THEN, 60, "the next records counted")


async def count_through_a_lost_commit(bootstrap: str, silent_coordinator: bool) -> ClusterAuditor:
    views = TopicPartition("views", 0)
    auditor = ClusterAuditor(
        # Checkpoints only when the test asks: the automatic ones come once an hour.
        AuditorSettings(bootstrap, "dc1", bootstrap, interval_ms=3_600_000),
        consumer_config={"session.timeout.ms": SESSION_TIMEOUT_MS, "heartbeat.interval.ms": 300},
    )
    if silent_coordinator:
        coordinator_silent(auditor)
    stop = asyncio.Event()
    running = asyncio.create_task(auditor.run(stop))
    try:
        await count_then_more(auditor, bootstrap)
        # The loop stalls past the session timeout: the coordinator drops the member. The next checkpoint
        # publishes the counts; their commit fails, and the group assigns the partition again.
        time.sleep(2 * SESSION_TIMEOUT_MS / 1000)
        deadline = time.monotonic() + 60
        while auditor._committed.get(views) != FIRST + THEN:
            assert time.monotonic() < deadline, "the offsets after the lost commit were never committed"
            await auditor.checkpoint()  # a failed commit is logged and tried again, never raised
            await asyncio.sleep(0.2)
    finally:
        stop.set()
        await asyncio.wait_for(running, 60)
    return auditor


@pytest.mark.parametrize("silent_coordinator", [False, True], ids=["lookup-answered", "lookup-failed"])
def test_a_counter_dropped_from_its_group_after_publishing_counts_each_record_once(
    broker_factory, caplog, silent_coordinator
) -> None:
    broker = broker_factory(1, **{k.replace(".", "_"): v for k, v in GROUP_SETTINGS.items()})
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        admin.create_topics([NewTopic("views", 1, 1)])
    produce(broker.bootstrap, FIRST)
    caplog.set_level("INFO", logger="backbone.mirror.audit")

    auditor = asyncio.run(count_through_a_lost_commit(broker.bootstrap, silent_coordinator))

    counts, _ = read_audit_counts(broker.bootstrap)
    counted = sum(c.count for c in counts if c.tier == "dc1" and c.topic == "views")
    print(f"views: produced {FIRST + THEN}, counted at tier dc1 {counted}, in memory {auditor.counted_total}")
    assert counted == FIRST + THEN
    assert auditor.counted_total == FIRST + THEN
    assert "event=audit_resumed_after_published" in caplog.text, "the partition was assigned again"


def test_a_counter_whose_commits_time_out_keeps_counting_and_commits_later(broker_factory) -> None:
    broker = broker_factory(1, **{k.replace(".", "_"): v for k, v in GROUP_SETTINGS.items()})
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        admin.create_topics([NewTopic("views", 1, 1)])
    produce(broker.bootstrap, FIRST)

    async def count() -> tuple[int, int]:
        auditor = ClusterAuditor(AuditorSettings(broker.bootstrap, "dc1", broker.bootstrap, interval_ms=200))
        commit, failures = auditor.consumer.commit, [0]

        async def commit_timing_out_twice(offsets, **kwargs):
            if failures[0] < 2:
                failures[0] += 1
                raise KafkaTimeoutError("the commit was not answered within default.api.timeout.ms")
            await commit(offsets, **kwargs)

        auditor.consumer.commit = commit_timing_out_twice  # type: ignore[method-assign]
        stop = asyncio.Event()
        running = asyncio.create_task(auditor.run(stop))
        try:
            views = TopicPartition("views", 0)
            await until(lambda: auditor._committed.get(views) == FIRST, 60, "the offsets committed")
            assert not running.done(), "the counter ended at a failed commit"
        finally:
            stop.set()
            await asyncio.wait_for(running, 60)
        return auditor.counted_total, failures[0]

    counted_in_memory, failures = asyncio.run(count())

    counts, _ = read_audit_counts(broker.bootstrap)
    assert failures == 2
    assert counted_in_memory == FIRST
    assert sum(c.count for c in counts if c.tier == "dc1" and c.topic == "views") == FIRST


def test_a_counter_revoked_while_its_counts_cannot_be_published_counts_each_record_once(
    broker_factory,
) -> None:
    # The counts of a revoked partition stay with the publisher until the audit cluster takes them, and
    # its offsets are not committed meanwhile: when the partition comes back, from the older committed
    # offset, the counter must resume where its counts end.
    broker = broker_factory(1, **{k.replace(".", "_"): v for k, v in GROUP_SETTINGS.items()})
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        admin.create_topics([NewTopic("views", 1, 1)])
    produce(broker.bootstrap, FIRST)
    views = TopicPartition("views", 0)

    def create_clicks() -> None:
        with Admin(bootstrap_servers=broker.bootstrap) as admin:
            admin.create_topics([NewTopic("clicks", 1, 1)])

    async def count() -> int:
        auditor = ClusterAuditor(
            AuditorSettings(broker.bootstrap, "dc1", broker.bootstrap, interval_ms=3_600_000),
            consumer_config={"metadata.max.age.ms": 500},
        )
        stop = asyncio.Event()
        running = asyncio.create_task(auditor.run(stop))
        try:
            await count_then_more(auditor, broker.bootstrap)
            publish = auditor.publisher.publish

            async def audit_cluster_away(timeout: float | None = 30.0) -> bool:
                return False

            auditor.publisher.publish = audit_cluster_away  # type: ignore[method-assign]
            # A new topic the counter's pattern matches: the group rebalances and revokes `views`.
            await asyncio.to_thread(create_clicks)
            clicks = TopicPartition("clicks", 0)
            await until(lambda: clicks in auditor.consumer.assignment(), 60, "the rebalance for clicks")
            auditor.publisher.publish = publish  # type: ignore[method-assign]
            deadline = time.monotonic() + 60
            while auditor._committed.get(views) != FIRST + THEN:
                assert time.monotonic() < deadline, "the offsets after the revocation were never committed"
                await auditor.checkpoint()
                await asyncio.sleep(0.2)
        finally:
            stop.set()
            await asyncio.wait_for(running, 60)
        return auditor.counted_total

    counted_in_memory = asyncio.run(count())

    counts, _ = read_audit_counts(broker.bootstrap)
    assert sum(c.count for c in counts if c.tier == "dc1" and c.topic == "views") == FIRST + THEN
    assert counted_in_memory == FIRST + THEN
