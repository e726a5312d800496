"""CreateTopics, DeleteTopics and CreatePartitions against a real metadata cache, broker config and metadata
waiter, with the cluster store's operations kept in memory (no broker, no network, no ZooKeeper): each
topic gets its own answer, and a change is answered once the cache shows it, or REQUEST_TIMED_OUT."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import AsyncIterator

import pytest
from kio.schema.create_partitions.v3 import request as create_partitions
from kio.schema.create_topics.v7 import request as create_topics
from kio.schema.delete_topics.v6 import request as delete_topics
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta

from backbone.broker.handlers.admin_common import AdminPieces, MetadataWaiter
from backbone.broker.handlers.config_catalog import ConfigSource
from backbone.broker.handlers.topics import USE_DEFAULT, topics_handlers
from backbone.protocol.api import ApiKey
from tests.helpers.broker_pieces import BROKER_ID, BrokerPieces, broker_pieces
from tests.helpers.handler_context import handler_context
from tests.helpers.memory_store import MemoryStore, zk

pytestmark = pytest.mark.unit

OTHER = 2


class Admin:
    """The topic handlers over real pieces; the store's changes reach the cache as ZooKeeper's watches
    bring them (each partition led by its first replica), while `watching` is on."""

    def __init__(self, pieces: BrokerPieces, store: MemoryStore) -> None:
        self.pieces = pieces
        self.store = store
        self.waiter = MetadataWaiter()
        self.watching = True
        admin = AdminPieces(BROKER_ID, pieces.config, pieces.cache, store, zk)
        self.handlers = topics_handlers(admin, self.waiter)
        loop = asyncio.get_running_loop()
        store.on_change = lambda topic: loop.call_soon_threadsafe(self._deliver, topic)

    def _deliver(self, topic: str) -> None:
        if not self.watching:
            return
        assignment = self.store.topics.get(topic)
        if assignment is None:
            self.pieces.cache.topics.pop(topic, None)
            self.waiter.on_topic_deleted(topic)
            return
        for index, replicas in assignment.partitions.items():
            self.pieces.show(topic, index, replicas, leader=replicas[0])
        self.waiter.on_topic_changed(topic)

    async def call(self, api_key: ApiKey, request: object) -> object:
        return await self.handlers[api_key](handler_context(request))


@pytest.fixture
async def admin(tmp_path) -> AsyncIterator[Admin]:
    pieces = broker_pieces(tmp_path, **{"num.partitions": 2})
    yield Admin(pieces, MemoryStore(brokers=(BROKER_ID, OTHER)))
    await pieces.close()


def timeout(seconds: float) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(seconds=seconds))


def creatable(name: str, partitions: int = USE_DEFAULT, factor: int = USE_DEFAULT, **configs: str):
    return create_topics.CreatableTopic(
        name=name,
        num_partitions=partitions,
        replication_factor=factor,
        assignments=(),
        configs=tuple(create_topics.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()),
    )


async def create(admin: Admin, *topics, seconds: float = 10, validate_only: bool = False) -> dict:
    request = create_topics.CreateTopicsRequest(
        topics=topics, timeout=timeout(seconds), validate_only=validate_only
    )
    answer = await admin.call(ApiKey.CREATE_TOPICS, request)
    return {t.name: t for t in answer.topics}


async def test_a_created_topic_is_answered_once_the_cache_shows_its_leaders(admin) -> None:
    answers = await create(admin, creatable("orders", factor=2, **{"retention.ms": "60000"}))
    orders = answers["orders"]
    assert (orders.error_code, orders.num_partitions, orders.replication_factor) == (ErrorCode.none, 2, 2)
    assert admin.pieces.cache.partition_count("orders") == 2
    (retention,) = [c for c in orders.configs if c.name == "retention.ms"]
    assert (retention.value, retention.config_source) == ("60000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert admin.store.topic_configs["orders"] == {"retention.ms": "60000"}


async def test_a_topic_the_cache_does_not_show_in_time_is_answered_request_timed_out(admin) -> None:
    admin.watching = False
    answers = await create(admin, creatable("slow"), seconds=0.2)
    assert answers["slow"].error_code == ErrorCode.request_timed_out
    assert "slow" in admin.store.topics  # the creation itself goes ahead


async def test_each_topic_has_its_own_error(admin) -> None:
    answers = await create(
        admin,
        creatable("twice"),
        creatable("twice"),
        creatable("odd-config", **{"no.such.key": "1"}),
        creatable("bad/name"),
        creatable("fine"),
    )
    assert {name: a.error_code for name, a in answers.items()} == {
        "twice": ErrorCode.invalid_request,
        "odd-config": ErrorCode.invalid_config,
        "bad/name": ErrorCode.invalid_topic_exception,
        "fine": ErrorCode.none,
    }
    assert [call for call, _ in admin.store.calls] == ["create_topic"]  # only "fine" reached the store


async def test_an_existing_topic_is_refused_without_asking_the_store(admin) -> None:
    await create(admin, creatable("once"))
    calls = len(admin.store.calls)
    answers = await create(admin, creatable("once"))
    assert answers["once"].error_code == ErrorCode.topic_already_exists
    assert len(admin.store.calls) == calls


async def test_validate_only_checks_and_creates_nothing(admin) -> None:
    answers = await create(admin, creatable("dry", partitions=3, factor=1), validate_only=True)
    assert (answers["dry"].error_code, answers["dry"].num_partitions) == (ErrorCode.none, 3)
    assert admin.store.topics == {}


async def delete(admin: Admin, *names: str, version_seconds: float = 10) -> dict:
    request = delete_topics.DeleteTopicsRequest(
        topics=tuple(delete_topics.DeleteTopicState(name=n, topic_id=None) for n in names),
        timeout=timeout(version_seconds),
    )
    answer = await admin.call(ApiKey.DELETE_TOPICS, request)
    return {r.name: r.error_code for r in answer.responses}


async def test_a_deleted_topic_is_answered_once_gone_from_the_cache_and_an_unknown_one_refused(admin) -> None:
    await create(admin, creatable("doomed"))
    assert await delete(admin, "doomed", "never", "bad/name") == {
        "doomed": ErrorCode.none,
        "never": ErrorCode.unknown_topic_or_partition,
        "bad/name": ErrorCode.unknown_topic_or_partition,
    }
    assert "doomed" not in admin.pieces.cache.topics


async def test_deletion_is_refused_when_the_broker_disables_it(tmp_path) -> None:
    pieces = broker_pieces(tmp_path, **{"delete.topic.enable": False})
    try:
        admin = Admin(pieces, MemoryStore())
        await create(admin, creatable("kept", factor=1))
        assert await delete(admin, "kept") == {"kept": ErrorCode.topic_deletion_disabled}
        assert "kept" in admin.store.topics
    finally:
        await pieces.close()


async def grow(admin: Admin, name: str, count: int, assignments=None) -> tuple[ErrorCode, str | None]:
    request = create_partitions.CreatePartitionsRequest(
        topics=(create_partitions.CreatePartitionsTopic(name=name, count=count, assignments=assignments),),
        timeout=timeout(10),
        validate_only=False,
    )
    answer = await admin.call(ApiKey.CREATE_PARTITIONS, request)
    (result,) = answer.results
    return result.error_code, result.error_message


async def test_partitions_are_added_and_answered_once_led(admin) -> None:
    await create(admin, creatable("growing", partitions=1))
    assert await grow(admin, "growing", 3) == (ErrorCode.none, None)
    assert admin.pieces.cache.partition_count("growing") == 3


async def test_growing_an_unknown_topic_or_with_too_few_assignments_is_refused(admin) -> None:
    await create(admin, creatable("growing", partitions=1))
    assert (await grow(admin, "ghost", 2))[0] == ErrorCode.unknown_topic_or_partition
    one = (create_partitions.CreatePartitionsAssignment(broker_ids=(BROKER_ID,)),)
    code, message = await grow(admin, "growing", 3, assignments=one)
    assert code == ErrorCode.invalid_replica_assignment
    assert message == "Increasing the number of partitions by 2 but 1 assignments provided."
