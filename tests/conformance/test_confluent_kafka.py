"""confluent-kafka (librdkafka) against a live Backbone cluster: admin, producer and consumer APIs."""

from __future__ import annotations

import logging
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.conformance.support import PARTITIONS, Cluster, wait_until

pytestmark = pytest.mark.conformance

TIMEOUT = 30


@pytest.fixture(scope="module")
def admin(cluster: Cluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap})


def create(admin: AdminClient, name: str, partitions: int = PARTITIONS, **configs: str) -> None:
    futures = admin.create_topics([NewTopic(name, partitions, 3, config=configs)], operation_timeout=TIMEOUT)
    futures[name].result(TIMEOUT)


def produce(cluster: Cluster, topic: str, count: int, **config: object) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5, **config})
    errors: list[KafkaError] = []
    for i in range(count):
        producer.produce(
            topic, key=b"k%d" % i, value=b"v%d" % i, on_delivery=lambda e, _m: e and errors.append(e)
        )
    assert producer.flush(TIMEOUT) == 0
    assert errors == []


def test_list_topics_sees_every_broker_and_topic(cluster: Cluster, admin: AdminClient) -> None:
    name = cluster.topic("listed")
    create(admin, name)
    metadata = admin.list_topics(timeout=TIMEOUT)
    assert sorted(metadata.brokers) == [1, 2, 3]
    assert sorted(metadata.topics[name].partitions) == list(range(PARTITIONS))


def test_create_topics_answers_once_and_a_second_create_says_exists(
    cluster: Cluster, admin: AdminClient
) -> None:
    name = cluster.topic("created")
    create(admin, name, 2, **{"retention.ms": "60000"})
    again = admin.create_topics([NewTopic(name, 2, 3)], operation_timeout=TIMEOUT)[name]
    with pytest.raises(Exception) as raised:
        again.result(TIMEOUT)
    assert raised.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS


def test_pattern_subscription_receives_records(cluster: Cluster, admin: AdminClient) -> None:
    name = cluster.topic("dcpattern")
    create(admin, name)
    produce(cluster, name, 20)
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": cluster.topic("pattern-group"),
            "auto.offset.reset": "earliest",
            "topic.metadata.refresh.interval.ms": 500,
        }
    )
    try:
        consumer.subscribe([f"^{name[:9]}.*"])
        received: list[bytes] = []

        def all_received() -> bool:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None and message.topic() == name:
                received.append(message.value())
            return len(received) >= 20

        wait_until(all_received, timeout=TIMEOUT, what="20 records through a pattern subscription")
        assert sorted(received) == sorted(b"v%d" % i for i in range(20))
    finally:
        consumer.close()


def test_keyless_records_to_a_compacted_topic_are_named_in_record_errors(
    cluster: Cluster, admin: AdminClient
) -> None:
    # As librdkafka's test 0011: one batch, every tenth record without a key. Kafka fails the batch and
    # names the keyless records (KIP-467); librdkafka fails those with INVALID_RECORD, the others with
    # _INVALID_DIFFERENT_RECORD.
    name = cluster.topic("compact-keyless")
    create(admin, name, 1, **{"cleanup.policy": "compact"})
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap, "linger.ms": 200, "batch.num.messages": 1000}
    )
    outcomes: list[int] = []
    for i in range(100):
        key = None if i % 10 == 0 else b"k%d" % i
        producer.produce(
            name,
            key=key,
            value=b"v",
            partition=0,
            on_delivery=lambda e, _m: outcomes.append(e.code() if e else 0),
        )
    assert producer.flush(TIMEOUT) == 0
    assert outcomes.count(KafkaError.INVALID_RECORD) == 10
    assert outcomes.count(KafkaError._INVALID_DIFFERENT_RECORD) == 90


@pytest.mark.left_out(
    "transactions: init_transactions fails at once with TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
)
def test_init_transactions_fails_at_once_with_an_error_saying_why(cluster: Cluster) -> None:
    # Transactions are left out: the client must get a fatal, non-retriable error, not retry until timeout.
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": cluster.topic("txn")})
    with pytest.raises(KafkaException) as raised:
        producer.init_transactions(60)
    error = raised.value.args[0]
    assert error.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert not error.retriable()


def consume(consumer: Consumer, count: int, what: str) -> list:
    got: list = []

    def enough() -> bool:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got.append(message)
        return len(got) >= count

    wait_until(enough, timeout=TIMEOUT, what=what)
    return got


