"""The async client and the broker's connections on uvloop (this folder's conftest.py), the event loop many
asyncio applications run.

uvloop's transports are not `asyncio.Transport` subclasses, and its timers count whole milliseconds (one may
fire before its `when()`): both once stopped our client, the first at connect, the second with a lingering
batch never sent.
"""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from backbone.client.consumer.consumer import AsyncConsumer
from backbone.client.producer.producer import AsyncProducer
from backbone.client.structs import TopicPartition
from tests.helpers.fake_cluster import FakeCluster
from tests.unit.test_broker_network import EchoListener, answers, request
from tests.unit.test_broker_network import listener as listener  # the same fixture, here on uvloop

pytestmark = [pytest.mark.unit, pytest.mark.fake_topic("t", 3)]


async def test_the_tests_run_on_uvloop() -> None:
    assert isinstance(asyncio.get_running_loop(), uvloop.Loop)


async def test_lingering_batches_are_sent_and_read_back(fake: FakeCluster) -> None:
    sent = [f"event {i}".encode() for i in range(200)]
    producer = AsyncProducer(bootstrap_servers=fake.bootstrap, linger_ms=20)
    await producer.start()
    try:
        futures = []
        for i, value in enumerate(sent):
            futures.append(await producer.send("t", value, partition=i % 3))
            if i % 50 == 49:
                await asyncio.sleep(0.03)  # past the linger: each round of batches goes by its timer
        # No flush: it would wake the sender itself; the records must go out by their linger timers alone.
        await asyncio.wait_for(asyncio.gather(*futures), 10)
    finally:
        await producer.close(timeout=2)  # bounded: a batch left waiting would also hold the close

    consumer = AsyncConsumer(bootstrap_servers=fake.bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    try:
        consumer.assign([TopicPartition("t", p) for p in range(3)])
        read: list[bytes] = []
        async with asyncio.timeout(10):
            while len(read) < len(sent):
                polled = await consumer.poll(timeout_ms=500)
                read.extend(record.value for records in polled.values() for record in records)
    finally:
        await consumer.close()
    assert sorted(read) == sorted(sent)


async def test_the_broker_answers_pipelined_requests_in_order(listener: EchoListener) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
    bodies = [b"body %d" % i * (i % 5) for i in range(300)] + [b"large" * 100_000]
    writer.write(b"".join(request(i, body) for i, body in enumerate(bodies)))
    assert await answers(reader, len(bodies)) == list(enumerate(bodies))
    writer.close()
