"""The async producer against the in-process fake cluster: delivery, partitioning, retries, idempotence."""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any

import pytest

from backbone.client.producer import sender as sender_module
from backbone.client.producer.accumulator import BufferPool, ProducerBatch, RecordAccumulator
from backbone.client.producer.batch_builder import new_batch_builder
from backbone.client.producer.partitioner import partition_for_key
from backbone.client.producer.producer import AsyncProducer, AsyncRecordFuture
from backbone.client.structs import RecordMetadata, TopicPartition
from backbone.protocol.api import ApiKey
from backbone.protocol.compression import Codec
from backbone.protocol.errors import (
    ErrorCode,
    MessageTooLargeError,
    TopicAuthorizationFailedError,
)
from backbone.protocol.record_batch import check_batch, read_header
from backbone.wire.errors import BufferExhaustedError, ClientClosedError, KafkaTimeoutError
from tests.helpers.fake_cluster import FakeCluster

pytestmark = [pytest.mark.unit, pytest.mark.fake_topic("t", 3)]

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def producer(fake: FakeCluster, **options: Any) -> AsyncProducer:
    options.setdefault("retry_backoff_ms", 10)
    return AsyncProducer(bootstrap_servers=fake.bootstrap, **options)


def stored(fake: FakeCluster, partition: int) -> list[tuple[int, bytes | None, bytes | None, tuple]]:
    part = fake.partition("t", partition)
    return [(r[0], r[2], r[3], r[4]) for batch in part.decoded() for r in batch.records]


@pytest.mark.parametrize("codec", CODECS)
async def test_records_arrive_with_keys_headers_and_offsets(fake: FakeCluster, codec: str) -> None:
    async with producer(fake, compression_type=codec) as p:
        futures = []
        for i in range(50):
            key = f"user-{i % 7}".encode()
            headers = [("trace", f"t{i}".encode()), ("none", None)]
            futures.append(await p.send("t", f"event {i}".encode() * 3, key=key, headers=headers))
        results = await asyncio.gather(*futures)
    for i, metadata in enumerate(results):
        key = f"user-{i % 7}".encode()
        assert metadata.partition == partition_for_key(key, 3)
        offset, stored_key, value, headers = stored(fake, metadata.partition)[metadata.offset]
        assert (offset, stored_key, value) == (metadata.offset, key, f"event {i}".encode() * 3)
        assert headers == (("trace", f"t{i}".encode()), ("none", None))
    batch_codecs = {read_header(b).compression for p in range(3) for b in fake.partition("t", p).batches}
    assert batch_codecs == {CODECS.index(codec)}


async def test_unkeyed_records_stick_to_one_partition_per_batch(fake: FakeCluster) -> None:
    async with producer(fake, linger_ms=1000, batch_size=2000) as p:
        futures = [await p.send("t", b"x" * 100) for _ in range(60)]
        await p.flush()
        results = await asyncio.gather(*futures)
    counts = [len(stored(fake, partition)) for partition in range(3)]
    assert sum(counts) == 60
    sizes = sorted(read_header(b).record_count for p in range(3) for b in fake.partition("t", p).batches)
    assert sizes[0] < sizes[1] == sizes[-1] > 10, "every batch is full but the one flushed last"
    # Consecutive records share a partition until its batch is full.
    switches = sum(1 for a, b in itertools.pairwise(results) if a.partition != b.partition)
    assert switches == len(sizes) - 1


async def test_an_explicit_partition_and_timestamp_are_kept(fake: FakeCluster) -> None:
    async with producer(fake) as p:
        metadata = await p.send_and_wait("t", b"v", partition=2, timestamp_ms=1_234)
    assert metadata == RecordMetadata("t", 2, 0, 1_234)
    with pytest.raises(ValueError, match="no partition 9"):
        async with producer(fake) as p:
            await p.send("t", b"v", partition=9)


