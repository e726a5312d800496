"""Log compaction on a live broker: kafka-python produces to a compacted topic, and a consumer reading
from the beginning ends up seeing only the latest value of each key."""

from __future__ import annotations

import uuid

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import InvalidRecordError

pytestmark = pytest.mark.integration

KEYS = 20
ROUNDS = 8


def read_from_beginning(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of every record up to the partition's end offset, read by a fresh consumer."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.seek_to_beginning(partition)
        end = consumer.end_offsets([partition])[partition]
        records = []
        # Compaction leaves gaps, so read until the position (not a record count) reaches the end.
        while consumer.position(partition) < end:
            for batch in consumer.poll(timeout_ms=1000).values():
                records.extend((r.offset, r.key, r.value) for r in batch)
        return records
    finally:
        consumer.close()


def create_compacted_topic(bootstrap: str, prefix: str, *, segment_bytes: int) -> str:
    """A new one-partition compacted topic, cleaned as soon as anything in it is dirty; returns its name."""
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        configs = {
            "cleanup.policy": "compact",
            "segment.bytes": str(segment_bytes),
            "min.cleanable.dirty.ratio": "0.01",
        }
        admin.create_topics([NewTopic(topic, 1, 1, topic_configs=configs)])
    finally:
        admin.close()
    return topic


def test_a_compacted_topic_keeps_the_latest_value_of_each_key(broker_factory, wait_for) -> None:
    broker = broker_factory(1, log_cleaner_backoff_ms=200)
    topic = create_compacted_topic(broker.bootstrap, "compacted", segment_bytes=1024)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0)
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    try:
        for round_number in range(ROUNDS):
            for k in range(KEYS):
                key = f"key-{k}".encode()
                # The last round deletes key-0: its tombstone is what stays of it.
                value = None if (k == 0 and round_number == ROUNDS - 1) else f"r{round_number}".encode()
                offset = producer.send(topic, key=key, value=value, partition=0).get(timeout=30).offset
                latest[key] = (offset, value)
        # Unique keys after the last round close the segments holding it (the active one is never cleaned).
        for i in range(40):
            key = f"filler-{i}".encode()
            latest[key] = (
                producer.send(topic, key=key, value=b"x", partition=0).get(timeout=30).offset,
                b"x",
            )
        with pytest.raises(InvalidRecordError):
            producer.send(topic, key=None, value=b"keyless", partition=0).get(timeout=30)
    finally:
        producer.close(10)
    produced = KEYS * ROUNDS + 40
    expected = sorted((offset, key, value) for key, (offset, value) in latest.items())

    seen: list[tuple[int, bytes, bytes | None]] = []

    def compacted() -> bool:
        seen[:] = read_from_beginning(broker.bootstrap, topic)
        return seen == expected

    wait_for(compacted, timeout=90, interval=0.5, what="the cleaner to leave one record per key")
    assert len(seen) < produced
    assert (latest[b"key-0"][0], b"key-0", None) in seen  # the tombstone is within delete.retention.ms


def test_the_cleaner_runs_again_at_once_after_a_pass_that_cleaned(broker_factory, wait_for) -> None:
    # With the smallest offset map (1 MiB: 8,192 keys) two rounds of 16,384 keys take four passes. Kafka's
    # cleaner pauses log.cleaner.backoff.ms only after a pass that found nothing to clean, so all four
    # come one after the other; pausing after every pass would take three backoffs more.
    backoff_s = 30
    broker = broker_factory(
        1, log_cleaner_backoff_ms=backoff_s * 1000, log_cleaner_dedupe_buffer_size=1024 * 1024
    )
    topic = create_compacted_topic(broker.bootstrap, "passes", segment_bytes=65536)
    keys = 2 * 8192
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=20, batch_size=16384)
    latest: dict[bytes, tuple[int, bytes]] = {}
    try:
        for round_number in range(2):
            sent = [
                (
                    f"k{k}".encode(),
                    f"r{round_number}".encode(),
                    producer.send(
                        topic, key=f"k{k}".encode(), value=f"r{round_number}".encode(), partition=0
                    ),
                )
                for k in range(keys)
            ]
            for key, value, future in sent:
                latest[key] = (future.get(timeout=60).offset, value)
        # Unique keys close the segments holding the second round (the active one is never cleaned).
        for i in range(2000):
            key = f"filler-{i}".encode()
            latest[key] = (
                producer.send(topic, key=key, value=b"x" * 40, partition=0).get(timeout=30).offset,
                b"x" * 40,
            )
    finally:
        producer.close(10)
    expected = sorted((offset, key, value) for key, (offset, value) in latest.items())

    def passes() -> int:
        return broker.output_file.read_text(errors="replace").count(
            f"event=log_cleaned dir={broker.properties['log.dirs']}/{topic}-0"
        )

    wait_for(lambda: passes() >= 1, timeout=backoff_s + 60, interval=0.5, what="the cleaner's first pass")
    wait_for(
        lambda: passes() >= 4,
        timeout=backoff_s * 0.9,
        interval=0.5,
        what="three more passes without a backoff",
    )
    assert read_from_beginning(broker.bootstrap, topic) == expected
