"""The Fetch handler against a real replica manager over a log directory (no broker, no network): consumers
read below the high watermark, followers up to the log end (and their fetch moves the high watermark),
long-polls wake on an append, and stale leader epochs are fenced."""

from __future__ import annotations

import asyncio

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v11 import request as fetch

from backbone.broker.handlers.fetch import fetch_handler
from backbone.protocol.records import decode_batches
from tests.helpers.batches import build_batch
from tests.helpers.broker_pieces import BrokerPieces, pieces_fixture
from tests.helpers.handler_context import decoded_answer, handler_context
from tests.helpers.requests import millis

pytestmark = pytest.mark.unit

CONSUMER = -1
FOLLOWER = 2


pieces = pieces_fixture()


def fetch_request(
    offset: int,
    *,
    replica_id: int = CONSUMER,
    max_wait_ms: int = 0,
    leader_epoch: int = -1,
    min_bytes: int = 1,
) -> fetch.FetchRequest:
    return fetch.FetchRequest(
        replica_id=replica_id,
        max_wait=millis(max_wait_ms),
        min_bytes=min_bytes,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(
            fetch.FetchTopic(
                topic="t",
                partitions=(
                    fetch.FetchPartition(
                        partition=0,
                        current_leader_epoch=leader_epoch,
                        fetch_offset=offset,
                        log_start_offset=-1,
                        partition_max_bytes=1 << 20,
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )


async def fetch_partition(pieces: BrokerPieces, request: fetch.FetchRequest):
    handle = fetch_handler(pieces.replicas, pieces.authorizer, None)
    answer = decoded_answer(request, await handle(handler_context(request)))
    (topic_answer,) = answer.responses
    (partition_answer,) = topic_answer.partitions
    return partition_answer


def offsets_in(records: bytes | None) -> list[int]:
    return [batch.header.base_offset for batch in decode_batches(records or b"")]


async def test_a_consumer_reads_only_below_the_high_watermark_and_a_follower_moves_it(pieces) -> None:
    partition = pieces.lead("t", 0, (1, FOLLOWER))
    partition.append_as_leader(memoryview(build_batch(3)))
    partition.append_as_leader(memoryview(build_batch(2)))

    consumer = await fetch_partition(pieces, fetch_request(0))
    assert (consumer.error_code, consumer.high_watermark, offsets_in(consumer.records)) == (
        ErrorCode.none,
        0,
        [],
    )

    follower = await fetch_partition(pieces, fetch_request(0, replica_id=FOLLOWER))
    assert offsets_in(follower.records) == [0, 3]  # a follower reads up to the log end

    await fetch_partition(pieces, fetch_request(5, replica_id=FOLLOWER))  # it now holds all five
    assert partition.high_watermark == 5
    consumer = await fetch_partition(pieces, fetch_request(0))
    assert (consumer.high_watermark, offsets_in(consumer.records)) == (5, [0, 3])
    assert consumer.log_start_offset == 0


async def test_a_long_poll_is_answered_when_a_record_arrives(pieces) -> None:
    partition = pieces.lead("t", 0, (1,))
    waiting = asyncio.ensure_future(fetch_partition(pieces, fetch_request(0, max_wait_ms=60_000)))
    await asyncio.sleep(0)  # the fetch finds nothing and waits
    assert not waiting.done()
    partition.append_as_leader(memoryview(build_batch(2)))
    answer = await asyncio.wait_for(waiting, 30)
    assert offsets_in(answer.records) == [0]


async def test_a_long_poll_reads_again_only_when_its_partition_has_more_for_it(pieces, monkeypatch) -> None:
    partition = pieces.lead("t", 0, (1, FOLLOWER, 3))
    partition.append_as_leader(memoryview(build_batch(2)))
    reads = []
    read = partition.read
    monkeypatch.setattr(partition, "read", lambda *args: reads.append(args) or read(*args))
    waiting = asyncio.ensure_future(
        fetch_partition(pieces, fetch_request(2, replica_id=FOLLOWER, max_wait_ms=60_000))
    )
    await asyncio.sleep(0.05)  # follower 2 holds the log end: its fetch waits
    assert not waiting.done() and len(reads) == 1

    # Follower 3 catching up moves the high watermark, which wakes the waiting fetch; follower 2 reads up
    # to the log end, so there is nothing more for it: it waits on without reading again.
    await fetch_partition(pieces, fetch_request(2, replica_id=3))
    assert partition.high_watermark == 2
    await asyncio.sleep(0.05)
    assert not waiting.done() and len(reads) == 2  # the second read is follower 3's own

    partition.append_as_leader(memoryview(build_batch(1)))
    answer = await asyncio.wait_for(waiting, 30)
    assert offsets_in(answer.records) == [2]


async def test_a_stopping_broker_answers_long_polls_at_once(pieces) -> None:
    partition = pieces.lead("t", 0, (1,))
    waiting = asyncio.ensure_future(fetch_partition(pieces, fetch_request(0, max_wait_ms=60_000)))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    partition.wake_waiters(answer_now=True)
    answer = await asyncio.wait_for(waiting, 5)
    assert (answer.error_code, offsets_in(answer.records)) == (ErrorCode.none, [])


async def test_a_fetch_waits_for_min_bytes_also_when_its_partition_already_has_records(pieces) -> None:
    partition = pieces.lead("t", 0, (1,))
    first = build_batch(2)
    partition.append_as_leader(memoryview(first))
    asked = 3 * len(first)  # fetch.min.bytes: three batches' worth
    waiting = asyncio.ensure_future(
        fetch_partition(pieces, fetch_request(0, max_wait_ms=60_000, min_bytes=asked))
    )
    for _ in range(2):
        await asyncio.sleep(0.05)
        assert not waiting.done()  # what is there is less than min_bytes: the fetch keeps waiting
        partition.append_as_leader(memoryview(build_batch(2)))
    answer = await asyncio.wait_for(waiting, 30)
    assert offsets_in(answer.records) == [0, 2, 4]  # answered once the three batches were there, all of them


async def test_a_fetch_short_of_min_bytes_is_answered_with_what_there_is_at_its_deadline(pieces) -> None:
    partition = pieces.lead("t", 0, (1,))
    partition.append_as_leader(memoryview(build_batch(2)))
    answer = await asyncio.wait_for(
        fetch_partition(pieces, fetch_request(0, max_wait_ms=200, min_bytes=1 << 20)), 30
    )
    assert offsets_in(answer.records) == [0]


async def test_an_older_leader_epoch_is_fenced_and_a_newer_one_unknown(pieces) -> None:
    pieces.place("t", 0, (1,), leader=1, leader_epoch=3)
    older = await fetch_partition(pieces, fetch_request(0, leader_epoch=2))
    newer = await fetch_partition(pieces, fetch_request(0, leader_epoch=4))
    current = await fetch_partition(pieces, fetch_request(0, leader_epoch=3))
    assert older.error_code == ErrorCode.fenced_leader_epoch
    assert newer.error_code == ErrorCode.unknown_leader_epoch
    assert current.error_code == ErrorCode.none


async def test_a_partition_led_elsewhere_is_refused_as_not_leader(pieces) -> None:
    pieces.place("t", 0, (2, 1), leader=2)
    answer = await fetch_partition(pieces, fetch_request(0))
    assert answer.error_code == ErrorCode.not_leader_or_follower


async def test_a_broker_that_is_not_a_replica_cannot_fetch_as_a_follower(pieces) -> None:
    pieces.lead("t", 0, (1,))
    answer = await fetch_partition(pieces, fetch_request(0, replica_id=FOLLOWER))
    assert answer.error_code == ErrorCode.not_leader_or_follower
