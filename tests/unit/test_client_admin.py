"""The async admin client against the fake cluster: every operation, and errors raised per key."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from backbone.client.admin.client import AsyncAdmin
from backbone.client.admin.descriptions import ConfigResource, ConfigResourceType, NewTopic, OffsetSpec
from backbone.client.structs import OffsetAndTimestamp, TopicPartition
from backbone.protocol.api import ApiKey
from backbone.protocol.errors import (
    InvalidPartitionsError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from backbone.protocol.records import RecordBatchBuilder
from tests.helpers.fake_cluster import FakeCluster

pytestmark = pytest.mark.unit

TOPIC = ConfigResource(ConfigResourceType.TOPIC, "a")


@pytest.fixture
async def admin(fake: FakeCluster) -> AsyncIterator[AsyncAdmin]:
    async with AsyncAdmin(bootstrap_servers=fake.bootstrap, default_api_timeout_ms=5000) as client:
        yield client


async def test_create_describe_and_delete_topics(fake: FakeCluster, admin: AsyncAdmin) -> None:
    assert await admin.create_topics([NewTopic("a", 3, 1, configs={"retention.ms": "1000"}), "b"]) == {
        "a": None,
        "b": None,
    }
    assert await admin.list_topics() == {"a", "b"}
    described = (await admin.describe_topics(["a"]))["a"]
    assert [(p.partition, p.leader, p.replicas, p.isr) for p in described.partitions] == [
        (0, 0, (0,), (0,)),
        (1, 1, (1,), (1,)),
        (2, 0, (0,), (0,)),
    ]
    assert {node for node, key, _ in fake.requests if key == ApiKey.CREATE_TOPICS} == {0}, (
        "sent to the controller"
    )
    assert await admin.delete_topics(["b"]) == {"b": None}
    assert await admin.list_topics() == {"a"}


async def test_validate_only_creates_nothing(admin: AsyncAdmin) -> None:
    await admin.create_topics([NewTopic("v", 1)], validate_only=True)
    assert await admin.list_topics() == set()


async def test_failures_raise_their_own_class_and_keep_every_result(admin: AsyncAdmin) -> None:
    await admin.create_topics(["a"])
    with pytest.raises(TopicAlreadyExistsError) as caught:
        await admin.create_topics(["a", NewTopic("bad", 0), "fine"])
    assert set(caught.value.errors) == {"a", "bad"}  # type: ignore[attr-defined]
    assert isinstance(caught.value.errors["bad"], InvalidPartitionsError)  # type: ignore[attr-defined]
    assert caught.value.results == {"fine": None}  # type: ignore[attr-defined]
    assert "also failed: bad: InvalidPartitionsError" in str(caught.value)
    with pytest.raises(UnknownTopicOrPartitionError):
        await admin.delete_topics(["nope"])
    with pytest.raises(UnknownTopicOrPartitionError):
        await admin.describe_topics(["nope"])


async def test_create_partitions(admin: AsyncAdmin) -> None:
    await admin.create_topics([NewTopic("a", 2)])
    await admin.create_partitions({"a": 5})
    assert len((await admin.describe_topics(["a"]))["a"].partitions) == 5
    with pytest.raises(InvalidPartitionsError, match="already has 5 partitions"):
        await admin.create_partitions({"a": 3})


async def test_configs_are_described_and_altered_incrementally(admin: AsyncAdmin) -> None:
    await admin.create_topics(
        [NewTopic("a", 1, configs={"retention.ms": "1000", "cleanup.policy": "delete"})]
    )
    configs = (await admin.describe_configs([TOPIC]))[TOPIC]
    assert configs["retention.ms"].value == "1000"
    await admin.alter_configs({TOPIC: {"retention.ms": None, "segment.ms": "60000"}})
    configs = (await admin.describe_configs([TOPIC]))[TOPIC]
    assert {name: entry.value for name, entry in configs.items()} == {
        "cleanup.policy": "delete",
        "segment.ms": "60000",
    }
    missing = ConfigResource(ConfigResourceType.TOPIC, "missing")
    with pytest.raises(UnknownTopicOrPartitionError):
        await admin.describe_configs([missing])


async def test_broker_configs_go_to_that_broker(fake: FakeCluster, admin: AsyncAdmin) -> None:
    broker = ConfigResource(ConfigResourceType.BROKER, "1")
    await admin.alter_configs({broker: {"log.retention.ms": "5"}})
    assert (await admin.describe_configs([broker]))[broker]["log.retention.ms"].value == "5"
    assert {node for node, key, _ in fake.requests if key == ApiKey.DESCRIBE_CONFIGS} == {1}


async def test_describe_cluster(fake: FakeCluster, admin: AsyncAdmin) -> None:
    cluster = await admin.describe_cluster()
    assert cluster.cluster_id == "fake-cluster"
    assert cluster.controller_id == 0
    assert [(b.node_id, b.port) for b in cluster.brokers] == [(0, fake.ports[0]), (1, fake.ports[1])]


async def test_records_can_be_deleted_and_offsets_listed(fake: FakeCluster, admin: AsyncAdmin) -> None:
    fake.create_topic("a", 1)
    builder = RecordBatchBuilder()
    for i in range(10):
        builder.append(None, b"v", timestamp=1_000 + i)
    fake.append_raw("a", 0, builder.build())
    tp = TopicPartition("a", 0)
    assert await admin.list_offsets({tp: "latest"}) == {tp: OffsetAndTimestamp(10, -1)}
    assert await admin.list_offsets({tp: 1_004}) == {tp: OffsetAndTimestamp(4, 1_004)}
    assert await admin.delete_records({tp: 6}) == {tp: 6}
    assert (await admin.list_offsets({tp: OffsetSpec.EARLIEST}))[tp].offset == 6
    with pytest.raises(UnknownTopicOrPartitionError, match="does not exist"):
        await admin.delete_records({TopicPartition("a", 9): 1})


def test_offset_specs() -> None:
    assert OffsetSpec.parse("earliest") == -2
    assert OffsetSpec.parse("MAX_TIMESTAMP") == -3
    assert OffsetSpec.parse(5) == 5
    with pytest.raises(ValueError, match="not one of"):
        OffsetSpec.parse("first")
    with pytest.raises(ValueError, match="timestamp in ms"):
        OffsetSpec.parse(-7)
