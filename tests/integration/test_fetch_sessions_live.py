"""Incremental fetch sessions (KIP-227) with a client that opens them: kafka-python's consumer reads every
record of a many-partition topic through one session while records arrive in one partition at a time."""

from __future__ import annotations

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from test_broker_metrics import scrape, value

from backbone.client import Admin, NewTopic
from backbone.coordination import find_free_port

pytestmark = pytest.mark.integration

PARTITIONS = 6


def test_kafka_python_reads_everything_through_one_fetch_session(broker_factory, wait_for) -> None:
    port = find_free_port()
    broker = broker_factory(1, metrics_port=port, offsets_topic_replication_factor=1)
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        admin.create_topics([NewTopic("views", PARTITIONS, 1)])
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest")
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    try:
        consumer.assign([TopicPartition("views", p) for p in range(PARTITIONS)])
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
