"""Incremental fetch sessions (KIP-227) against a live broker, with clients that open them: kafka-python's
consumer and ours read every record of a many-partition topic through one session each, while records arrive
in one partition at a time, partitions are paused and resumed, and the assignment changes."""

from __future__ import annotations

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition
from test_broker_metrics import scrape, value

from backbone.client import Admin, Consumer, NewTopic, Producer, TopicPartition
from backbone.coordination import find_free_port

pytestmark = pytest.mark.integration

PARTITIONS = 6


@pytest.fixture
def broker_with_metrics(broker_factory):
    port = find_free_port()
    broker = broker_factory(1, metrics_port=port, offsets_topic_replication_factor=1)
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        admin.create_topics([NewTopic("views", PARTITIONS, 1)])
    return broker, port


def test_kafka_python_reads_everything_through_one_fetch_session(broker_with_metrics, wait_for) -> None:
    broker, port = broker_with_metrics
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest")
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    try:
        consumer.assign([KafkaTopicPartition("views", p) for p in range(PARTITIONS)])
        received: list[tuple[int, bytes]] = []

        def poll() -> list[tuple[int, bytes]]:
            for records in consumer.poll(timeout_ms=200).values():
                received.extend((r.partition, r.value) for r in records)
            return received

        sent: list[tuple[int, bytes]] = []
        for round_ in range(3):  # each round writes to one partition while the session's others stay idle
            for partition in range(PARTITIONS):
                value_ = b"r%d-p%d" % (round_, partition)
                producer.send("views", value=value_, partition=partition).get(timeout=30)
                sent.append((partition, value_))
                wait_for(lambda: len(poll()) >= len(sent), what=f"{len(sent)} records read")
        assert sorted(received) == sorted(sent)
        assert value(scrape(port), "backbone_broker_fetch_sessions") == 1  # the consumer's one session
    finally:
        producer.close(10)
        consumer.close()


def test_our_consumer_reads_through_a_session_across_pauses_and_a_new_assignment(
    broker_with_metrics, wait_for
) -> None:
    broker, port = broker_with_metrics
    partitions = [TopicPartition("views", p) for p in range(PARTITIONS)]
    with (
        Producer(bootstrap_servers=broker.bootstrap) as producer,
        Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest") as consumer,
    ):
        received: list[tuple[int, bytes]] = []

        def poll() -> list[tuple[int, bytes]]:
            for records in consumer.poll(timeout_ms=200).values():
                received.extend((r.partition, r.value) for r in records)
            return received

        def send(partition: int, value_: bytes) -> tuple[int, bytes]:
            producer.send("views", value_, partition=partition).get(timeout=30)
            return partition, value_

        consumer.assign(partitions)
        sent = [send(p, b"first-%d" % p) for p in range(PARTITIONS)]
        wait_for(lambda: len(poll()) >= len(sent), what="the first records")
        assert value(scrape(port), "backbone_broker_fetch_sessions") == 1

        # Paused partitions leave the session (they are forgotten) and come back on resume, from where
        # the consumer stands: nothing lost, nothing twice.
        consumer.pause(partitions[0], partitions[1])
        sent += [send(p, b"paused-%d" % p) for p in range(PARTITIONS)]
        wait_for(lambda: len(poll()) >= len(sent) - 2, what="the unpaused partitions' records")
        consumer.resume(partitions[0], partitions[1])
        wait_for(lambda: len(poll()) >= len(sent), what="the resumed partitions' records")
        assert sorted(received) == sorted(sent)

        # A new assignment: partitions 0 and 1 assigned anew, at their end, learn their high watermark
        # although nothing new was written to them (the session starts over for their new states); the
        # kept ones go on from where they were.
        consumer.assign(partitions[2:])
        consumer.assign(partitions)
        consumer.seek_to_end(partitions[0], partitions[1])
        wait_for(
            lambda: poll() is not None and consumer.highwater(partitions[0]) == 2,
            what="partition 0's high watermark",
        )
        sent.append(send(5, b"last"))
        wait_for(lambda: len(poll()) >= len(sent), what="the last record")
        assert sorted(received) == sorted(sent)
        assert value(scrape(port), "backbone_broker_fetch_sessions") == 1
    # Closing, the consumer told the broker to drop its session (the final epoch): the slot is free now.
    assert value(scrape(port), "backbone_broker_fetch_sessions") == 0
