"""kafka-python and aiokafka against a live Backbone cluster: admin, producer and consumer APIs."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka import errors as aiokafka_errors
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin import NewTopic as AioNewTopic
from conftest import PARTITIONS, Cluster
from kafka import KafkaProducer
from kafka import errors as kafka_errors
from kafka.admin import KafkaAdminClient
from kafka.admin import NewTopic as KpNewTopic

pytestmark = pytest.mark.conformance


async def test_aiokafka_create_topics(cluster: Cluster) -> None:
    name = cluster.topic("aio-created")
    admin = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    await admin.start()
    try:
        response = await admin.create_topics([AioNewTopic(name, PARTITIONS, 3)], timeout_ms=30_000)
        assert [(t[0], t[1]) for t in response.topic_errors] == [(name, 0)]
        assert name in await admin.list_topics()
    finally:
        await admin.close()


def test_kafka_python_create_topics(cluster: Cluster) -> None:
    name = cluster.topic("kp-created")
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        admin.create_topics([KpNewTopic(name, PARTITIONS, 3)], timeout_ms=30_000)
        assert name in admin.list_topics()
    finally:
        admin.close()


def test_kafka_python_init_transactions_fails_at_once(cluster: Cluster) -> None:
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, transactional_id=cluster.topic("kp-txn"))
    try:
        with pytest.raises(kafka_errors.TransactionalIdAuthorizationFailedError):
            producer.init_transactions()
    finally:
        producer.close(5)


async def test_aiokafka_transactional_producer_fails_to_start_at_once(cluster: Cluster) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=cluster.bootstrap, transactional_id=cluster.topic("aio-txn")
    )
    try:
        with pytest.raises(aiokafka_errors.TransactionalIdAuthorizationFailed):
            await asyncio.wait_for(producer.start(), 60)
    finally:
        await producer.stop()
