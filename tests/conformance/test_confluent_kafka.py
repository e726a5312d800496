"""confluent-kafka (librdkafka) against a live Backbone cluster: admin, producer and consumer APIs."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from conftest import PARTITIONS, Cluster, wait_until

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


def test_init_transactions_fails_at_once_with_an_error_saying_why(cluster: Cluster) -> None:
    # Transactions are left out: the client must get a fatal, non-retriable error, not retry until timeout.
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": cluster.topic("txn")})
    with pytest.raises(KafkaException) as raised:
        producer.init_transactions(60)
    error = raised.value.args[0]
    assert error.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert not error.retriable()
