"""Where sent records wait to be batched: per-partition batches, the memory bound, and record futures.

`RecordAccumulator.append` is called by whoever calls `send` (the event-loop thread for the async producer,
any application thread for the sync one), so the batch queues are guarded by a lock; the sender drains
them on the event-loop thread. A batch is ready to go when it is full (`batch.size`), has waited
`linger.ms`, or when the producer is flushing or closing, or when a `send` is waiting for memory.

`BufferPool` bounds the bytes records may hold while they wait (`buffer.memory`). Each record reserves an
upper bound of its encoded size, released when its batch completes; a `send` that finds no room waits up to
`max.block.ms` (it never lets memory grow without bound) and then raises `BufferExhaustedError`.

`RecordFuture` is what the sync producer's `send` returns: a `concurrent.futures.Future`-like object
(`result`, `exception`, `done`, `add_done_callback`) with kafka-python's `get`, `add_callback` and
`add_errback`. The async producer hands out asyncio futures instead; a batch completes either kind.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import struct
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from crc32c import crc32c

from backbone.client.errors import BufferExhaustedError, KafkaTimeoutError
from backbone.client.structs import RecordMetadata, TopicPartition
from backbone.protocol.compression import Codec
from backbone.protocol.record_batch import CRC_OFFSET, CRC_START
from backbone.protocol.records import Header, RecordBatchBuilder

__all__ = ["BufferPool", "ProducerBatch", "RecordAccumulator", "RecordFuture", "stamp_producer"]

log = logging.getLogger(__name__)

_PRODUCER_FIELDS = struct.Struct(">qhi")  # producer id, producer epoch, base sequence
_PRODUCER_FIELDS_OFFSET = 43
_CRC = struct.Struct(">I")
_callback_lock = threading.Lock()

Callback = Callable[[RecordMetadata | None, BaseException | None], Any]


def stamp_producer(batch: bytes, producer_id: int, epoch: int, base_sequence: int) -> bytes:
    """The batch with its producer id, epoch and base sequence set and the CRC recomputed."""
    out = bytearray(batch)
    _PRODUCER_FIELDS.pack_into(out, _PRODUCER_FIELDS_OFFSET, producer_id, epoch, base_sequence)
    _CRC.pack_into(out, CRC_OFFSET, crc32c(memoryview(out)[CRC_START:]))
    return bytes(out)


def run_callback(callback: Callable[..., Any], *args: Any) -> None:
    """Call user code; its exceptions are logged (with traceback), never allowed to stop the producer."""
    try:
        callback(*args)
    except Exception:
        log.exception("producer callback raised callback=%r", callback)


class RecordFuture:
    """The outcome of one `Producer.send`: RecordMetadata, or the exception that failed the record."""

    __slots__ = ("_batch_done", "_callbacks", "_done", "_error", "_value")

    def __init__(self, batch_done: threading.Event) -> None:
        self._batch_done = batch_done
        self._done = False
        self._value: RecordMetadata | None = None
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[RecordFuture], Any]] | None = []

    def set_result(self, value: RecordMetadata) -> None:
        self._finish(value, None)

    def set_exception(self, error: BaseException) -> None:
        self._finish(None, error)

    def _finish(self, value: RecordMetadata | None, error: BaseException | None) -> None:
        with _callback_lock:
            if self._done:
                return
            self._value, self._error, self._done = value, error, True
            callbacks, self._callbacks = self._callbacks or [], None
        for callback in callbacks:
            run_callback(callback, self)

    def done(self) -> bool:
        return self._done

    def cancelled(self) -> bool:
        return False

    def _wait(self, timeout: float | None) -> None:
        if not self._done and not self._batch_done.wait(timeout):
            raise KafkaTimeoutError(f"record not acknowledged within {timeout} s (it may still be delivered)")
        if not self._done:  # the batch event is set only after every record of the batch finished
            raise AssertionError("batch completed without completing its records")

    def result(self, timeout: float | None = None) -> RecordMetadata:
        self._wait(timeout)
        if self._error is not None:
            raise self._error
        assert self._value is not None
        return self._value

    get = result

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._wait(timeout)
        return self._error

    def add_done_callback(self, fn: Callable[[RecordFuture], Any]) -> None:
        """Call `fn(future)` when the record completes (at once if it has); on the producer's thread."""
        with _callback_lock:
            if self._callbacks is not None:
                self._callbacks.append(fn)
                return
        run_callback(fn, self)

    def add_callback(self, fn: Callable[..., Any], *args: Any) -> RecordFuture:
        """kafka-python style: `fn(*args, metadata)` on success."""
        self.add_done_callback(lambda f: f._error is None and fn(*args, f._value))
        return self

    def add_errback(self, fn: Callable[..., Any], *args: Any) -> RecordFuture:
        """kafka-python style: `fn(*args, exception)` on failure."""
        self.add_done_callback(lambda f: f._error is not None and fn(*args, f._error))
        return self

    def succeeded(self) -> bool:
        return self._done and self._error is None

    def failed(self) -> bool:
        return self._done and self._error is not None


