"""confluent-kafka's AdminClient, call by call, against a live Backbone cluster."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    ElectionType,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

from tests.conformance.support import PARTITIONS, Cluster, wait_until

pytestmark = pytest.mark.conformance

TIMEOUT = 30


@pytest.fixture(scope="module")
def admin(cluster: Cluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap})


def result(future):
    return future.result(TIMEOUT)


def create(admin: AdminClient, name: str, partitions: int = PARTITIONS, **configs: str) -> None:
    result(
        admin.create_topics([NewTopic(name, partitions, 3, config=configs)], operation_timeout=TIMEOUT)[name]
    )


def produce(
    cluster: Cluster, topic: str, count: int, partition: int = 0, timestamps: list[int] | None = None
) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5})
    for i in range(count):
        timestamp = timestamps[i] if timestamps else 0
        producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=partition, timestamp=timestamp)
    assert producer.flush(TIMEOUT) == 0


def test_describe_cluster(cluster: Cluster, admin: AdminClient) -> None:
    description = result(admin.describe_cluster(request_timeout=TIMEOUT))
    assert sorted(node.id for node in description.nodes) == [1, 2, 3]
    assert description.controller.id in (1, 2, 3)
    assert description.cluster_id


def test_describe_topics(cluster: Cluster, admin: AdminClient) -> None:
    name = cluster.topic("described")
    create(admin, name)
    description = result(admin.describe_topics(TopicCollection([name]), request_timeout=TIMEOUT)[name])
    assert description.name == name
    assert [p.id for p in description.partitions] == list(range(PARTITIONS))
    assert all(len(p.replicas) == 3 and p.leader is not None for p in description.partitions)


def test_describe_topics_of_an_unknown_topic(cluster: Cluster, admin: AdminClient) -> None:
    name = cluster.topic("never-made")
    with pytest.raises(KafkaException) as raised:
        result(admin.describe_topics(TopicCollection([name]), request_timeout=TIMEOUT)[name])
    assert raised.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_delete_topics(cluster: Cluster, admin: AdminClient) -> None:
    name = cluster.topic("deleted")
    create(admin, name)
    assert result(admin.delete_topics([name], operation_timeout=TIMEOUT)[name]) is None
    wait_until(lambda: name not in admin.list_topics(timeout=TIMEOUT).topics, what="the topic gone")


def test_create_partitions(cluster: Cluster, admin: AdminClient) -> None:
    name = cluster.topic("grown")
    create(admin, name, 2)
    assert result(admin.create_partitions([NewPartitions(name, 5)], operation_timeout=TIMEOUT)[name]) is None
    wait_until(
        lambda: len(admin.list_topics(name, timeout=TIMEOUT).topics[name].partitions) == 5,
        what="5 partitions",
    )


def test_describe_alter_and_incrementally_alter_configs(cluster: Cluster, admin: AdminClient) -> None:
    name = cluster.topic("configured")
    create(admin, name, 1, **{"retention.ms": "3600000"})
    topic = ConfigResource(ResourceType.TOPIC, name)
    configs = result(admin.describe_configs([topic], request_timeout=TIMEOUT)[topic])
    assert configs["retention.ms"].value == "3600000"
    assert configs["cleanup.policy"].value == "delete"

    changed = ConfigResource(ResourceType.TOPIC, name, set_config={"retention.ms": "7200000"})
    result(admin.alter_configs([changed], request_timeout=TIMEOUT)[changed])
    incremental = ConfigResource(
        ResourceType.TOPIC,
        name,
        incremental_configs=[
            ConfigEntry("max.message.bytes", "200000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    result(admin.incremental_alter_configs([incremental], request_timeout=TIMEOUT)[incremental])
    configs = result(admin.describe_configs([topic], request_timeout=TIMEOUT)[topic])
    assert (configs["retention.ms"].value, configs["max.message.bytes"].value) == ("7200000", "200000")

    broker = ConfigResource(ResourceType.BROKER, "1")
    assert (
        result(admin.describe_configs([broker], request_timeout=TIMEOUT)[broker])["num.partitions"].value
        == "4"
    )


def test_list_offsets_with_every_spec(cluster: Cluster, admin: AdminClient) -> None:
    name = cluster.topic("offsets")
    create(admin, name, 1)
    base = int(time.time() * 1000) - 60_000
    stamps = [base + 10 * i for i in range(10)]
    stamps[4] = base + 1_000  # the largest timestamp, at offset 4
    produce(cluster, name, 10, timestamps=stamps)
    partition = TopicPartition(name, 0)
    specs = {
        "earliest": (OffsetSpec.earliest(), 0),
        "latest": (OffsetSpec.latest(), 10),
        "for_timestamp": (OffsetSpec.for_timestamp(base + 25), 3),
        "max_timestamp": (OffsetSpec.max_timestamp(), 4),
    }
    for what, (spec, expected) in specs.items():
        answer = result(admin.list_offsets({partition: spec}, request_timeout=TIMEOUT)[partition])
        assert answer.offset == expected, what


def test_delete_records(cluster: Cluster, admin: AdminClient) -> None:
    name = cluster.topic("trimmed")
    create(admin, name, 1)
    produce(cluster, name, 10)
    partition = TopicPartition(name, 0, 6)
    deleted = result(admin.delete_records([partition], operation_timeout=TIMEOUT)[partition])
    assert deleted.low_watermark == 6
    earliest = TopicPartition(name, 0)
    assert result(admin.list_offsets({earliest: OffsetSpec.earliest()})[earliest]).offset == 6


def test_elect_leaders(cluster: Cluster, admin: AdminClient) -> None:
    name = cluster.topic("elected")
    create(admin, name, 2)
    answer = result(
        admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(name, 0), TopicPartition(name, 1)])
    )
    # Already led by their preferred replicas: Kafka answers ELECTION_NOT_NEEDED for each.
    assert {tp.partition: tp.error.code() for tp in answer} == {
        0: KafkaError.ELECTION_NOT_NEEDED,
        1: KafkaError.ELECTION_NOT_NEEDED,
    }


def test_consumer_groups_and_their_offsets(cluster: Cluster, admin: AdminClient) -> None:
    name = cluster.topic("grouped")
    group = cluster.topic("group")
    create(admin, name, 2)
    produce(cluster, name, 5)
    consumer = Consumer(
        {"bootstrap.servers": cluster.bootstrap, "group.id": group, "auto.offset.reset": "earliest"}
    )
    try:
        consumer.subscribe([name])
        seen: list[bytes] = []

        def five() -> bool:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen.append(message.value())
            return len(seen) >= 5

        wait_until(five, timeout=TIMEOUT, what="5 records")
        consumer.commit(asynchronous=False)
        listed = result(admin.list_consumer_groups(request_timeout=TIMEOUT))
        assert group in {g.group_id for g in listed.valid}
        described = result(admin.describe_consumer_groups([group], request_timeout=TIMEOUT)[group])
        assert described.state.name == "STABLE" and len(described.members) == 1
    finally:
        consumer.close()

    request = ConsumerGroupTopicPartitions(group, [TopicPartition(name, 0)])
    offsets = result(admin.list_consumer_group_offsets([request])[group])
    assert [(tp.partition, tp.offset) for tp in offsets.topic_partitions] == [(0, 5)]
    altered = ConsumerGroupTopicPartitions(group, [TopicPartition(name, 0, 2)])
    result(admin.alter_consumer_group_offsets([altered])[group])
    offsets = result(admin.list_consumer_group_offsets([request])[group])
    assert [(tp.partition, tp.offset) for tp in offsets.topic_partitions] == [(0, 2)]
    assert result(admin.delete_consumer_groups([group], request_timeout=TIMEOUT)[group]) is None
    listed = result(admin.list_consumer_groups(request_timeout=TIMEOUT))
    assert group not in {g.group_id for g in listed.valid}


def test_describe_acls_without_an_authorizer_lists_none(cluster: Cluster, admin: AdminClient) -> None:
    # This cluster runs without `authorizer.class.name`, so the broker answers SECURITY_DISABLED; librdkafka
    # reports that answer as an empty list (the ACL matrix with an authorizer is in tests/integration).
    from confluent_kafka.admin import AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType

    any_acl = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
    )
    assert result(admin.describe_acls(any_acl, request_timeout=TIMEOUT)) == []
