"""Standard Kafka clients against a live broker: kafka-python and Debian's kcat (librdkafka)."""

from __future__ import annotations

import subprocess

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from backbone.client.producer.partitioner import partition_for_key
from tests.helpers.names import unique_name

pytestmark = pytest.mark.integration

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PARTITIONS = 3


def consume_all(bootstrap: str, topic: str, expected: int, timeout_s: float = 30.0) -> list:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=int(timeout_s * 1000))
    try:
        partitions = sorted(consumer.partitions_for_topic(topic) or ())
        consumer.assign([TopicPartition(topic, p) for p in partitions])
        consumer.seek_to_beginning()
        records = []
        for record in consumer:
            records.append(record)
            if len(records) >= expected:
                break
        return records
    finally:
        consumer.close()


@pytest.fixture
def cluster(broker_factory):
    return broker_factory(1, num_partitions=PARTITIONS)


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_round_trip_with_every_codec(cluster, codec: str) -> None:
    topic = unique_name(f"kp-{codec}")
    producer = KafkaProducer(
        bootstrap_servers=cluster.bootstrap,
        compression_type=None if codec == "none" else codec,
        linger_ms=5,
    )
    sent = {}
    try:
        for i in range(300):
            key = None if i % 3 == 0 else f"user-{i % 17}".encode()
            value = f"event {i} ".encode() * 5
            headers = [("trace", f"t{i}".encode()), ("empty", b"")] if i % 2 else []
            metadata = producer.send(topic, value=value, key=key, headers=headers).get(timeout=30)
            sent[value] = (key, headers, metadata)
        producer.flush(30)
    finally:
        producer.close(10)
    received = consume_all(cluster.bootstrap, topic, len(sent))
    assert len(received) == len(sent)
    for record in received:
        key, headers, metadata = sent[record.value]
        assert record.key == key
        assert [(h[0], h[1]) for h in record.headers] == headers
        assert (record.partition, record.offset) == (metadata.partition, metadata.offset)
        if key is not None:
            assert record.partition == partition_for_key(key, PARTITIONS)
    for partition in range(PARTITIONS):
        offsets = sorted(r.offset for r in received if r.partition == partition)
        assert offsets == list(range(len(offsets))), "offsets must be dense from 0"


def run_kcat(*args: str, data: str | None = None, timeout: float = 60.0) -> str:
    result = subprocess.run(
        ["kcat", *args], input=data, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert result.returncode == 0, f"kcat {' '.join(args)} failed: {result.stderr}"
    return result.stdout


@pytest.mark.parametrize("codec", CODECS)
def test_kcat_produces_and_consumes_with_every_codec(cluster, codec: str) -> None:
    topic = unique_name(f"kcat-{codec}")
    lines = [f"key-{i % 7}:value {i}" for i in range(200)]
    run_kcat(
        "-P",
        "-b",
        cluster.bootstrap,
        "-t",
        topic,
        "-K",
        ":",
        "-z",
        codec,
        "-H",
        "origin=kcat",
        "-X",
        "partitioner=murmur2_random",
        data="\n".join(lines) + "\n",
    )
    out = run_kcat(
        "-C",
        "-b",
        cluster.bootstrap,
        "-t",
        topic,
        "-o",
        "beginning",
        "-e",
        "-q",
        "-f",
        "%p|%o|%k|%s|%h\n",
    )
    rows = [line.split("|") for line in out.splitlines() if line]
    assert len(rows) == len(lines)
    assert sorted(f"{k}:{v}" for _, _, k, v, _ in rows) == sorted(lines)
    for partition, _, key, _, headers in rows:
        assert headers == "origin=kcat"
        # librdkafka's murmur2 partitioner matches the Java client's, and so ours.
        assert int(partition) == partition_for_key(key.encode(), PARTITIONS)


def test_records_cross_between_clients(cluster) -> None:
    topic = unique_name("cross")
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap)
    try:
        for i in range(50):
            producer.send(topic, key=b"shared-key", value=b"from kafka-python %d" % i)
        producer.flush(30)
    finally:
        producer.close(10)
    run_kcat(
        "-P",
        "-b",
        cluster.bootstrap,
        "-t",
        topic,
        "-K",
        ":",
        "-X",
        "partitioner=murmur2_random",
        data="\n".join(f"shared-key:from kcat {i}" for i in range(50)) + "\n",
    )
    received = consume_all(cluster.bootstrap, topic, 100)
    assert len(received) == 100
    # The same key from two different clients lands on one partition, in send order per client.
    assert {r.partition for r in received} == {partition_for_key(b"shared-key", PARTITIONS)}
    values = [r.value for r in sorted(received, key=lambda r: r.offset)]
    assert values[:50] == [b"from kafka-python %d" % i for i in range(50)]
    assert values[50:] == [b"from kcat %d" % i for i in range(50)]
    out = run_kcat("-C", "-b", cluster.bootstrap, "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%s\n")
    assert sorted(out.splitlines()) == sorted(v.decode() for v in values)
