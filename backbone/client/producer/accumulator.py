"""Where sent records wait to be batched: per-partition batches, the memory bound, and record futures.

`RecordAccumulator` keeps a queue of batches per partition; whoever calls `send` (the event-loop thread for
the async producer, any application thread for the sync one) appends, and the sender drains the queues on
the event-loop thread. A batch is ready to go when it is full (`batch.size`), has waited `linger.ms`, or
when the producer is flushing or closing, or when a `send` is waiting for memory.

`BufferPool` (in `buffer_pool`) bounds the bytes records may hold while they wait (`buffer.memory`).

The per-record path is kept to one lock acquisition and one small object. The pool and the accumulator
share one lock (`BufferPool.lock`), so reserving a record's memory, picking its partition and appending it
happen under a single acquisition. A record's future is only (batch, index): completing a batch sets a few
fields on the batch, and a future builds its `RecordMetadata` from them when asked. Callbacks are kept per
batch, as (index, callback) pairs, and only records that have one cost anything when their batch completes.

`RecordFuture` is what the sync producer's `send` returns: a `concurrent.futures.Future`-like object
(`result`, `exception`, `done`, `add_done_callback`) with kafka-python's `get`, `add_callback` and
`add_errback`. The async producer hands out `AsyncRecordFuture`, which is awaited instead.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import struct
import threading
import time
from collections.abc import Callable, Generator, Sequence
from typing import Any

from crc32c import crc32c

from backbone.client.producer.batch_builder import BatchBuilder, as_list, new_batch_builder
from backbone.client.producer.buffer_pool import BufferPool, wake_future
from backbone.client.structs import RecordMetadata, TopicPartition
from backbone.protocol.compression import Codec
from backbone.protocol.record_batch import CRC_OFFSET, CRC_START
from backbone.protocol.records import Header
from backbone.wire.errors import IllegalStateError, KafkaTimeoutError

__all__ = [
    "AsyncRecordFuture",
    "BufferPool",
    "ProducerBatch",
    "RecordAccumulator",
    "RecordFuture",
    "run_callback",
    "stamp_producer",
]

log = logging.getLogger(__name__)

_PRODUCER_FIELDS = struct.Struct(">qhi")  # producer id, producer epoch, base sequence
_PRODUCER_FIELDS_OFFSET = 43
_CRC = struct.Struct(">I")
# Guards callback lists against a batch completing (loop thread) while a callback is added (any thread).
_callback_lock = threading.Lock()

Callback = Callable[[RecordMetadata | None, BaseException | None], Any]


def stamp_producer(batch: bytes | bytearray, producer_id: int, epoch: int, base_sequence: int) -> bytes:
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
        log.exception("event=producer_callback_raised callback=%r", callback)


# -- completions: what record futures read ------------------------------------------------------------


class _Completion:
    """Something records wait on: done once, with an error or with metadata per record index."""

    __slots__ = ("_done_event", "callbacks", "done", "error")

    def __init__(self, done_event: threading.Event | None = None) -> None:
        self.done = False
        self.error: BaseException | None = None
        self._done_event = done_event
        self.callbacks: list[tuple[int, Callback]] | None = []

    @property
    def done_event(self) -> threading.Event:
        """Set once complete. Made when first asked for: nearly every batch completes with nobody blocked
        on it, and an Event (a Condition and a lock inside) per batch was a third of a batch's cost."""
        with _callback_lock:
            event = self._done_event
            if event is None:
                event = self._done_event = threading.Event()
                if self.done:
                    event.set()
            return event

    def _set_done_event(self) -> None:
        # After `_settle`: an Event made later sees `done` and is set as it is made.
        event = self._done_event
        if event is not None:
            event.set()

    def metadata(self, index: int) -> RecordMetadata:
        raise NotImplementedError

    async def wait_done(self) -> None:
        """Wait (on the event loop that completes it) until complete, whatever the outcome."""
        if not self.done:
            waiter = asyncio.get_running_loop().create_future()
            if self.add_callback(0, functools.partial(wake_future, waiter)):
                await waiter

    def add_callback(self, index: int, callback: Callback) -> bool:
        """Keep `callback(metadata, error)` for record `index`; False if complete (then run it yourself)."""
        with _callback_lock:
            if self.callbacks is None:
                return False
            self.callbacks.append((index, callback))
            return True

    def _settle(self, error: BaseException | None) -> list[tuple[int, Callback]] | None:
        """Mark complete; return the callbacks to run, or None if it was complete already."""
        with _callback_lock:
            if self.done:
                return None
            self.error = error
            self.done = True  # after the outcome fields: readers check `done` first
            callbacks, self.callbacks = self.callbacks, None
        return callbacks

    def _run_callbacks(self, callbacks: list[tuple[int, Callback]]) -> None:
        error = self.error
        for index, callback in callbacks:
            if error is None:
                run_callback(callback, self.metadata(index), None)
            else:
                run_callback(callback, None, error)