@pytest.mark.parametrize("acks", [0, 1, -1])
async def test_every_acks_setting_delivers(fake: FakeCluster, acks: int) -> None:
    async with producer(fake, acks=acks, enable_idempotence=acks == -1) as p:
        results = await asyncio.gather(*[await p.send("t", b"v%d" % i, partition=0) for i in range(10)])
    assert [r.offset for r in results] == ([-1] * 10 if acks == 0 else list(range(10)))
    for _ in range(100):  # acks=0: nothing answers, so wait (bounded) for the broker to have them
        if len(stored(fake, 0)) == 10:
            break
        await asyncio.sleep(0.01)
    assert [v for _, _, v, _ in stored(fake, 0)] == [b"v%d" % i for i in range(10)]


async def test_callbacks_get_metadata_or_the_exception(fake: FakeCluster) -> None:
    seen: list[tuple[object, object]] = []
    async with producer(fake) as p:
        future = await p.send("t", b"v", partition=1, callback=lambda md, exc: seen.append((md, exc)))
        await future
        await asyncio.sleep(0)  # done-callbacks run on the next loop iteration
    assert seen == [(RecordMetadata("t", 1, 0, future.result().timestamp), None)]


# -- retries ------------------------------------------------------------------------------------------


async def test_a_moved_leader_is_found_again_and_nothing_is_lost(fake: FakeCluster) -> None:
    async with producer(fake) as p:
        await p.send_and_wait("t", b"before", partition=0)
        fake.move_leader("t", 0, 1)
        metadata_requests = sum(1 for _, key, _ in fake.requests if key == ApiKey.METADATA)
        result = await p.send_and_wait("t", b"after", partition=0)
    assert result.offset == 1
    assert [v for _, _, v, _ in stored(fake, 0)] == [b"before", b"after"]
    assert sum(1 for _, key, _ in fake.requests if key == ApiKey.METADATA) > metadata_requests
    assert (1, ApiKey.PRODUCE) in {(node, key) for node, key, _ in fake.requests}


async def test_retriable_errors_are_retried_and_order_is_kept(fake: FakeCluster) -> None:
    async with producer(fake, linger_ms=0, batch_size=200) as p:
        await p.send_and_wait("t", b"first", partition=0)  # the broker knows the producer from here on
        fake.inject_error(ApiKey.PRODUCE, ErrorCode.not_enough_replicas, count=3, topic="t", partition=0)
        futures = [await p.send("t", b"%03d" % i + b"x" * 50, partition=0) for i in range(40)]
        results = await asyncio.gather(*futures)
    assert [r.offset for r in results] == list(range(1, 41))
    assert [v[:3] for _, _, v, _ in stored(fake, 0)][1:] == [b"%03d" % i for i in range(40)]


async def test_a_gap_behind_acknowledged_batches_is_resolved_by_a_new_epoch(fake: FakeCluster) -> None:
    # The first batches fail while the broker does not know the producer yet, and it takes later ones
    # (Kafka accepts any first sequence): the failed batches can only go in under a new epoch.
    fake.inject_error(ApiKey.PRODUCE, ErrorCode.not_enough_replicas, count=2, topic="t", partition=0)
    async with producer(fake, linger_ms=0, batch_size=100) as p:
        futures = [await p.send("t", b"%03d" % i + b"x" * 50, partition=0) for i in range(6)]
        async with asyncio.timeout(10):
            results = await asyncio.gather(*futures)
        assert p.idempotence is not None and p.idempotence.epoch >= 1
    assert sorted(r.offset for r in results) == list(range(6))
    assert sorted(v[:3] for _, _, v, _ in stored(fake, 0)) == [b"%03d" % i for i in range(6)]


async def test_a_lost_answer_is_retried_without_duplicates_by_the_idempotent_producer(
    fake: FakeCluster,
) -> None:
    async with producer(fake) as p:
        await p.send_and_wait("t", b"first", partition=0)
        fake.lose_produce_responses = 1  # the broker writes the batch, the answer never arrives
        result = await p.send_and_wait("t", b"second", partition=0)
    assert result.offset == 1, "the retry was answered with the offset of the first write"
    assert [v for _, _, v, _ in stored(fake, 0)] == [b"first", b"second"]


async def test_without_idempotence_a_lost_answer_duplicates_the_record(fake: FakeCluster) -> None:
    async with producer(fake, acks=1) as p:
        fake.lose_produce_responses = 1
        await p.send_and_wait("t", b"once", partition=0)
    assert [v for _, _, v, _ in stored(fake, 0)] == [b"once", b"once"]


