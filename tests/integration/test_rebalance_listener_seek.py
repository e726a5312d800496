"""A rebalance listener that seeks its new partitions (to offsets it keeps itself, as an audit counter or a
mirror does) decides where reading starts, however long it takes: as in Kafka's consumer, nothing of a
newly assigned partition is fetched, nor returned by a poll that ends meanwhile, before the listener's
`on_partitions_assigned` has returned."""

from __future__ import annotations

import asyncio

import pytest

from backbone.client import (
    Admin,
    AsyncConsumer,
    ConsumerRebalanceListener,
    NewTopic,
    Producer,
    TopicPartition,
)
from tests.helpers.names import unique_name

pytestmark = pytest.mark.integration

GROUP_BROKER = {"group.initial.rebalance.delay.ms": 0, "offsets.topic.replication.factor": 1}
LISTENER_S = 1.5  # far longer than the polls below wait
SEEK_TO = 30
RECORDS = 50


class SlowSeekingListener(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.consumer: AsyncConsumer | None = None
        self.returned = False

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await asyncio.sleep(LISTENER_S)  # e.g. looking up where its own records say to resume
        assert self.consumer is not None
        for tp in assigned:
            self.consumer.seek(tp, SEEK_TO)
        self.returned = True

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        pass


async def first_records(bootstrap: str, topic: str, listener: SlowSeekingListener) -> tuple[list[int], bool]:
    """The offsets of the first records polled, and whether the listener had returned by then."""
    async with AsyncConsumer(
        bootstrap_servers=bootstrap,
        group_id=unique_name("seeking"),
        auto_offset_reset="earliest",
        fetch_max_wait_ms=50,
    ) as consumer:
        listener.consumer = consumer
        consumer.subscribe([topic], listener=listener)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while loop.time() < deadline:
            polled = await consumer.poll(timeout_ms=100)
            if polled:
                return [r.offset for records in polled.values() for r in records], listener.returned
        pytest.fail("no records polled within 60 s")


def test_a_listener_that_seeks_slowly_decides_where_reading_starts(broker_factory) -> None:
    broker = broker_factory(1, **GROUP_BROKER)
    topic = unique_name("seek")
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        admin.create_topics([NewTopic(topic, 1, 1)])
    with Producer(bootstrap_servers=broker.bootstrap) as producer:
        for number in range(RECORDS):
            producer.send(topic, b"%d" % number)
    listener = SlowSeekingListener()

    offsets, listener_returned = asyncio.run(first_records(broker.bootstrap, topic, listener))

    assert listener_returned, "records were returned while the listener was still running"
    assert offsets[0] == SEEK_TO