class _SingleOutcome(_Completion):
    """The completion of a standalone RecordFuture (made from an Event, completed by set_result)."""

    __slots__ = ("value",)

    def __init__(self, done_event: threading.Event) -> None:
        super().__init__(done_event)
        self.value: RecordMetadata | None = None

    def metadata(self, index: int) -> RecordMetadata:
        assert self.value is not None
        return self.value

    def resolve(self, value: RecordMetadata | None, error: BaseException | None) -> None:
        self.value = value
        callbacks = self._settle(error)
        if callbacks is not None:
            self._set_done_event()
            self._run_callbacks(callbacks)


class _RecordFutureBase:
    """Record `index` of a batch; everything it reports is read from the batch."""

    __slots__ = ("_batch", "_index")

    _batch: _Completion
    _index: int

    def done(self) -> bool:
        return self._batch.done

    def cancelled(self) -> bool:
        return False  # a record handed to the producer cannot be taken back

    def succeeded(self) -> bool:
        return self._batch.done and self._batch.error is None

    def failed(self) -> bool:
        return self._batch.done and self._batch.error is not None

    def _outcome(self) -> RecordMetadata:
        """The metadata of a completed record, or its batch's error raised."""
        batch = self._batch
        if batch.error is not None:
            raise batch.error
        return batch.metadata(self._index)

    def _on_done(self, callback: Callback) -> None:
        if not self._batch.add_callback(self._index, callback):
            error = self._batch.error
            run_callback(callback, None if error is not None else self._batch.metadata(self._index), error)

    def add_done_callback(self, fn: Callable[[Any], Any]) -> None:
        """Call `fn(future)` when the record completes, on the thread that completes it (at once if done)."""
        self._on_done(lambda _metadata, _error: fn(self))


class RecordFuture(_RecordFutureBase):
    """The outcome of one `Producer.send`: RecordMetadata, or the exception that failed the record."""

    __slots__ = ()

    def __init__(self, batch: ProducerBatch | threading.Event, index: int = -1) -> None:
        """The future of record `index` of `batch`; from an Event alone, a standalone future.

        A standalone future completes through `set_result`/`set_exception`, and `result` waits on the
        Event for it.
        """
        if index >= 0:  # a batch's record; tested by index, not isinstance: this runs once per record
            # `batch` is a ProducerBatch here; an isinstance check to say so would cost a call per record.
            self._batch = batch  # type: ignore[assignment]
            self._index = index
        else:
            assert isinstance(batch, threading.Event), "RecordFuture(batch, index) or RecordFuture(event)"
            self._batch = _SingleOutcome(batch)
            self._index = 0

    def set_result(self, value: RecordMetadata) -> None:
        self._standalone().resolve(value, None)

    def set_exception(self, error: BaseException) -> None:
        self._standalone().resolve(None, error)

    def _standalone(self) -> _SingleOutcome:
        outcome = self._batch
        if not isinstance(outcome, _SingleOutcome):
            raise IllegalStateError("a record's future completes with its batch, not by hand")
        return outcome

    def _wait(self, timeout: float | None) -> None:
        batch = self._batch
        if not batch.done and not batch.done_event.wait(timeout):
            raise KafkaTimeoutError(f"record not acknowledged within {timeout} s (it may still be delivered)")

    def result(self, timeout: float | None = None) -> RecordMetadata:
        self._wait(timeout)
        return self._outcome()

    get = result

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._wait(timeout)
        return self._batch.error

    def add_callback(self, fn: Callable[..., Any], *args: Any) -> RecordFuture:
        """kafka-python style: `fn(*args, metadata)` on success."""
        self._on_done(lambda metadata, error: error is None and fn(*args, metadata))
        return self

    def add_errback(self, fn: Callable[..., Any], *args: Any) -> RecordFuture:
        """kafka-python style: `fn(*args, exception)` on failure."""
        self._on_done(lambda metadata, error: error is not None and fn(*args, error))
        return self