@pytest.mark.parametrize("code", [ErrorCode.out_of_order_sequence_number, ErrorCode.unknown_producer_id])
async def test_sequence_errors_bump_the_epoch_and_deliver(fake: FakeCluster, code: int) -> None:
    async with producer(fake) as p:
        await p.send_and_wait("t", b"a", partition=0)
        fake.inject_error(ApiKey.PRODUCE, code, topic="t", partition=0)
        result = await p.send_and_wait("t", b"b", partition=0)
        assert p.idempotence is not None and p.idempotence.epoch == 1
    assert result.offset == 1
    headers = [read_header(b) for b in fake.partition("t", 0).batches]
    assert [(h.producer_epoch, h.base_sequence) for h in headers] == [(0, 0), (1, 0)]


async def test_a_non_retriable_error_fails_the_record_with_its_class(fake: FakeCluster) -> None:
    fake.inject_error(ApiKey.PRODUCE, ErrorCode.topic_authorization_failed, topic="t", partition=0)
    async with producer(fake) as p:
        future = await p.send("t", b"v", partition=0)
        with pytest.raises(TopicAuthorizationFailedError):
            await future


# -- limits -------------------------------------------------------------------------------------------


async def test_records_expire_after_delivery_timeout(fake: FakeCluster) -> None:
    fake.create_topic("orphan", 1, leaders=[7])  # a leader no client can reach
    async with producer(fake, request_timeout_ms=100, linger_ms=0, delivery_timeout_ms=300) as p:
        future = await p.send("orphan", b"v")
        with pytest.raises(
            KafkaTimeoutError, match=r"expiring 1 record\(s\) for orphan-0.*delivery.timeout.ms"
        ):
            await future


async def test_a_sent_batch_left_unanswered_expires_at_delivery_timeout(fake: FakeCluster) -> None:
    # The broker takes the request and hangs. Each request's own timeout (and the retry it allows) must
    # not stretch the wait: the batch fails once delivery.timeout.ms passed since it was made, as Kafka's.
    fake.produce_answers.clear()
    async with producer(fake, request_timeout_ms=400, linger_ms=0, delivery_timeout_ms=500) as p:
        future = await p.send("t", b"v", partition=0)
        with pytest.raises(
            KafkaTimeoutError, match=r"expiring 1 record\(s\) for t-0: \d+ ms passed .*delivery.timeout.ms"
        ):
            await future
        assert p.metrics()["batches_in_flight"] == 0
        fake.produce_answers.set()  # the held answers arrive late (or on a closed connection): ignored
        assert (await p.send_and_wait("t", b"after", partition=0)).partition == 0
        await p.flush(timeout=5)
        assert p.metrics()["buffer_available_bytes"] == p.pool.total, "a late answer released memory twice"


async def test_a_batch_answered_after_it_expired_in_flight_is_not_settled_again(fake: FakeCluster) -> None:
    # A request timeout above the delivery timeout's share keeps the connection open, so the broker's
    # answer does come, after the batch expired.
    fake.produce_answers.clear()
    async with producer(fake, request_timeout_ms=2000, linger_ms=0, delivery_timeout_ms=2000) as p:
        p.sender.accumulator.delivery_timeout = 0.3  # below the floor the config allows, for the test
        future = await p.send("t", b"late", partition=0)
        with pytest.raises(KafkaTimeoutError, match=r"delivery\.timeout\.ms"):
            await future
        fake.produce_answers.set()
        metadata = await p.send_and_wait("t", b"next", partition=0)
        await p.flush(timeout=5)
        assert p.metrics()["buffer_available_bytes"] == p.pool.total
        assert future.exception() is not None, "the expired record's outcome changed when the answer came"
    # The late batch was written (an expired record's outcome is unknown to its sender, as in Kafka).
    assert [v for _, _, v, _ in stored(fake, 0)] == [b"late", b"next"]
    assert metadata.offset == 1


