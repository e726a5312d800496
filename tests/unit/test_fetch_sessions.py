"""Incremental fetch sessions (KIP-227), both halves: the Fetch handler with its session cache against a real
replica manager over a log directory, and the fetcher's request builder the replica fetcher uses."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v11 import request as fetch

from backbone.broker.fetch_sessions import FetchSessionCache, SessionPartition
from backbone.broker.handlers.fetch import fetch_handler
from backbone.protocol.errors import FetchSessionIdNotFoundError, InvalidFetchSessionEpochError
from backbone.protocol.records import decode_batches
from backbone.wire.fetch import FetchRequestPartition
from backbone.wire.fetch_session import FetchSessionBuilder
from tests.helpers.batches import build_batch
from tests.helpers.broker_pieces import pieces_fixture
from tests.helpers.handler_context import decoded_answer, handler_context
from tests.helpers.requests import millis

pytestmark = pytest.mark.unit

CONSUMER = -1
FOLLOWER = 2

pieces = pieces_fixture()


def request(
    session_id: int,
    epoch: int,
    offsets: dict[tuple[str, int], int],
    *,
    forget: tuple[tuple[str, int], ...] = (),
    replica_id: int = CONSUMER,
) -> fetch.FetchRequest:
    topics: dict[str, list[fetch.FetchPartition]] = {}
    for (topic, index), offset in offsets.items():
        topics.setdefault(topic, []).append(
            fetch.FetchPartition(
                partition=index, fetch_offset=offset, log_start_offset=-1, partition_max_bytes=1 << 20
            )
        )
    forgotten: dict[str, list[int]] = {}
    for topic, index in forget:
        forgotten.setdefault(topic, []).append(index)
    return fetch.FetchRequest(
        replica_id=replica_id,
        max_wait=millis(0),
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=session_id,
        session_epoch=epoch,
        topics=tuple(fetch.FetchTopic(topic=t, partitions=tuple(p)) for t, p in topics.items()),
        forgotten_topics_data=tuple(
            fetch.ForgottenTopic(topic=t, partitions=tuple(p)) for t, p in forgotten.items()
        ),
        rack_id="",
    )


class Fetcher:
    """Sends fetches through one handler (one broker's session cache) and reads the answers."""

    def __init__(self, pieces, cache: FetchSessionCache | None = None) -> None:
        self.cache = cache if cache is not None else FetchSessionCache()
        self.handle = fetch_handler(pieces.replicas, pieces.authorizer, None, self.cache)

    async def __call__(self, asked: fetch.FetchRequest):
        answer = decoded_answer(asked, await self.handle(handler_context(asked)))
        answered = {
            (topic.topic, p.partition_index): [b.header.base_offset for b in decode_batches(p.records or b"")]
            for topic in answer.responses
            for p in topic.partitions
        }
        return answer, answered


async def test_a_session_answers_only_the_partitions_with_news(pieces) -> None:
    for index in (0, 1, 2):
        pieces.lead("t", index, (1,)).append_as_leader(memoryview(build_batch(2)))
    fetcher = Fetcher(pieces)

    opened, answered = await fetcher(request(0, 0, {("t", 0): 0, ("t", 1): 0, ("t", 2): 2}))
    session = opened.session_id
    assert session != 0 and opened.error_code == ErrorCode.none
    assert answered == {("t", 0): [0], ("t", 1): [0], ("t", 2): []}  # the opening fetch answers everything

    # Epoch 1 names what the fetcher now holds of t-0 and t-1; t-2 it names not at all.
    quiet, answered = await fetcher(request(session, 1, {("t", 0): 2, ("t", 1): 2}))
    assert (quiet.session_id, answered) == (session, {})  # nothing new anywhere

    pieces.replicas.get("t", 2).append_as_leader(memoryview(build_batch(3)))
    news, answered = await fetcher(request(session, 2, {}))
    # t-2 was never named again: the session kept its offset (2), and its new records are the news.
    assert (news.session_id, answered) == (session, {("t", 2): [2]})


async def test_a_forgotten_partition_is_no_longer_read(pieces) -> None:
    for index in (0, 1):
        pieces.lead("t", index, (1,))
    fetcher = Fetcher(pieces)
    opened, _ = await fetcher(request(0, 0, {("t", 0): 0, ("t", 1): 0}))
    await fetcher(request(opened.session_id, 1, {}, forget=(("t", 0),)))
    for index in (0, 1):
        pieces.replicas.get("t", index).append_as_leader(memoryview(build_batch(1)))
    _, answered = await fetcher(request(opened.session_id, 2, {}))
    assert answered == {("t", 1): [0]}


async def test_a_wrong_epoch_or_an_unknown_or_closed_session_is_a_top_level_error(pieces) -> None:
    pieces.lead("t", 0, (1,))
    fetcher = Fetcher(pieces)
    opened, _ = await fetcher(request(0, 0, {("t", 0): 0}))
    session = opened.session_id

    replayed, answered = await fetcher(request(session, 5, {}))
    assert (replayed.error_code, answered) == (ErrorCode.invalid_fetch_session_epoch, {})
    unknown, _ = await fetcher(request(session + 1, 1, {}))
    assert unknown.error_code == ErrorCode.fetch_session_id_not_found

    closing, answered = await fetcher(request(session, -1, {("t", 0): 0}))  # epoch -1: close, answer in full
    assert (closing.error_code, closing.session_id, answered) == (ErrorCode.none, 0, {("t", 0): []})
    closed, _ = await fetcher(request(session, 1, {}))
    assert closed.error_code == ErrorCode.fetch_session_id_not_found
    assert len(fetcher.cache) == 0


async def test_a_fetch_with_epoch_minus_one_opens_no_session(pieces) -> None:
    pieces.lead("t", 0, (1,))
    fetcher = Fetcher(pieces)
    answer, answered = await fetcher(request(0, -1, {("t", 0): 0}))
    assert (answer.session_id, answered, len(fetcher.cache)) == (0, {("t", 0): []}, 0)


async def test_a_followers_session_keeps_moving_the_high_watermark(pieces) -> None:
    partition = pieces.lead("t", 0, (1, FOLLOWER))
    partition.append_as_leader(memoryview(build_batch(4)))
    fetcher = Fetcher(pieces)
    opened, answered = await fetcher(request(0, 0, {("t", 0): 0}, replica_id=FOLLOWER))
    assert answered == {("t", 0): [0]} and partition.high_watermark == 0
    moved, answered = await fetcher(request(opened.session_id, 1, {("t", 0): 4}, replica_id=FOLLOWER))
    assert partition.high_watermark == 4
    assert answered == {("t", 0): []}  # the new high watermark is news, and the follower is told it
    (topic,) = moved.responses
    assert topic.partitions[0].high_watermark == 4


def partitions(count: int) -> dict[tuple[str, int], SessionPartition]:
    return {("t", index): SessionPartition(index, 0, 1 << 20) for index in range(count)}


def test_a_full_cache_gives_a_followers_session_the_slot_of_a_consumers() -> None:
    now = [0.0]
    cache = FetchSessionCache(max_slots=1, eviction_ms=60_000, clock=lambda: now[0])
    consumer = cache.open(False, partitions(3))
    assert consumer is not None
    assert cache.open(False, partitions(3)) is None  # no bigger, not a follower's, not idle long enough
    assert cache.open(False, partitions(4)) is not None and cache.evictions == 1  # a bigger one takes it
    follower = cache.open(True, partitions(1))
    assert follower is not None and cache.evictions == 2
    assert cache.open(False, partitions(50)) is None  # a follower's session is never pushed out by size
    now[0] = 61.0
    assert cache.open(False, partitions(1)) is not None  # ... but one idle past the eviction time is
    assert len(cache) == 1


def test_with_no_slots_every_fetch_is_sessionless() -> None:
    assert FetchSessionCache(max_slots=0).open(True, partitions(1)) is None


def row(offset: int, leader_epoch: int = 0) -> FetchRequestPartition:
    return FetchRequestPartition(0, offset, 1 << 20, leader_epoch)


def test_the_builder_names_only_moved_partitions_and_forgets_dropped_ones() -> None:
    builder = FetchSessionBuilder()
    assert builder.next_request({("t", 0): row(0), ("t", 1): row(0)}) == (
        0,
        0,
        {("t", 0): row(0), ("t", 1): row(0)},
        [],
    )
    builder.answered(42)
    assert builder.next_request({("t", 0): row(5), ("t", 1): row(0)}) == (42, 1, {("t", 0): row(5)}, [])
    builder.answered(42)
    assert builder.next_request({("t", 0): row(5, leader_epoch=1)}) == (
        42,
        2,
        {("t", 0): row(5, leader_epoch=1)},
        [("t", 1)],
    )


def test_after_a_failure_the_builder_starts_over_with_a_full_fetch() -> None:
    builder = FetchSessionBuilder()
    builder.next_request({("t", 0): row(0)})
    builder.answered(7)
    builder.next_request({("t", 0): row(3)})
    assert builder.failed(InvalidFetchSessionEpochError("stale"))  # the session's own error: go again at once
    # The old id with epoch 0: the leader closes session 7 and opens a new one.
    assert builder.next_request({("t", 0): row(3)}) == (7, 0, {("t", 0): row(3)}, [])
    assert builder.failed(FetchSessionIdNotFoundError("evicted"))
    assert builder.next_request({("t", 0): row(3)})[:2] == (0, 0)
    builder.answered(8)
    builder.next_request({("t", 0): row(4)})
    assert not builder.failed(OSError("connection reset"))  # not the session's: the caller backs off
    assert builder.next_request({("t", 0): row(4)})[:2] == (8, 0)
    builder.answered(0)  # the leader had no slot: keep fetching in full
    assert builder.next_request({("t", 0): row(3)})[:2] == (0, 0)


def test_a_partition_with_a_new_owner_makes_the_fetch_full_again() -> None:
    # A consumer's partition assigned anew gets a new state; the leader would answer it only with news, so
    # the new state would never learn the high watermark of an idle partition: the builder starts over.
    builder = FetchSessionBuilder()
    builder.next_request({("t", 0): row(3), ("t", 1): row(0)}, owners={("t", 0): 1, ("t", 1): 2})
    builder.answered(9)
    assert builder.next_request({("t", 0): row(3), ("t", 1): row(0)}, owners={("t", 0): 1, ("t", 1): 2})[
        :3
    ] == (9, 1, {})
    builder.answered(9)
    session_id, epoch, rows, _ = builder.next_request(
        {("t", 0): row(3), ("t", 1): row(0)}, owners={("t", 0): 1, ("t", 1): 3}
    )
    assert (session_id, epoch, set(rows)) == (9, 0, {("t", 0), ("t", 1)})