class AsyncRecordFuture(_RecordFutureBase):
    """The outcome of one `AsyncProducer.send`: `await` it for RecordMetadata (or the record's exception).

    Not an asyncio.Future (creating and resolving one per record was the async producer's largest cost),
    but awaitable, so `asyncio.gather`, `wait_for` and friends take it. `result()` and `exception()` do not
    wait: they raise asyncio.InvalidStateError until the record completed. Callbacks run on the event loop
    thread when the batch completes.
    """

    __slots__ = ()

    def __init__(self, batch: ProducerBatch, index: int) -> None:
        self._batch = batch
        self._index = index

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        batch = self._batch
        if not batch.done:
            # A waiter per awaiting task, not one per batch: cancelling one task must not touch others.
            waiter = asyncio.get_running_loop().create_future()
            if batch.add_callback(self._index, functools.partial(wake_future, waiter)):
                yield from waiter
        return self._outcome()

    def _check_done(self) -> None:
        if not self._batch.done:
            raise asyncio.InvalidStateError("the record is not acknowledged yet; await the future")

    def result(self) -> RecordMetadata:
        self._check_done()
        return self._outcome()

    def exception(self) -> BaseException | None:
        self._check_done()
        return self._batch.error


# -- batches ------------------------------------------------------------------------------------------


class ProducerBatch(_Completion):
    """Records for one partition that travel together, and their outcome once the broker answered."""

    __slots__ = (
        "_built_fields",
        "attempts",
        "base_offset",
        "base_sequence",
        "builder",
        "created",
        "deadline",
        "full",
        "log_append_time",
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
        self, tp: TopicPartition, builder: BatchBuilder, now: float, delivery_timeout: float
    ) -> None:
        super().__init__()
        self.tp = tp
        self.builder: BatchBuilder | None = builder
        self.created = now
        self.deadline = now + delivery_timeout
        self.timestamps: list[int] = []
        self.sinks: list[Any] = []
        """Futures completed one by one (`RecordAccumulator.append`'s `make_sink`); the hot path has none."""
        self.reserved = 0
        self.full = False
        """No more appends: the batch reached `batch.size` or left its queue (drained, expired, closed)."""
        self.attempts = 0
        self.retry_at = 0.0
        self.records: bytes | bytearray | None = None
        self.producer_id = -1
        self.producer_epoch = -1
        self.base_sequence = -1
        self.base_offset = -1
        self.log_append_time = -1
        self._built_fields = (-1, -1, -1)

    @property
    def record_count(self) -> int:
        return len(self.timestamps)

    @property
    def size_in_bytes(self) -> int:
        """The batch's size (compressed once built); an estimate for a request's size."""
        if self.builder is not None:
            return self.builder.size()
        return len(self.records) if self.records is not None else 0

    def __repr__(self) -> str:
        return (
            f"<ProducerBatch {self.tp} records={self.record_count} seq={self.base_sequence} "
            f"attempts={self.attempts}>"
        )

    def build(self) -> bytes | bytearray:
        """The batch's bytes with the producer fields of this attempt (built and compressed once)."""
        fields = (self.producer_id, self.producer_epoch, self.base_sequence)
        if self.records is None:
            assert self.builder is not None, "a completed batch is not sent again"
            # The fields go in before the CRC is computed: one pass over the bytes, no copy to stamp them.
            self.builder.set_producer_state(*fields)
            self.records = self.builder.build()
            self.builder = None
        elif fields != self._built_fields:
            self.records = stamp_producer(self.records, *fields)  # renumbered after an epoch bump
        self._built_fields = fields
        return self.records

    def metadata(self, index: int) -> RecordMetadata:
        base = self.base_offset
        stamp = self.log_append_time
        return RecordMetadata(
            self.tp.topic,
            self.tp.partition,
            base + index if base >= 0 else -1,
            stamp if stamp >= 0 else self.timestamps[index],
        )

    def complete(self, base_offset: int, log_append_time: int, error: BaseException | None) -> None:
        """Record the outcome (offsets are base_offset + index; -1 stays -1 for acks=0) and run callbacks."""
        if self.done:
            return
        self.base_offset = base_offset
        self.log_append_time = log_append_time
        callbacks = self._settle(error)
        if callbacks is None:
            return
        # Futures may keep the batch alive long after: keep what they read, not the records' bytes.
        self.builder = None
        self.records = None
        for index, sink in enumerate(self.sinks):
            if sink is None or sink.done():
                continue
            if error is not None:
                sink.set_exception(error)
            else:
                sink.set_result(self.metadata(index))
        self._set_done_event()
        self._run_callbacks(callbacks)


