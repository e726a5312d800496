"""kafka-python and aiokafka against a live Backbone cluster: admin, producer and consumer APIs."""

from __future__ import annotations

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin import NewTopic as AioNewTopic
from conftest import PARTITIONS, Cluster
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