async def test_an_unexpected_error_reading_an_answer_retries_its_batches_and_loses_nothing(
    fake: FakeCluster, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A defect after the broker wrote the batch (here: decoding its answer fails once). The batches are
    # treated as unanswered: retried, and the idempotent producer's retry is not written twice.
    real_decode = sender_module.decode_produce_response
    faults = iter([RuntimeError("a defect decoding the answer")])

    def decode_failing_once(*args: Any) -> Any:
        fault = next(faults, None)
        if fault is not None:
            raise fault
        return real_decode(*args)

    monkeypatch.setattr(sender_module, "decode_produce_response", decode_failing_once)
    with caplog.at_level(logging.WARNING, logger=sender_module.__name__):
        async with producer(fake, linger_ms=0) as p:
            futures = [await p.send("t", b"%d" % i, partition=0) for i in range(3)]
            metadata = [await f for f in futures]
            await p.flush(timeout=5)
            assert p.metrics()["buffer_available_bytes"] == p.pool.total
    assert any("event=produce_request_failed node=0" in r.getMessage() for r in caplog.records)
    assert any("event=batch_retry partition=t-0" in r.getMessage() for r in caplog.records)
    assert [v for _, _, v, _ in stored(fake, 0)] == [b"0", b"1", b"2"]
    assert [m.offset for m in metadata] == [0, 1, 2]


async def test_a_failed_sender_round_is_logged_and_the_next_round_delivers(
    fake: FakeCluster, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger=sender_module.__name__):
        async with producer(fake, linger_ms=0) as p:
            await p.send_and_wait("t", b"before", partition=0)
            accumulator = p.sender.accumulator
            real_expire = accumulator.expire_locked
            faults = iter([RuntimeError("a defect in a round")])

            def expire_failing_once(now: float) -> list[ProducerBatch]:
                fault = next(faults, None)
                if fault is not None:
                    raise fault
                return real_expire(now)

            accumulator.expire_locked = expire_failing_once  # type: ignore[method-assign]
            metadata = await p.send_and_wait("t", b"after", partition=0)
            assert next(faults, None) is None, "the fault was not reached"
    assert any("event=sender_round_failed" in r.getMessage() for r in caplog.records)
    assert metadata.offset == 1
    assert [v for _, _, v, _ in stored(fake, 0)] == [b"before", b"after"]


class _EarlyTimer:
    """A timer handle that reports the time it was asked for while its callback runs sooner."""

    def __init__(self, handle: asyncio.TimerHandle, when: float) -> None:
        self._handle, self._when = handle, when

    def when(self) -> float:
        return self._when

    def cancel(self) -> None:
        self._handle.cancel()


async def test_a_linger_timer_that_fires_before_its_time_still_sends_the_batch(
    fake: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # uvloop's timers count whole milliseconds and can fire before their when(): the sender must not take
    # a timer that has fired for one still to come, or a lingering batch waits for good.
    loop = asyncio.get_running_loop()
    real_call_at = loop.call_at
    early_timers = 0

    def call_early(when: float, callback: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal early_timers
        senders = getattr(callback, "__self__", None) is p.sender._wakeup or callback.__qualname__.startswith(
            "Sender."
        )
        if not senders:
            return real_call_at(when, callback, *args, **kwargs)
        early_timers += 1
        sooner = loop.time() + (when - loop.time()) / 10
        return _EarlyTimer(real_call_at(sooner, callback, *args, **kwargs), when)

    async with producer(fake, linger_ms=200) as p:
        await p.send_and_wait("t", b"first", partition=0)  # connected, producer id known
        monkeypatch.setattr(loop, "call_at", call_early)
        future = await p.send("t", b"lingering", partition=0)
        metadata = await asyncio.wait_for(future, 5)
        monkeypatch.undo()
    assert early_timers >= 1, "the sender set no linger timer"
    assert metadata.offset == 1
    assert [v for _, _, v, _ in stored(fake, 0)] == [b"first", b"lingering"]


async def test_an_unknown_topic_fails_after_max_block(fake: FakeCluster) -> None:
    async with producer(fake, max_block_ms=200) as p:
        with pytest.raises(KafkaTimeoutError, match="topic 'missing' not available after"):
            await p.send("missing", b"v")


async def test_a_full_buffer_blocks_then_fails(fake: FakeCluster) -> None:
    fake.create_topic("orphan", 1, leaders=[7])
    async with producer(fake, buffer_memory=2000, max_block_ms=100, linger_ms=1000) as p:
        with pytest.raises(BufferExhaustedError, match=r"max.block.ms"):
            for _ in range(100):  # bounded: the buffer fills long before
                await p.send("orphan", b"x" * 100)
        await p.close(timeout=0)


async def test_bad_records_are_refused_at_send(fake: FakeCluster) -> None:
    async with producer(fake, max_request_size=1000) as p:
        with pytest.raises(MessageTooLargeError, match=r"max.request.size \(1000\)"):
            await p.send("t", b"x" * 2000)
        with pytest.raises(TypeError, match="record value must be bytes or None, got str"):
            await p.send("t", "text")


async def test_serializers_turn_objects_into_bytes(fake: FakeCluster) -> None:
    async with producer(fake, value_serializer=lambda v: str(v).encode(), key_serializer=str.encode) as p:
        await p.send_and_wait("t", {"a": 1}, key="k", partition=0)
    assert stored(fake, 0)[0][1:3] == (b"k", b"{'a': 1}")


async def test_close_fails_what_could_not_be_delivered(fake: FakeCluster) -> None:
    fake.create_topic("orphan", 1, leaders=[7])
    p = producer(fake)
    await p.start()
    future = await p.send("orphan", b"v")
    await p.close(timeout=0.1)
    with pytest.raises(ClientClosedError, match="closed before this record was delivered"):
        await future
    with pytest.raises(ClientClosedError):
        await p.send("t", b"v")


async def test_flush_waits_for_every_answer(fake: FakeCluster) -> None:
    async with producer(fake, linger_ms=10_000) as p:
        futures = [await p.send("t", b"v", partition=i % 3) for i in range(30)]
        await p.flush(timeout=5)
        assert all(f.done() for f in futures)
        assert p.metrics()["batches_waiting"] == 0


async def test_sends_waiting_for_memory_go_out_as_it_is_freed(fake: FakeCluster) -> None:
    # Far more than buffer.memory, and batches that would linger for 10 s: only the sends waiting for
    # memory make them go, and each waiting send gets its memory once an answer frees some.
    async with producer(fake, buffer_memory=3000, linger_ms=10_000, max_block_ms=5000) as p:
        async with asyncio.timeout(10):
            futures = [await p.send("t", b"%03d" % i + b"x" * 97, partition=0) for i in range(100)]
        assert sum(f.done() for f in futures) >= 100 - 3000 // 100, "only what fits in memory waits"
        await p.flush(timeout=10)  # the last batch would linger
        results = [f.result() for f in futures]
        assert p.metrics()["buffer_available_bytes"] == 3000, "every reservation was given back"
    assert [r.offset for r in results] == list(range(100))
    assert [v[:3] for _, _, v, _ in stored(fake, 0)] == [b"%03d" % i for i in range(100)]


# -- record futures -----------------------------------------------------------------------------------


async def test_a_record_future_before_and_after_its_batch_completes(fake: FakeCluster) -> None:
    async with producer(fake, linger_ms=10_000) as p:
        future = await p.send("t", b"v", partition=1, timestamp_ms=5)
        assert isinstance(future, AsyncRecordFuture)
        assert not future.done() and not future.cancelled()
        with pytest.raises(asyncio.InvalidStateError):
            future.result()
        with pytest.raises(asyncio.InvalidStateError):
            future.exception()
        seen: list[object] = []
        future.add_done_callback(seen.append)
        await p.flush()
        assert future.done() and future.succeeded() and seen == [future]
        assert future.result() == await future == RecordMetadata("t", 1, 0, 5)
        assert future.exception() is None
        late: list[object] = []
        future.add_done_callback(late.append)  # added after completion: runs at once
        assert late == [future]


async def test_cancelling_one_waiter_leaves_the_others_and_the_record(fake: FakeCluster) -> None:
    async with producer(fake, linger_ms=10_000) as p:
        future = await p.send("t", b"v", partition=0)
        first = asyncio.ensure_future(_await(future))
        second = asyncio.ensure_future(_await(future))
        await asyncio.sleep(0)  # both wait now
        first.cancel()
        await p.flush()
        assert (await second).offset == 0
        with pytest.raises(asyncio.CancelledError):
            await first
        assert future.result().offset == 0
    assert [v for _, _, v, _ in stored(fake, 0)] == [b"v"]


async def _await(future: AsyncRecordFuture) -> RecordMetadata:
    return await future


async def test_a_failed_record_raises_from_await_result_and_exception(fake: FakeCluster) -> None:
    fake.inject_error(ApiKey.PRODUCE, ErrorCode.topic_authorization_failed, topic="t", partition=0)
    errors: list[BaseException | None] = []
    async with producer(fake) as p:
        future = await p.send("t", b"v", partition=0, callback=lambda md, exc: errors.append(exc))
        with pytest.raises(TopicAuthorizationFailedError):
            await future
        assert future.failed() and isinstance(future.exception(), TopicAuthorizationFailedError)
        with pytest.raises(TopicAuthorizationFailedError):
            future.result()
    assert len(errors) == 1 and isinstance(errors[0], TopicAuthorizationFailedError)


# -- batches ------------------------------------------------------------------------------------------

TP = TopicPartition("t", 0)


def _accumulator(batch_size: int = 1000) -> RecordAccumulator:
    return RecordAccumulator(
        BufferPool(1 << 20),
        batch_size=batch_size,
        linger_ms=0,
        codec=Codec.NONE,
        compression_level=None,
        delivery_timeout_ms=1000,
    )


def test_a_completed_batch_keeps_its_metadata_but_not_its_bytes() -> None:
    acc = _accumulator()
    with acc.lock:
        batch = acc.add(TP, None, b"a", (), 100, 50)
        assert acc.add(TP, b"k", b"b", (), 101, 50) is batch
    batch.producer_id, batch.producer_epoch, batch.base_sequence = 7, 0, 3
    header = check_batch(batch.build())
    assert (header.producer_id, header.base_sequence, header.record_count) == (7, 3, 2)
    batch.complete(40, -1, None)
    assert batch.records is None and batch.builder is None, "futures may outlive the batch's bytes"
    assert batch.record_count == 2 and batch.reserved == 100
    assert [batch.metadata(i) for i in range(2)] == [
        RecordMetadata("t", 0, 40, 100),
        RecordMetadata("t", 0, 41, 101),
    ]


def test_a_renumbered_batch_is_restamped_once() -> None:
    builder = new_batch_builder(Codec.NONE, None, 16384)
    builder.append(0, 1, None, b"x", [])
    batch = ProducerBatch(TP, builder, 0.0, 1.0)
    batch.timestamps.append(1)
    batch.producer_id, batch.producer_epoch, batch.base_sequence = 7, 0, 0
    first = batch.build()
    assert batch.build() is first, "a retry with the same fields sends the same bytes"
    batch.producer_epoch, batch.base_sequence = 1, 0  # an epoch bump renumbered it
    restamped = batch.build()
    header = check_batch(restamped)  # raises if the CRC were stale
    assert (header.producer_epoch, header.base_sequence) == (1, 0)
    assert batch.build() is restamped, "stamped once, then reused"


def test_expiry_finds_stale_batches_behind_live_retries_and_stops_at_the_first_live_fresh_one() -> None:
    acc = _accumulator(batch_size=100)
    with acc.lock:
        fresh = [acc.add(TP, None, b"x" * 80, (), 0, 1) for _ in range(3)]  # one batch each
    fresh[0].deadline, fresh[1].deadline, fresh[2].deadline = 5.0, 20.0, 8.0  # 8.0: not in creation order
    retried = ProducerBatch(TP, new_batch_builder(Codec.NONE, None, 16384), 0.0, 30.0)
    retried.attempts, retried.base_sequence = 1, 0
    acc.reenqueue(retried)
    assert list(acc.queues[TP]) == [retried, *fresh]
    expired = acc.expire(10.0)
    assert expired == [fresh[0]], "fresh batches expire in creation order: the scan ends at a live one"
    assert all(batch.full for batch in expired)
    assert list(acc.queues[TP]) == [retried, fresh[1], fresh[2]]
    retried.deadline = 9.0
    assert acc.expire(10.0) == [retried]
