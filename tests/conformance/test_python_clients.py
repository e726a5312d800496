"""kafka-python and aiokafka against a live Backbone cluster: admin, producer and consumer APIs, including
their idempotent producers and consumer groups."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import errors as aiokafka_errors
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from aiokafka.admin import NewPartitions as AioNewPartitions
from aiokafka.admin import NewTopic as AioNewTopic
from aiokafka.admin.config_resource import ConfigResource as AioConfigResource
from aiokafka.admin.config_resource import ConfigResourceType as AioConfigResourceType
from aiokafka.structs import TopicPartition as AioTopicPartition
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka import errors as kafka_errors
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewPartitions, NewTopic
from kafka.structs import OffsetAndMetadata

from tests.conformance.support import PARTITIONS, Cluster

pytestmark = pytest.mark.conformance

TIMEOUT_MS = 30_000


# -- kafka-python -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kp_admin(cluster: Cluster):
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    yield admin
    admin.close()


def kp_create(admin: KafkaAdminClient, name: str, partitions: int = PARTITIONS, **configs: str) -> None:
    admin.create_topics([NewTopic(name, partitions, 3, topic_configs=configs)], timeout_ms=TIMEOUT_MS)


def test_kafka_python_topics_partitions_and_configs(cluster: Cluster, kp_admin: KafkaAdminClient) -> None:
    name = cluster.topic("kp-topic")
    kp_create(kp_admin, name, 2, **{"retention.ms": "3600000"})
    assert name in kp_admin.list_topics()
    (described,) = kp_admin.describe_topics([name])
    assert (described["name"], len(described["partitions"])) == (name, 2)
    cluster_info = kp_admin.describe_cluster()
    assert sorted(b["broker_id"] for b in cluster_info["brokers"]) == [1, 2, 3]

    kp_admin.create_partitions({name: NewPartitions(3)}, timeout_ms=TIMEOUT_MS)
    kp_admin.alter_configs(
        [ConfigResource(ConfigResourceType.TOPIC, name, configs={"retention.ms": "7200000"})]
    )
    described_configs = kp_admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
    (by_name,) = described_configs.values()
    assert by_name[name]["retention.ms"]["value"] == "7200000"

    kp_admin.delete_topics([name], timeout_ms=TIMEOUT_MS)
    assert name not in kp_admin.list_topics()


def test_kafka_python_idempotent_producer_and_group_consumer(
    cluster: Cluster, kp_admin: KafkaAdminClient
) -> None:
    name = cluster.topic("kp-group")
    group = cluster.topic("kp-g")
    kp_create(kp_admin, name)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, enable_idempotence=True, acks="all")
    try:
        for i in range(40):
            producer.send(name, key=b"k%d" % i, value=b"v%d" % i)
        producer.flush(30)
    finally:
        producer.close(10)
    consumer = KafkaConsumer(
        name,
        bootstrap_servers=cluster.bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=TIMEOUT_MS,
    )
    try:
        values = set()
        for message in consumer:
            values.add(message.value)
            if len(values) == 40:
                break
        assert values == {b"v%d" % i for i in range(40)}
        consumer.commit()
        assert group in {g["group_id"] for g in kp_admin.list_groups()}
        description = kp_admin.describe_groups([group])[group]
        assert description["group_state"] == "Stable" and len(description["members"]) == 1
    finally:
        consumer.close()
    offsets = kp_admin.list_group_offsets({group: None})[group]
    assert sum(o.offset for o in offsets.values()) == 40
    kp_admin.alter_group_offsets(group, {TopicPartition(name, 0): OffsetAndMetadata(0, "", -1)})
    assert kp_admin.list_group_offsets({group: None})[group][TopicPartition(name, 0)].offset == 0
    kp_admin.delete_groups([group])
    assert group not in {g["group_id"] for g in kp_admin.list_groups()}


def test_kafka_python_offsets_and_records(cluster: Cluster, kp_admin: KafkaAdminClient) -> None:
    name = cluster.topic("kp-offsets")
    kp_create(kp_admin, name, 1)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap)
    try:
        for i in range(10):
            producer.send(name, value=b"v", partition=0, timestamp_ms=1_000_000 + i)
        producer.flush(30)
    finally:
        producer.close(10)
    partition = TopicPartition(name, 0)
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap)
    try:
        assert consumer.beginning_offsets([partition]) == {partition: 0}
        assert consumer.end_offsets([partition]) == {partition: 10}
        assert consumer.offsets_for_times({partition: 1_000_004})[partition].offset == 4
    finally:
        consumer.close()
    kp_admin.delete_records({partition: 3}, timeout_ms=TIMEOUT_MS)
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap)
    try:
        assert consumer.beginning_offsets([partition]) == {partition: 3}
    finally:
        consumer.close()


def test_kafka_python_pattern_subscription(cluster: Cluster, kp_admin: KafkaAdminClient) -> None:
    name = cluster.topic("dckp")
    kp_create(kp_admin, name, 2)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap)
    try:
        for i in range(10):
            producer.send(name, value=b"v%d" % i)
        producer.flush(30)
    finally:
        producer.close(10)
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap,
        group_id=cluster.topic("kp-pattern"),
        auto_offset_reset="earliest",
        consumer_timeout_ms=TIMEOUT_MS,
        metadata_max_age_ms=1000,
    )
    try:
        consumer.subscribe(pattern=f"^{name}$")
        values = set()
        for message in consumer:
            values.add(message.value)
            if len(values) == 10:
                break
        assert values == {b"v%d" % i for i in range(10)}
    finally:
        consumer.close()


@pytest.mark.left_out(
    "transactions: init_transactions fails at once with TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
)
def test_kafka_python_init_transactions_fails_at_once(cluster: Cluster) -> None:
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, transactional_id=cluster.topic("kp-txn"))
    try:
        with pytest.raises(kafka_errors.TransactionalIdAuthorizationFailedError):
            producer.init_transactions()
    finally:
        producer.close(5)


# -- aiokafka -----------------------------------------------------------------------------------------------


async def test_aiokafka_admin(cluster: Cluster) -> None:
    name = cluster.topic("aio-topic")
    admin = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    await admin.start()
    try:
        response = await admin.create_topics([AioNewTopic(name, 2, 3)], timeout_ms=TIMEOUT_MS)
        assert [(t[0], t[1]) for t in response.topic_errors] == [(name, 0)]
        assert name in await admin.list_topics()
        (described,) = await admin.describe_topics([name])
        assert len(described["partitions"]) == 2
        assert sorted(b["node_id"] for b in (await admin.describe_cluster())["brokers"]) == [1, 2, 3]
        await admin.create_partitions({name: AioNewPartitions(3)}, timeout_ms=TIMEOUT_MS)
        resource = AioConfigResource(AioConfigResourceType.TOPIC, name, configs={"retention.ms": "7200000"})
        await admin.alter_configs([resource])
        (configs,) = await admin.describe_configs([AioConfigResource(AioConfigResourceType.TOPIC, name)])
        values = {c[0]: c[1] for c in configs.resources[0][4]}
        assert values["retention.ms"] == "7200000"
        await admin.delete_topics([name], timeout_ms=TIMEOUT_MS)
        assert name not in await admin.list_topics()
    finally:
        await admin.close()


async def test_aiokafka_idempotent_producer_group_consumer_and_offsets(cluster: Cluster) -> None:
    name = cluster.topic("aio-group")
    group = cluster.topic("aio-g")
    admin = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    await admin.start()
    producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, enable_idempotence=True, acks="all")
    consumer = AIOKafkaConsumer(
        name, bootstrap_servers=cluster.bootstrap, group_id=group, auto_offset_reset="earliest"
    )
    try:
        await admin.create_topics([AioNewTopic(name, PARTITIONS, 3)], timeout_ms=TIMEOUT_MS)
        await producer.start()
        for i in range(40):
            await producer.send_and_wait(name, key=b"k%d" % i, value=b"v%d" % i)
        await consumer.start()
        values = set()
        async with asyncio.timeout(30):
            while len(values) < 40:
                for messages in (await consumer.getmany(timeout_ms=500)).values():
                    values.update(m.value for m in messages)
        assert values == {b"v%d" % i for i in range(40)}
        await consumer.commit()
        assert group in {g[0] for g in await admin.list_consumer_groups()}
        (described,) = await admin.describe_consumer_groups([group])
        assert described.groups[0][1] == group
        offsets = await admin.list_consumer_group_offsets(group)
        assert sum(o.offset for o in offsets.values()) == 40
        partition = AioTopicPartition(name, 0)
        low = await admin.delete_records({partition: RecordsToDelete(1)}, timeout_ms=TIMEOUT_MS)
        assert low == {partition: 1}
    finally:
        await consumer.stop()
        await producer.stop()
        await admin.close()


async def test_aiokafka_pattern_subscription(cluster: Cluster) -> None:
    name = cluster.topic("dcaio")
    producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=cluster.bootstrap,
        group_id=cluster.topic("aio-pattern"),
        auto_offset_reset="earliest",
        metadata_max_age_ms=1000,
    )
    try:
        await producer.start()
        for i in range(10):
            await producer.send_and_wait(name, value=b"v%d" % i)  # auto-creates the topic
        await consumer.start()
        consumer.subscribe(pattern=f"^{name}$")
        values: set[bytes] = set()
        async with asyncio.timeout(30):
            while len(values) < 10:
                for messages in (await consumer.getmany(timeout_ms=500)).values():
                    values.update(m.value for m in messages)
        assert values == {b"v%d" % i for i in range(10)}
    finally:
        await consumer.stop()
        await producer.stop()


@pytest.mark.left_out("transactions: start() fails at once with TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
async def test_aiokafka_transactional_producer_fails_to_start_at_once(cluster: Cluster) -> None:
    txn = cluster.topic("aio-txn")
    producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, transactional_id=txn)
    try:
        with pytest.raises(aiokafka_errors.TransactionalIdAuthorizationFailed):
            await asyncio.wait_for(producer.start(), 60)
    finally:
        await producer.stop()
