"""Records cross between our client and kafka-python through a real broker, in both directions."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition

from backbone.client import Admin, Consumer, NewTopic, Producer, TopicPartition
from tests.helpers.names import unique_name

pytestmark = pytest.mark.integration

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PARTITIONS = 2
COUNT = 200


def record(i: int) -> tuple[bytes | None, bytes, list[tuple[str, bytes]]]:
    key = None if i % 4 == 0 else f"key-{i % 9}".encode()
    headers = [("n", str(i).encode()), ("origin", b"test")] if i % 2 else []
    return key, f"value {i} ".encode() * 8, headers


def check(received: list, sent: dict) -> None:
    """Every record arrived once, with the key, headers, partition, offset and timestamp it was sent with."""
    assert len(received) == COUNT
    assert len({message.value for message in received}) == COUNT
    for message in received:
        key, headers, metadata = sent[message.value]
        assert message.key == key
        assert list(message.headers) == headers
        assert (message.partition, message.offset) == (metadata.partition, metadata.offset)
        assert message.timestamp == metadata.timestamp


@pytest.fixture
def topic(broker_factory) -> tuple[str, str]:
    broker = broker_factory(1)
    name = unique_name("interop")
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        admin.create_topics([NewTopic(name, PARTITIONS, 1)])
    return broker.bootstrap, name


@pytest.mark.parametrize("codec", CODECS)
def test_our_producer_to_kafka_python_consumer(topic: tuple[str, str], codec: str) -> None:
    bootstrap, name = topic
    with Producer(bootstrap_servers=bootstrap, compression_type=codec) as producer:
        futures = {}
        for i in range(COUNT):
            key, value, headers = record(i)
            futures[value] = (key, headers, producer.send(name, value, key=key, headers=headers))
        producer.flush(30)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=20_000)
    try:
        consumer.assign([KafkaTopicPartition(name, p) for p in range(PARTITIONS)])
        consumer.seek_to_beginning()
        received = []
        for message in consumer:
            received.append(message)
            if len(received) >= COUNT:
                break
    finally:
        consumer.close()
    check(received, {value: (key, headers, f.get(timeout=0)) for value, (key, headers, f) in futures.items()})


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_producer_to_our_consumer(topic: tuple[str, str], codec: str) -> None:
    bootstrap, name = topic
    producer = KafkaProducer(
        bootstrap_servers=bootstrap, compression_type=None if codec == "none" else codec, linger_ms=5
    )
    sent = {}
    try:
        for i in range(COUNT):
            key, value, headers = record(i)
            sent[value] = (key, headers, producer.send(name, value=value, key=key, headers=headers))
        producer.flush(30)
        sent = {value: (key, headers, f.get(timeout=30)) for value, (key, headers, f) in sent.items()}
    finally:
        producer.close(10)
    received = []
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(name, p) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 30
        while len(received) < COUNT and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                received.extend(records)
    check(received, sent)


def test_both_clients_put_a_key_on_the_same_partition(topic: tuple[str, str]) -> None:
    bootstrap, name = topic
    keys = [f"user-{i}".encode() for i in range(30)]
    with Producer(bootstrap_servers=bootstrap) as ours:
        our_partitions = [ours.send(name, b"ours", key=k).get(timeout=30).partition for k in keys]
    theirs = KafkaProducer(bootstrap_servers=bootstrap)
    try:
        their_partitions = [theirs.send(name, b"theirs", key=k).get(timeout=30).partition for k in keys]
    finally:
        theirs.close(10)
    assert our_partitions == their_partitions
