"""Our Producer and Consumer against a real broker: every codec, keys, headers, acks, seeks, restarts."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator

import pytest

from backbone.client import (
    Admin,
    Consumer,
    ConsumerRecord,
    NewTopic,
    Producer,
    RecordMetadata,
    TimestampType,
    TopicPartition,
)
from backbone.client.producer.partitioner import partition_for_key
from backbone.protocol.errors import OffsetOutOfRangeError
from tests.helpers.names import unique_name

pytestmark = pytest.mark.integration

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PARTITIONS = 3


@pytest.fixture
def cluster(broker_factory):
    return broker_factory(1, num_partitions=PARTITIONS)


@pytest.fixture
def topic(cluster) -> Iterator[str]:
    name = unique_name("client")
    with Admin(bootstrap_servers=cluster.bootstrap) as admin:
        admin.create_topics([NewTopic(name, PARTITIONS, 1)])
    yield name


def consume(
    bootstrap: str, topic: str, expected: int, timeout_s: float = 30.0, **options
) -> list[ConsumerRecord]:
    """Every record of the topic from the beginning, until `expected` arrived or `timeout_s` passed."""
    options.setdefault("auto_offset_reset", "earliest")
    records: list[ConsumerRecord] = []
    with Consumer(bootstrap_servers=bootstrap, **options) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        deadline = time.monotonic() + timeout_s
        while len(records) < expected and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                records.extend(batch)
    return records


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_with_every_codec(cluster, topic: str, codec: str) -> None:
    sent: dict[bytes, tuple[bytes | None, list, RecordMetadata]] = {}
    with Producer(bootstrap_servers=cluster.bootstrap, compression_type=codec, linger_ms=5) as producer:
        futures = []
        for i in range(500):
            key = None if i % 3 == 0 else f"user-{i % 17}".encode()
            value = f"event {i} ".encode() * 10
            headers = [("trace", f"t{i}".encode()), ("empty", b"")] if i % 2 else []
            futures.append((value, key, headers, producer.send(topic, value, key=key, headers=headers)))
        producer.flush(30)
        for value, key, headers, future in futures:
            sent[value] = (key, headers, future.get(timeout=30))
    records = consume(cluster.bootstrap, topic, len(sent))
    assert len(records) == len(sent)
    for record in records:
        key, headers, metadata = sent[record.value]
        assert record.key == key
        assert list(record.headers) == headers
        assert (record.partition, record.offset) == (metadata.partition, metadata.offset)
        assert record.timestamp == metadata.timestamp
        assert record.timestamp_type == TimestampType.CREATE_TIME
        if key is not None:
            assert record.partition == partition_for_key(key, PARTITIONS)
    by_partition: dict[int, list[int]] = {}
    for record in records:
        by_partition.setdefault(record.partition, []).append(record.offset)
    for offsets in by_partition.values():
        assert offsets == list(range(len(offsets))), "offsets are dense and in order"


@pytest.mark.parametrize(("acks", "idempotent"), [(0, False), (1, False), ("all", False), ("all", True)])
def test_every_acks_setting(cluster, topic: str, acks: object, idempotent: bool) -> None:
    options = {"acks": acks, "enable_idempotence": idempotent}
    with Producer(bootstrap_servers=cluster.bootstrap, **options) as producer:
        futures = [producer.send(topic, b"v%d" % i, partition=0) for i in range(200)]
        producer.flush(30)
        offsets = [f.get(timeout=30).offset for f in futures]
    assert offsets == ([-1] * 200 if acks == 0 else list(range(200)))
    records = consume(cluster.bootstrap, topic, 200)
    assert [r.value for r in records] == [b"v%d" % i for i in range(200)]


def test_unkeyed_records_spread_over_partitions_in_whole_batches(cluster, topic: str) -> None:
    with Producer(bootstrap_servers=cluster.bootstrap, batch_size=4096, linger_ms=50) as producer:
        futures = [producer.send(topic, b"x" * 200) for _ in range(300)]
        producer.flush(30)
        partitions = [f.get(timeout=30).partition for f in futures]
    assert len(set(partitions)) > 1, "the sticky partitioner moves on as batches fill"
    runs = 1 + sum(1 for a, b in itertools.pairwise(partitions) if a != b)
    assert runs <= 300 * 214 // 4096 + 2, "records stay on one partition until its batch is full"


def test_records_sent_while_the_broker_restarts_arrive_once_in_order(cluster, topic: str) -> None:
    with Producer(bootstrap_servers=cluster.bootstrap, retry_backoff_ms=50, linger_ms=0) as producer:
        first = [producer.send(topic, b"a%d" % i, partition=1) for i in range(50)]
        producer.flush(30)
        cluster.stop(timeout=15)
        during = [producer.send(topic, b"b%d" % i, partition=1) for i in range(50)]
        cluster.start()
        producer.flush(60)
        offsets = [f.get(timeout=60).offset for f in first + during]
    assert offsets == list(range(100))
    records = [r for r in consume(cluster.bootstrap, topic, 100) if r.partition == 1]
    assert [r.value for r in records] == [b"a%d" % i for i in range(50)] + [b"b%d" % i for i in range(50)]


def test_seek_by_offset_beginning_end_and_timestamp(cluster, topic: str) -> None:
    tp = TopicPartition(topic, 0)
    base = 1_700_000_000_000
    with Producer(bootstrap_servers=cluster.bootstrap) as producer:
        for i in range(100):
            producer.send(topic, b"v%d" % i, partition=0, timestamp_ms=base + i * 1000)
        producer.flush(30)
    with Consumer(bootstrap_servers=cluster.bootstrap, auto_offset_reset="none") as consumer:
        consumer.assign([tp])
        assert consumer.beginning_offsets([tp]) == {tp: 0}
        assert consumer.end_offsets([tp]) == {tp: 100}

        def next_offsets(count: int) -> list[int]:
            got: list[int] = []
            for _ in range(60):  # bounded: 60 polls of up to 500 ms
                got.extend(
                    r.offset for r in consumer.poll(timeout_ms=500, max_records=count - len(got)).get(tp, [])
                )
                if len(got) >= count:
                    break
            return got

        consumer.seek(tp, 42)
        assert next_offsets(3) == [42, 43, 44]
        consumer.seek_to_beginning(tp)
        assert consumer.position(tp) == 0
        assert next_offsets(2) == [0, 1]
        consumer.seek_to_end(tp)
        assert consumer.position(tp) == 100
        consumer.seek_to_timestamp(base + 57_500, tp)
        assert next_offsets(2) == [58, 59]
        consumer.seek(tp, 500)
        with pytest.raises(OffsetOutOfRangeError, match="out of range"):
            next_offsets(1)


def test_consumer_reads_records_as_they_are_produced(cluster, topic: str) -> None:
    tp = TopicPartition(topic, 2)
    with (
        Consumer(bootstrap_servers=cluster.bootstrap, fetch_max_wait_ms=100) as consumer,
        Producer(bootstrap_servers=cluster.bootstrap) as producer,
    ):
        consumer.assign([tp])
        consumer.seek_to_end(tp)
        assert consumer.position(tp) == 0
        producer.send(topic, b"live", partition=2).get(timeout=30)
        values = []
        for _ in range(40):  # bounded: 40 polls of up to 500 ms
            values.extend(r.value for r in consumer.poll(timeout_ms=500).get(tp, []))
            if values:
                break
    assert values == [b"live"]


def test_a_waiting_fetch_is_answered_as_soon_as_a_record_is_appended(cluster, topic: str) -> None:
    # The fetch waits at the broker for up to fetch.max.wait.ms (20 s): an append to either partition in it
    # must answer it at once, not when the wait runs out.
    partitions = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    with (
        Consumer(bootstrap_servers=cluster.bootstrap, fetch_max_wait_ms=20_000) as consumer,
        Producer(bootstrap_servers=cluster.bootstrap) as producer,
    ):
        consumer.assign(partitions)
        consumer.seek_to_end(*partitions)
        assert [consumer.position(tp) for tp in partitions] == [0, 0]
        assert consumer.poll(timeout_ms=500) == {}  # meanwhile a fetch went out and waits at the broker
        sent = time.monotonic()
        producer.send(topic, b"now", partition=1).get(timeout=30)
        polled = consumer.poll(timeout_ms=15_000)
        waited = time.monotonic() - sent
    assert [r.value for r in polled.get(partitions[1], [])] == [b"now"]
    assert waited < 5.0


def test_offsets_for_times_names_the_exact_record(cluster, topic: str) -> None:
    tp = TopicPartition(topic, 0)
    base = 1_700_000_000_000
    with Producer(bootstrap_servers=cluster.bootstrap, linger_ms=100) as producer:
        for i in range(100):  # one batch
            producer.send(topic, b"v%d" % i, partition=0, timestamp_ms=base + i * 1000)
        producer.flush(30)
    with Consumer(bootstrap_servers=cluster.bootstrap) as consumer:
        found = consumer.offsets_for_times({tp: base + 57_500})
    assert found[tp] is not None
    assert (found[tp].offset, found[tp].timestamp) == (58, base + 58_000)


@pytest.mark.parametrize("threshold", [0, 1 << 30], ids=["always-sendfile", "always-read"])
def test_both_fetch_paths_serve_the_same_records(broker_factory, threshold: int) -> None:
    """`fetch.sendfile.threshold.bytes` picks how the broker sends records: 0 sends every region with
    sendfile, a threshold above any fetch reads every region into memory. Both serve every byte."""
    broker = broker_factory(1, num_partitions=PARTITIONS, fetch_sendfile_threshold_bytes=threshold)
    name = unique_name("paths")
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        admin.create_topics([NewTopic(name, PARTITIONS, 1)])
    # Small batches and large ones (about 256 KiB), so fetches hold regions of very different sizes.
    sent = [(b"small-%d" % i, b"v" * (i % 50)) for i in range(300)]
    sent += [(b"large-%d" % i, bytes([i % 256]) * 2000) for i in range(400)]
    with Producer(bootstrap_servers=broker.bootstrap, batch_size=256 * 1024, linger_ms=20) as producer:
        for key, value in sent:
            producer.send(name, value, key=key, partition=0)
        producer.flush(timeout=30)
    received = consume(broker.bootstrap, name, len(sent), max_partition_fetch_bytes=1 << 20)
    assert [(r.key, r.value) for r in received] == sent