class RecordAccumulator:
    """Per-partition queues of batches; appends under `lock` from any thread, drained by the sender."""

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
        self.lock = pool.lock
        self.queues: dict[TopicPartition, collections.deque[ProducerBatch]] = {}
        self.flushing = 0
        self.closing = False

    # -- appending (the caller holds `lock`) ------------------------------------------------------

    def try_add(
        self,
        batch: ProducerBatch,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header],
        timestamp: int,
        reserved: int,
    ) -> int:
        """Append to an open batch and return the record's index; -1 (and the batch closed) if it is full."""
        assert batch.builder is not None
        builder = batch.builder
        timestamps = batch.timestamps
        if builder.append(len(timestamps), timestamp, key, value, as_list(headers)) is None:
            batch.full = True
            return -1
        timestamps.append(timestamp)
        batch.reserved += reserved
        if builder.size() >= self.batch_size:
            batch.full = True
        return len(timestamps) - 1

    def add(
        self,
        tp: TopicPartition,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header],
        timestamp: int,
        reserved: int,
    ) -> ProducerBatch:
        """Append to the partition's open batch, or to a new one; the record is last in the batch returned.

        A record larger than `batch.size` gets a batch of its own, as with Kafka's producer; the broker's
        `max.message.bytes` decides whether to accept it.
        """
        queue = self.queues.get(tp)
        if queue is None:
            queue = self.queues[tp] = collections.deque()
        elif queue:
            batch = queue[-1]
            if not batch.full and self.try_add(batch, key, value, headers, timestamp, reserved) >= 0:
                return batch
        batch = self.new_batch(tp)
        self.try_add(batch, key, value, headers, timestamp, reserved)  # an empty batch takes any record
        queue.append(batch)  # only once the record is in: a failed append leaves no empty batch
        return batch

    def new_batch(self, tp: TopicPartition, encoded: bool = False) -> ProducerBatch:
        """An empty batch for `tp` (not queued yet); `encoded`: its builder takes encoded records too."""
        builder = new_batch_builder(self.codec, self.compression_level, self.batch_size, encoded)
        return ProducerBatch(tp, builder, time.monotonic(), self.delivery_timeout)

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
        """`add` under the lock; return the batch and whether it is new. (The producer calls `add`.)

        `make_sink(batch)`, if given, makes a future for the record that `complete` resolves; it runs under
        the lock, so the batch cannot complete before it exists. With `abort_if_new`, return None instead
        of opening a new batch.
        """
        with self.lock:
            if abort_if_new:
                queue = self.queues.get(tp)
                batch = queue[-1] if queue else None
                if batch is None or batch.full or self.try_add(batch, key, value, headers, timestamp, 0) < 0:
                    return None
                batch.reserved += reserved
            else:
                batch = self.add(tp, key, value, headers, timestamp, reserved)
            index = len(batch.timestamps) - 1
            if make_sink is not None:
                batch.sinks.extend([None] * (index - len(batch.sinks)))
                batch.sinks.append(make_sink(batch))
            return batch, index == 0

    # -- draining ---------------------------------------------------------------------------------

    def is_sendable(self, batch: ProducerBatch, now: float) -> bool:
        if batch.attempts:
            return now >= batch.retry_at
        return (
            batch.full
            or now >= batch.created + self.linger  # the deadline form: no float cancellation at the edge
            or self.flushing > 0
            or self.closing
            or self.pool.has_waiters
        )

    def next_ready_in(self, now: float) -> float:
        """Seconds until some waiting batch becomes sendable by lingering or backoff (inf: none waits)."""
        with self.lock:
            return self.next_ready_in_locked(now)

    def next_ready_in_locked(self, now: float) -> float:
        """`next_ready_in` for a caller holding `lock`."""
        soonest = float("inf")
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
            batch.full = True  # a retry is sent as it was: nothing more goes in
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
        with self.lock:
            return self.expire_locked(now)

    def expire_locked(self, now: float) -> list[ProducerBatch]:
        """`expire` for a caller holding `lock`."""
        expired: list[ProducerBatch] = []
        for queue in self.queues.values():
            if not queue:
                continue
            # Retried batches wait at the front in sequence order, with any deadlines; behind them the
            # fresh batches are in creation order, so the first live one ends the scan. This runs every
            # sender round: it must not walk a long queue.
            stale = []
            for batch in queue:
                if batch.deadline <= now:
                    stale.append(batch)
                elif not batch.attempts:
                    break
            for batch in stale:
                queue.remove(batch)
                batch.full = True
            expired += stale
        return expired

    def take_all(self) -> list[ProducerBatch]:
        """Remove every waiting batch (to fail them on a forced close)."""
        with self.lock:
            batches = [batch for queue in self.queues.values() for batch in queue]
            self.queues.clear()
            for batch in batches:
                batch.full = True
        return batches
