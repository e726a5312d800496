"""Batching, the memory bound, record futures and sequence numbers, without any broker."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from backbone.client.producer.accumulator import (
    BufferPool,
    ProducerBatch,
    RecordAccumulator,
    RecordFuture,
    stamp_producer,
)
from backbone.client.producer.batch_builder import new_batch_builder
from backbone.client.producer.idempotence import IdempotenceState
from backbone.client.structs import RecordMetadata, TopicPartition
from backbone.protocol.compression import Codec
from backbone.protocol.record_batch import check_batch
from backbone.protocol.records import RecordBatchBuilder, decode_batch
from backbone.wire.errors import BufferExhaustedError, KafkaTimeoutError

pytestmark = pytest.mark.unit

TP = TopicPartition("t", 0)
VALUE = b"v" * 100


def accumulator(batch_size: int = 1000, linger_ms: int = 50, memory: int = 1 << 20) -> RecordAccumulator:
    return RecordAccumulator(
        BufferPool(memory),
        batch_size=batch_size,
        linger_ms=linger_ms,
        codec=Codec.NONE,
        compression_level=None,
        delivery_timeout_ms=1000,
    )


def append(
    acc: RecordAccumulator, tp: TopicPartition = TP, value: bytes = VALUE
) -> tuple[ProducerBatch, bool]:
    result = acc.append(tp, None, value, (), 1_700_000_000_000, None, 150)
    assert result is not None
    return result


def test_records_fill_a_batch_up_to_batch_size_then_a_new_one_opens() -> None:
    acc = accumulator(batch_size=1000)
    first, created = append(acc)
    assert created
    batches = {id(append(acc)[0]) for _ in range(20)} | {id(first)}
    queue = acc.queues[TP]
    assert len(batches) == len(queue) > 1
    for batch in list(queue)[:-1]:
        assert batch.full
        assert batch.builder.size() <= 1000
    assert sum(b.record_count for b in queue) == 21


def test_a_record_larger_than_batch_size_gets_a_batch_of_its_own() -> None:
    acc = accumulator(batch_size=100)
    batch, created = append(acc, value=b"x" * 500)
    assert created and batch.full and batch.record_count == 1


def test_abort_if_new_refuses_to_open_a_batch() -> None:
    acc = accumulator()
    assert acc.append(TP, None, VALUE, (), 0, None, 1, abort_if_new=True) is None
    append(acc)
    assert acc.append(TP, None, VALUE, (), 0, None, 1, abort_if_new=True) is not None


def test_batches_become_sendable_when_full_lingered_or_flushed() -> None:
    acc = accumulator(batch_size=10_000, linger_ms=50)
    batch, _ = append(acc)
    now = batch.created
    assert not acc.is_sendable(batch, now)
    assert acc.is_sendable(batch, now + 0.05)
    assert acc.next_ready_in(now) == pytest.approx(0.05)
    acc.flushing += 1
    assert acc.is_sendable(batch, now)
    acc.flushing -= 1
    batch.full = True
    assert acc.is_sendable(batch, now)


def test_a_retried_batch_waits_for_its_backoff_and_goes_back_in_sequence_order() -> None:
    acc = accumulator()
    fresh, _ = append(acc)
    retried = [ProducerBatch(TP, new_batch_builder(Codec.NONE, None, 16384), 0.0, 10.0) for _ in range(3)]
    for batch, sequence in zip(retried, (20, 0, 10), strict=True):
        batch.attempts, batch.base_sequence, batch.retry_at = 1, sequence, 5.0
        acc.reenqueue(batch)
    assert [b.base_sequence for b in acc.queues[TP]] == [0, 10, 20, -1]
    assert acc.queues[TP][-1] is fresh
    assert not acc.is_sendable(retried[1], 4.9)
    assert acc.is_sendable(retried[1], 5.0)


def test_expired_batches_are_taken_out() -> None:
    acc = accumulator()
    batch, _ = append(acc)
    assert acc.expire(batch.created + 0.5) == []
    assert acc.expire(batch.deadline) == [batch]
    assert not acc.has_pending()


def test_batch_completion_resolves_every_record_future() -> None:
    acc = accumulator()
    futures = []
    for _ in range(3):
        result = acc.append(TP, None, VALUE, (), 1000, lambda b: RecordFuture(b.done_event), 150)
        assert result is not None
        futures.append(result[0].sinks[-1])
    batch = acc.queues[TP][0]
    seen: list[RecordMetadata] = []
    futures[0].add_callback(seen.append)
    batch.complete(40, -1, None)
    assert [f.get(0) for f in futures] == [RecordMetadata("t", 0, 40 + i, 1000) for i in range(3)]
    assert seen == [RecordMetadata("t", 0, 40, 1000)]
    late: list[object] = []
    futures[1].add_done_callback(late.append)  # registered after completion: runs at once
    assert late == [futures[1]]


def test_failed_batches_fail_their_futures_and_call_errbacks() -> None:
    batch = ProducerBatch(TP, new_batch_builder(Codec.NONE, None, 16384), 0.0, 1.0)
    future = RecordFuture(batch.done_event)
    batch.sinks.append(future)
    batch.timestamps.append(1)
    errors: list[BaseException] = []
    future.add_errback(errors.append)
    future.add_callback(lambda md: errors.append(AssertionError("callback on failure")))
    failure = KafkaTimeoutError("expired")
    batch.complete(-1, -1, failure)
    assert future.failed() and future.exception() is failure
    with pytest.raises(KafkaTimeoutError):
        future.get(0)
    assert errors == [failure]


def test_log_append_time_replaces_the_create_time() -> None:
    batch = ProducerBatch(TP, new_batch_builder(Codec.NONE, None, 16384), 0.0, 1.0)
    future = RecordFuture(batch.done_event)
    batch.sinks.append(future)
    batch.timestamps.append(1)
    batch.complete(7, 99, None)
    assert future.get(0) == RecordMetadata("t", 0, 7, 99)


def test_get_times_out_while_the_batch_is_pending() -> None:
    future = RecordFuture(threading.Event())
    with pytest.raises(KafkaTimeoutError, match=r"not acknowledged within 0.01 s"):
        future.get(0.01)


def test_a_batch_makes_its_done_event_only_when_asked_and_sets_it_whenever_asked() -> None:
    early, late = (ProducerBatch(TP, new_batch_builder(Codec.NONE, None, 16384), 0.0, 1.0) for _ in range(2))
    for batch in (early, late):
        batch.timestamps.append(1)
    asked_before = early.done_event
    assert not asked_before.is_set()
    waiter = threading.Thread(target=RecordFuture(early, 0).get, args=(5,))
    waiter.start()
    early.complete(3, -1, None)
    waiter.join(5)
    assert not waiter.is_alive() and asked_before.is_set()
    late.complete(4, -1, None)
    assert late.done_event.is_set(), "an event made after completion starts out set"
    assert RecordFuture(late, 0).get(0) == RecordMetadata("t", 0, 4, 1)


async def test_waiting_for_a_batch_ends_with_it_whatever_its_outcome() -> None:
    done, failed = (ProducerBatch(TP, new_batch_builder(Codec.NONE, None, 16384), 0.0, 1.0) for _ in range(2))
    for batch in (done, failed):
        batch.timestamps.append(1)
    waits = [asyncio.ensure_future(batch.wait_done()) for batch in (done, failed)]
    await asyncio.sleep(0)
    assert not any(wait.done() for wait in waits)
    done.complete(0, -1, None)
    failed.complete(-1, -1, KafkaTimeoutError("expired"))
    await asyncio.wait_for(asyncio.gather(*waits), 5)
    await done.wait_done()  # complete already: returns at once


def test_a_callback_that_raises_is_logged_not_propagated(caplog: pytest.LogCaptureFixture) -> None:
    batch = ProducerBatch(TP, new_batch_builder(Codec.NONE, None, 16384), 0.0, 1.0)
    future = RecordFuture(batch.done_event)
    batch.sinks.append(future)
    batch.timestamps.append(1)
    future.add_callback(lambda md: 1 / 0)
    batch.complete(1, -1, None)
    assert future.succeeded()
    assert "event=producer_callback_raised" in caplog.text


# -- buffer memory ----------------------------------------------------------------------------------


def test_the_pool_blocks_then_times_out_naming_the_settings() -> None:
    pool = BufferPool(1000)
    assert pool.try_reserve(900)
    started = time.monotonic()
    expected = r"buffer.memory \(1000 bytes\) within max.block.ms \(50 ms\)"
    with pytest.raises(BufferExhaustedError, match=expected):
        pool.reserve_blocking(200, 50)
    assert time.monotonic() - started >= 0.05


def test_a_blocked_reservation_proceeds_when_memory_is_released() -> None:
    pool = BufferPool(1000)
    assert pool.try_reserve(1000)
    releaser = threading.Timer(0.05, pool.release, args=(500,))
    releaser.start()
    pool.reserve_blocking(400, 5000)
    releaser.join()
    assert pool.available == 100


def test_waiting_for_room_counts_as_a_waiter_before_it_says_so_and_takes_nothing() -> None:
    pool = BufferPool(1000)
    assert pool.try_reserve(1000)
    seen: list[bool] = []

    def waiting() -> None:  # what a producer's sender is woken by: it must see the waiter
        seen.append(pool.has_waiters)
        threading.Timer(0.05, pool.release, args=(300,)).start()

    pool.wait_for_room_blocking(200, 5000, 5000, waiting)
    assert seen == [True] and not pool.has_waiters
    assert pool.available == 300, "room was waited for, not taken"
    pool.wait_for_room_blocking(300, 0, 0, lambda: seen.append(False))
    assert seen == [True], "`waiting` is called only when the room is not there"
    with pytest.raises(BufferExhaustedError, match=r"max.block.ms \(7 ms\)"):
        pool.wait_for_room_blocking(400, 20, 7, lambda: None)


def test_a_record_bigger_than_the_pool_fails_at_once() -> None:
    with pytest.raises(BufferExhaustedError, match=r"can never fit buffer.memory"):
        BufferPool(100).reserve_blocking(101, 10_000)


async def test_async_reservations_wait_for_release() -> None:
    pool = BufferPool(100)
    assert pool.try_reserve(100)
    waiter = asyncio.ensure_future(pool.reserve(60, 5000))
    await asyncio.sleep(0.01)
    assert not waiter.done() and pool.has_waiters
    pool.release(60)
    await waiter
    assert pool.available == 0 and not pool.has_waiters
    with pytest.raises(BufferExhaustedError):
        await pool.reserve(1, 20)


# -- producer fields and sequences ------------------------------------------------------------------


def test_stamping_the_producer_fields_keeps_the_batch_valid() -> None:
    builder = RecordBatchBuilder(Codec.GZIP)
    builder.append(b"k", b"v", timestamp=5)
    builder.append(None, b"w", timestamp=6)
    stamped = stamp_producer(builder.build(), 4242, 3, 17)
    header = check_batch(stamped)  # raises if the CRC were wrong
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (4242, 3, 17)
    assert [r[3] for r in decode_batch(stamped).records] == [b"v", b"w"]


def make_batch(tp: TopicPartition, records: int) -> ProducerBatch:
    batch = ProducerBatch(tp, new_batch_builder(Codec.NONE, None, 16384), 0.0, 1.0)
    for index in range(records):
        batch.builder.append(index, 1, None, b"x", [])
        batch.timestamps.append(1)
    return batch


def test_sequences_count_records_per_partition_and_survive_retries() -> None:
    state = IdempotenceState()
    state.set_producer(7, 0)
    a1, a2, b1 = make_batch(TP, 3), make_batch(TP, 2), make_batch(TopicPartition("t", 1), 4)
    for batch in (a1, a2, b1):
        state.assign(batch)
    assert (a1.base_sequence, a2.base_sequence, b1.base_sequence) == (0, 3, 0)
    state.assign(a1)  # a retry keeps its number
    assert a1.base_sequence == 0
    assert check_batch(a2.build()).base_sequence == 3
    assert state.is_next_sequence(a1) and not state.is_next_sequence(a2)
    state.acknowledged(a1)
    assert state.is_next_sequence(a2)


def test_an_epoch_bump_renumbers_waiting_batches_from_zero() -> None:
    state = IdempotenceState()
    state.set_producer(7, 4)
    first, second = make_batch(TP, 2), make_batch(TP, 2)
    state.assign(first)
    state.assign(second)
    state.request_bump(TP, "test")
    assert state.bump_required
    state.bump([second])
    assert (state.producer_id, state.epoch, state.bump_required) == (7, 5, False)
    state.assign(second)
    assert (second.producer_epoch, second.base_sequence) == (5, 0)


def test_an_exhausted_epoch_asks_for_a_new_producer_id() -> None:
    state = IdempotenceState()
    state.set_producer(7, 0x7FFF)
    state.bump([])
    assert not state.has_producer_id


def test_sequences_wrap_at_int32_max() -> None:
    state = IdempotenceState()
    state.set_producer(1, 0)
    state._next_sequence[TP] = 0x7FFFFFFF
    first, second = make_batch(TP, 2), make_batch(TP, 1)
    state.assign(first)
    state.assign(second)
    assert (first.base_sequence, second.base_sequence) == (0x7FFFFFFF, 1)
