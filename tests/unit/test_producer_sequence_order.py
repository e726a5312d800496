"""The idempotent producer's requests reach the broker in the order their batches were numbered.

A partition's batches get their sequence numbers when the sender takes them out of the queue. A request that
goes out later than one taken after it shows the broker a gap (OUT_OF_ORDER_SEQUENCE_NUMBER) and costs a
retry, with no broker failure at all. The fake cluster checks sequences as a Kafka leader does.
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any

import pytest

from backbone.client.producer import sender as sender_module
from backbone.client.producer.producer import AsyncProducer, AsyncRecordFuture
from backbone.protocol.record_batch import read_header
from tests.helpers.fake_cluster import FakeCluster, ThreadedFakeCluster

pytestmark = pytest.mark.unit


def producer(bootstrap: str, **options: Any) -> AsyncProducer:
    return AsyncProducer(bootstrap_servers=bootstrap, linger_ms=0, retry_backoff_ms=10, **options)


def retries(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "event=batch_retry" in r.getMessage()]


@pytest.mark.fake_topic("t", 3)
async def test_a_batch_taken_by_a_round_goes_out_before_one_taken_when_an_answer_comes(
    fake: FakeCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """The sender round takes batch 1 of partition 0 and starts its request's task; in the same turn of the
    event loop an answer arrives, and the task that gets it takes batch 2 of partition 0 for its broker's
    next request. Batch 2 must not be written before batch 1.

    The turns are lined up by hand (partitions 0 and 2 share broker 0): turn 0 releases the held answer,
    which the fake writes in turn 1 and the client reads in turn 2, so its task runs in turn 3. Batch 1 is
    sent in turn 2, ahead of that read, so the round it wakes also runs in turn 3, first; batch 2 is sent
    in turn 3 between the two.
    """
    loop = asyncio.get_running_loop()
    async with producer(fake.bootstrap) as p:
        await p.send_and_wait("t", b"known", partition=0)  # the broker knows the producer's sequences
        fake.produce_answers.clear()
        held = await p.send("t", b"held", partition=2)
        async with asyncio.timeout(5):
            while not fake.partition("t", 2).batches:  # the request is in, its answer held
                await asyncio.sleep(0.005)
        futures: list[AsyncRecordFuture] = []

        async def send_both() -> None:  # starts in turn 2
            futures.append(await p.send("t", b"one", partition=0))  # wakes a round; resumes in turn 3
            futures.append(await p.send("t", b"two", partition=0))

        tasks: list[asyncio.Task[None]] = []
        with caplog.at_level(logging.WARNING, logger=sender_module.__name__):
            fake.produce_answers.set()
            loop.call_soon(lambda: tasks.append(asyncio.ensure_future(send_both())))
            async with asyncio.timeout(10):
                await held
                while not tasks:
                    await asyncio.sleep(0)
                await tasks[0]
                one, two = [await future for future in futures]
    assert retries(caplog) == [], "a batch was retried: the broker saw a partition's sequences out of order"
    headers = [read_header(batch) for batch in fake.partition("t", 0).batches]
    assert [h.record_count for h in headers] == [1, 1, 1], "the scenario needs the two records in two batches"
    assert [h.base_sequence for h in headers] == [0, 1, 2]
    assert (one.offset, two.offset) == (1, 2)


@pytest.mark.parametrize("partitions", [1, 3])
def test_pipelined_sends_from_many_tasks_are_never_out_of_order(
    partitions: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Many small batches, five requests in flight, writers yielding at random: no batch is retried, and
    every writer's records keep its order. (The broker runs on its own thread, as a real one would.)"""
    writers, per_writer = 20, 250

    async def produce(bootstrap: str) -> None:
        async with producer(bootstrap, max_in_flight_requests_per_connection=5) as p:

            async def writer(number: int) -> None:
                chance = random.Random(number)
                futures = []
                for i in range(per_writer):
                    value = b"%02d:%04d" % (number, i)
                    futures.append(await p.send("t", value, partition=number % partitions))
                    if chance.random() < 0.3:
                        await asyncio.sleep(0)
                await asyncio.gather(*futures)

            async with asyncio.timeout(30):
                await asyncio.gather(*(writer(n) for n in range(writers)))

    with ThreadedFakeCluster() as fake, caplog.at_level(logging.WARNING, logger=sender_module.__name__):
        fake.call(fake.cluster.create_topic, "t", partitions)
        asyncio.run(produce(fake.bootstrap))
        stored = [fake.call(fake.cluster.values, "t", p) for p in range(partitions)]
    assert retries(caplog) == [], f"{len(retries(caplog))} batches retried, first: {retries(caplog)[:1]}"
    for number in range(writers):
        values = [v for v in stored[number % partitions] if v is not None and v.startswith(b"%02d:" % number)]
        assert values == [b"%02d:%04d" % (number, i) for i in range(per_writer)]