class BufferPool:
    """A byte budget (`buffer.memory`) shared by every waiting record."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.available = total
        self._cond = threading.Condition()
        self._async_waiters: list[asyncio.Future[None]] = []
        self._sync_waiters = 0

    @property
    def has_waiters(self) -> bool:
        return bool(self._async_waiters) or self._sync_waiters > 0

    def _too_big(self, size: int) -> BufferExhaustedError:
        return BufferExhaustedError(
            f"a record of about {size} bytes can never fit buffer.memory ({self.total} bytes); "
            "raise buffer.memory"
        )

    def _timeout(self, size: int, max_block_ms: int) -> BufferExhaustedError:
        return BufferExhaustedError(
            f"no room for {size} more bytes in buffer.memory ({self.total} bytes) within max.block.ms "
            f"({max_block_ms} ms): the brokers do not take records as fast as they are sent. Slow down, "
            "or raise buffer.memory or max.block.ms"
        )

    def try_reserve(self, size: int) -> bool:
        with self._cond:
            if self.available >= size:
                self.available -= size
                return True
            return False

    def reserve_blocking(self, size: int, max_block_ms: int) -> None:
        """Reserve `size` bytes, waiting up to `max_block_ms` (any thread but the event loop's)."""
        if size > self.total:
            raise self._too_big(size)
        deadline = time.monotonic() + max_block_ms / 1000
        with self._cond:
            self._sync_waiters += 1
            try:
                while self.available < size:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise self._timeout(size, max_block_ms)
                    self._cond.wait(remaining)
                self.available -= size
            finally:
                self._sync_waiters -= 1

    async def reserve(self, size: int, max_block_ms: int) -> None:
        """Reserve `size` bytes, waiting up to `max_block_ms` (on the event loop)."""
        if size > self.total:
            raise self._too_big(size)
        deadline = time.monotonic() + max_block_ms / 1000
        while not self.try_reserve(size):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self._timeout(size, max_block_ms)
            waiter = asyncio.get_running_loop().create_future()
            with self._cond:
                self._async_waiters.append(waiter)
            try:
                async with asyncio.timeout(remaining):
                    await waiter
            except TimeoutError:
                raise self._timeout(size, max_block_ms) from None
            finally:
                with self._cond:
                    if waiter in self._async_waiters:
                        self._async_waiters.remove(waiter)

    def release(self, size: int) -> None:
        """Give bytes back (from any thread) and wake whoever waits for them."""
        with self._cond:
            self.available += size
            self._cond.notify_all()
            waiters, self._async_waiters = self._async_waiters, []
        for waiter in waiters:
            # Futures are woken on their own loop: release may run on an application thread.
            waiter.get_loop().call_soon_threadsafe(_wake, waiter)


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class ProducerBatch:
    """Records for one partition that travel together, and the futures waiting on them."""

    __slots__ = (
        "attempts",
        "base_sequence",
        "builder",
        "created",
        "deadline",
        "done",
        "done_event",
        "full",
        "producer_epoch",
        "producer_id",
        "records",
        "reserved",
        "retry_at",
        "sinks",
        "timestamps",
        "tp",
    )

    def __init__(
        self, tp: TopicPartition, builder: RecordBatchBuilder, now: float, delivery_timeout: float
    ) -> None:
        self.tp = tp
        self.builder = builder
        self.created = now
        self.deadline = now + delivery_timeout
        self.sinks: list[Any] = []
        self.timestamps: list[int] = []
        self.reserved = 0
        self.full = False
        self.attempts = 0
        self.retry_at = 0.0
        self.records: bytes | None = None
        self.producer_id = -1
        self.producer_epoch = -1
        self.base_sequence = -1
        self.done = False
        self.done_event = threading.Event()

    @property
    def record_count(self) -> int:
        return self.builder.record_count

    def __repr__(self) -> str:
        return (
            f"<ProducerBatch {self.tp} records={self.record_count} seq={self.base_sequence} "
            f"attempts={self.attempts}>"
        )

    def build(self) -> bytes:
        """The batch's bytes with the producer fields of this attempt (built and compressed once)."""
        if self.records is None:
            self.records = self.builder.build()
        if self.producer_id >= 0:
            return stamp_producer(self.records, self.producer_id, self.producer_epoch, self.base_sequence)
        return self.records

    def complete(self, base_offset: int, log_append_time: int, error: BaseException | None) -> None:
        """Resolve every record's future (offsets are base_offset + index; -1 stays -1 for acks=0)."""
        if self.done:
            return
        self.done = True
        topic, partition = self.tp
        for index, sink in enumerate(self.sinks):
            if sink is None:
                continue
            if error is not None:
                if not sink.done():
                    sink.set_exception(error)
                continue
            offset = base_offset + index if base_offset >= 0 else -1
            stamp = log_append_time if log_append_time >= 0 else self.timestamps[index]
            if not sink.done():
                sink.set_result(RecordMetadata(topic, partition, offset, stamp))
        self.done_event.set()


class RecordAccumulator:
    """Per-partition queues of batches; thread-safe appends, drained by the sender."""

    def __init__(
        self,
        pool: BufferPool,
        *,
        batch_size: int,
        linger_ms: int,
        codec: Codec,
        compression_level: int | None,
        delivery_timeout_ms: int,
    ) -> None:
        self.pool = pool
        self.batch_size = batch_size
        self.linger = linger_ms / 1000
        self.codec = codec
        self.compression_level = compression_level
        self.delivery_timeout = delivery_timeout_ms / 1000
        self.lock = threading.Lock()
        self.queues: dict[TopicPartition, collections.deque[ProducerBatch]] = {}
        self.flushing = 0
        self.closing = False

    def _open_batch(self, queue: collections.deque[ProducerBatch] | None) -> ProducerBatch | None:
        batch = queue[-1] if queue else None
        if batch is None or batch.full or batch.attempts or batch.records is not None:
            return None
        return batch

    def append(
        self,
        tp: TopicPartition,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header],
        timestamp: int,
        make_sink: Callable[[ProducerBatch], Any] | None,
        reserved: int,
        abort_if_new: bool = False,
    ) -> tuple[ProducerBatch, bool] | None:
        """Add a record to the partition's open batch (or a new one); return it and whether it is new.

        `make_sink(batch)` makes the record's future; it runs under the lock, so the batch cannot complete
        before its future exists. With `abort_if_new`, return None instead of opening a new batch.
        """
        with self.lock:
            queue = self.queues.get(tp)
            if queue is None:
                queue = self.queues[tp] = collections.deque()
            batch = self._open_batch(queue)
            if batch is not None and not batch.builder.has_room_for(key, value, headers, self.batch_size):
                batch.full = True
                batch = None
            created = batch is None
            if batch is None and abort_if_new:
                return None
            if batch is None:
                builder = RecordBatchBuilder(self.codec, compression_level=self.compression_level)
                batch = ProducerBatch(tp, builder, time.monotonic(), self.delivery_timeout)
            batch.builder.append(key, value, headers, timestamp)
            if created:
                queue.append(batch)  # only once the record is in: a failed append leaves no empty batch
            batch.sinks.append(make_sink(batch) if make_sink is not None else None)
            batch.timestamps.append(timestamp)
            batch.reserved += reserved
            if batch.builder.size_in_bytes >= self.batch_size:
                batch.full = True
            return batch, created

    def is_sendable(self, batch: ProducerBatch, now: float) -> bool:
        if batch.attempts:
            return now >= batch.retry_at
        return (
            batch.full
            or now - batch.created >= self.linger
            or self.flushing > 0
            or self.closing
            or self.pool.has_waiters
        )

    def next_ready_in(self, now: float) -> float:
        """Seconds until some waiting batch becomes sendable by lingering or backoff (inf: none waits)."""
        soonest = float("inf")
        with self.lock:
            for queue in self.queues.values():
                if queue:
                    batch = queue[0]
                    due = batch.retry_at if batch.attempts else batch.created + self.linger
                    soonest = min(soonest, due - now)
        return max(soonest, 0.0)

    def pending_batches(self) -> list[ProducerBatch]:
        with self.lock:
            return [batch for queue in self.queues.values() for batch in queue]

    def has_pending(self) -> bool:
        with self.lock:
            return any(self.queues.values())

    def reenqueue(self, batch: ProducerBatch) -> None:
        """Put a batch to retry back at the front of its queue, ordered by sequence among retries."""
        with self.lock:
            queue = self.queues.setdefault(batch.tp, collections.deque())
            position = 0
            while (
                position < len(queue)
                and queue[position].attempts
                and (batch.base_sequence < 0 or 0 <= queue[position].base_sequence < batch.base_sequence)
            ):
                position += 1
            queue.insert(position, batch)

    def expire(self, now: float) -> list[ProducerBatch]:
        """Take out the waiting batches whose `delivery.timeout.ms` has passed."""
        expired = []
        with self.lock:
            for queue in self.queues.values():
                while queue and queue[0].deadline <= now:
                    expired.append(queue.popleft())
                # Batches behind a live head are younger unless retries reordered them; check them all.
                stale = [b for b in queue if b.deadline <= now]
                for batch in stale:
                    queue.remove(batch)
                    expired.append(batch)
        return expired

    def take_all(self) -> list[ProducerBatch]:
        """Remove every waiting batch (to fail them on a forced close)."""
        with self.lock:
            batches = [batch for queue in self.queues.values() for batch in queue]
            self.queues.clear()
        return batches
