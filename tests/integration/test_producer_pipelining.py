"""The idempotent producer with five requests in flight to one healthy broker: the broker never sees a
partition's sequences out of order, so no batch is retried, and every record arrives once, in order."""

from __future__ import annotations

import asyncio
import logging
import random

import pytest

from backbone.client import Admin, NewTopic, TopicPartition
from backbone.client.producer import sender as sender_module
from backbone.client.producer.producer import AsyncProducer, AsyncRecordFuture
from tests.helpers.names import unique_name

pytestmark = pytest.mark.integration

PARTITIONS = 2
WRITERS = 20
PER_WRITER = 150


async def test_pipelined_requests_are_never_answered_out_of_order(
    broker, caplog: pytest.LogCaptureFixture
) -> None:
    topic = unique_name("pipelined")
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    # Writers that sometimes wait for their record (as request handlers do) keep a request slot free now
    # and then, so a round and an answer often plan requests in the same turn of the event loop.
    results: dict[int, list[AsyncRecordFuture]] = {}
    async with AsyncProducer(
        bootstrap_servers=broker.bootstrap, acks="all", linger_ms=0, max_in_flight_requests_per_connection=5
    ) as producer:

        async def writer(number: int) -> None:
            chance = random.Random(number)
            futures = results.setdefault(number, [])
            for i in range(PER_WRITER):
                value = b"%02d:%04d" % (number, i)
                futures.append(await producer.send(topic, value, partition=number % PARTITIONS))
                if chance.random() < 0.3:
                    await asyncio.sleep(0)
                if chance.random() < 0.2:
                    await futures[-1]

        with caplog.at_level(logging.WARNING, logger=sender_module.__name__):
            async with asyncio.timeout(60):
                await asyncio.gather(*(writer(n) for n in range(WRITERS)))
                offsets = {n: [(await f).offset for f in futures] for n, futures in results.items()}
    retried = [r.getMessage() for r in caplog.records if "event=batch_retry" in r.getMessage()]
    assert retried == [], f"{len(retried)} batches retried, first: {retried[:1]}"
    for number, written in offsets.items():
        assert written == sorted(written), f"writer {number}'s records were stored out of order"
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        ends = admin.list_offsets({TopicPartition(topic, p): "latest" for p in range(PARTITIONS)})
    assert sum(end.offset for end in ends.values()) == WRITERS * PER_WRITER, "a record was lost or doubled"