def test_idempotent_producer_writes_each_record_once_in_order(cluster: Cluster, admin: AdminClient) -> None:
    name = cluster.topic("idempotent")
    create(admin, name, 1)
    produce(cluster, name, 200, **{"enable.idempotence": True, "acks": "all"})
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": cluster.topic("g"),
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.assign([TopicPartition(name, 0, 0)])
        messages = consume(consumer, 200, "200 records")
        assert [m.offset() for m in messages] == list(range(200))
        assert [m.value() for m in messages] == [b"v%d" % i for i in range(200)]
    finally:
        consumer.close()


def test_cooperative_sticky_group_shares_and_rebalances(cluster: Cluster, admin: AdminClient) -> None:
    name = cluster.topic("cooperative")
    create(admin, name)
    group = cluster.topic("coop-group")
    config = {
        "bootstrap.servers": cluster.bootstrap,
        "group.id": group,
        "partition.assignment.strategy": "cooperative-sticky",
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 6000,
    }
    first, second = Consumer(config), Consumer(config)
    try:
        first.subscribe([name])
        wait_until(
            lambda: first.poll(0.2) is None and len(first.assignment()) == PARTITIONS,
            timeout=TIMEOUT,
            what="all partitions to the first",
        )
        second.subscribe([name])

        def shared() -> bool:
            first.poll(0.1)
            second.poll(0.1)
            return len(first.assignment()) + len(second.assignment()) == PARTITIONS and second.assignment()

        wait_until(shared, timeout=TIMEOUT, what="the partitions shared")
        assert {tp.partition for tp in first.assignment()}.isdisjoint(
            {tp.partition for tp in second.assignment()}
        )
    finally:
        first.close()
        second.close()


def test_offsets_for_times_and_incremental_assign(cluster: Cluster, admin: AdminClient) -> None:
    name = cluster.topic("times")
    create(admin, name, 2)
    producer = Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(10):
        producer.produce(name, value=b"v%d" % i, partition=i % 2, timestamp=1_000_000 + i * 100)
    assert producer.flush(TIMEOUT) == 0
    consumer = Consumer(
        {"bootstrap.servers": cluster.bootstrap, "group.id": cluster.topic("g"), "enable.auto.commit": False}
    )
    try:
        found = consumer.offsets_for_times(
            [TopicPartition(name, 0, 1_000_350), TopicPartition(name, 1, 1_000_350)], TIMEOUT
        )
        # Partition 0 holds times 0, 200, 400... (offset 2 is 1_000_400); partition 1 holds 100, 300, 500...
        assert [(tp.partition, tp.offset) for tp in found] == [(0, 2), (1, 2)]
        consumer.incremental_assign([TopicPartition(name, 0, 2)])
        assert [m.value() for m in consume(consumer, 3, "partition 0 from offset 2")] == [b"v4", b"v6", b"v8"]
        consumer.incremental_assign([TopicPartition(name, 1, 4)])
        assert [m.value() for m in consume(consumer, 1, "partition 1 from offset 4")] == [b"v9"]
        consumer.incremental_unassign([TopicPartition(name, 0)])
        assert [tp.partition for tp in consumer.assignment()] == [1]
    finally:
        consumer.close()


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.mark.left_out(
    "KIP-848 consumer groups: ConsumerGroupHeartbeat not listed, librdkafka reports it unsupported"
)
def test_kip848_consumer_groups_are_left_out_as_by_a_kafka_without_them(cluster: Cluster) -> None:
    # group.protocol=consumer needs ConsumerGroupHeartbeat (KIP-848), which ApiVersions does not list:
    # librdkafka finds it "not supported by broker" (its _UNSUPPORTED_FEATURE) and keeps the group unjoined,
    # exactly as against a Kafka broker without KIP-848.
    lines = Lines()
    logger = logging.getLogger(f"rdkafka-{uuid.uuid4().hex[:6]}")
    logger.addHandler(lines)
    logger.setLevel(logging.DEBUG)
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": cluster.topic("g"),
            "group.protocol": "consumer",
            "debug": "cgrp",
            "logger": logger,
        }
    )
    try:
        consumer.subscribe([cluster.topic("any")])

        def refused() -> bool:
            consumer.poll(0.2)
            return any(
                "ConsumerGroupHeartbeatRequest not supported by broker" in line for line in lines.lines
            )

        wait_until(refused, timeout=TIMEOUT, what="librdkafka to find KIP-848 unsupported")
        assert consumer.assignment() == []
    finally:
        consumer.close()
