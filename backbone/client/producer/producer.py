"""The asyncio producer: `send` records, get their offsets back through futures.

    async with AsyncProducer(bootstrap_servers="localhost:9092", linger_ms=10) as producer:
        future = await producer.send("events", b"value", key=b"user-1")
        metadata = await future          # RecordMetadata(topic, partition, offset, timestamp)

`send` places the record in its partition's batch and returns at once with an awaitable future (it waits
only for metadata of a topic it has not seen and for room in `buffer.memory`, both bounded by
`max.block.ms`). The sender (`sender.py`) ships batches per partition leader. Idempotence is on by default
(see `idempotence.py`). Records with a key go to `murmur2(key) % partitions`, exactly like the Java client;
records without one stick to a partition until its batch is closed (KIP-480).

The sync `Producer` (`sync.py`) runs this core on its own event-loop thread and appends from the caller's
thread directly (`_enqueue`), so it pays no thread hop per record.

The per-record path (`_enqueue`) is the producer's throughput: serialize and size the record,
look the topic up in a per-topic cache (partitions, TopicPartitions, hashed keys, the sticky batch) that is
rebuilt only when the metadata snapshot changes, then take the accumulator lock once to reserve memory,
pick the partition and append. The sender is woken only when a batch opens or fills.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NoReturn

from backbone.client import audit
from backbone.client.async_client import AsyncClient
from backbone.client.cluster import ClusterClient, ClusterMetadata
from backbone.client.config import PRODUCER_OPTIONS, resolve, security_settings
from backbone.client.producer.accumulator import (
    AsyncRecordFuture,
    BufferPool,
    ProducerBatch,
    RecordAccumulator,
)
from backbone.client.producer.batch_builder import BatchBuilder
from backbone.client.producer.bulk_append import (
    EncodedRecords,
    RunProgress,
    WireRecord,
    append_encoded,
    append_run,
)
from backbone.client.producer.idempotence import IdempotenceState
from backbone.client.producer.partitioner import StickyPartitioner, partition_for_key
from backbone.client.producer.sender import Sender
from backbone.client.structs import RecordMetadata, TopicPartition
from backbone.protocol.compression import codec_from_name
from backbone.protocol.errors import MessageTooLargeError
from backbone.protocol.record_batch import HEADER_SIZE
from backbone.protocol.records import Header, estimate_record_size
from backbone.wire.errors import BufferExhaustedError, ClientClosedError, KafkaTimeoutError

__all__ = ["AsyncProducer", "AsyncRecordFuture"]

Callback = Callable[[RecordMetadata | None, BaseException | None], Any]
_BYTES = (bytes, bytearray, memoryview)
_RECORD_OVERHEAD = estimate_record_size(None, b"")  # the bound's part that does not depend on the data
_KEY_CACHE_SIZE = 65_536  # hashed keys remembered per topic (murmur2 in Python costs more than a send)
_time_ns = time.time_ns
_NO_HEADERS: list[Header] = []  # shared by every record without headers: nothing appends to it


def _check_bytes(what: str, data: Any) -> None:
    if data is not None and not isinstance(data, _BYTES):
        raise TypeError(
            f"record {what} must be bytes or None, got {type(data).__name__}; encode it first or configure "
            f"{what}.serializer"
        )


class _TopicState:
    """What `send` needs to know about a topic, valid for one metadata snapshot."""

    __slots__ = ("available", "by_key", "metadata", "partitions", "sticky", "topic", "tps")

    def __init__(self, topic: str, metadata: ClusterMetadata, partitions: list[int]) -> None:
        self.topic = topic
        self.metadata = metadata
        self.partitions = partitions
        self.available = metadata.available_partitions(topic)
        self.tps = {partition: TopicPartition(topic, partition) for partition in partitions}
        self.by_key: dict[bytes, TopicPartition] = {}
        self.sticky: ProducerBatch | None = None
        """The batch unkeyed records go to, while it is open."""

    def tp_for_key(self, key: bytes) -> TopicPartition:
        if key.__class__ is not bytes:  # bytearray, memoryview: not hashable, hash them every time
            return self.tps[self.partitions[partition_for_key(bytes(key), len(self.partitions))]]
        tp = self.by_key.get(key)
        if tp is None:
            if len(self.by_key) >= _KEY_CACHE_SIZE:
                self.by_key.clear()
            tp = self.by_key[key] = self.tps[self.partitions[partition_for_key(key, len(self.partitions))]]
        return tp

    def tp(self, partition: int) -> TopicPartition:
        tp = self.tps.get(partition)
        if tp is None:
            raise ValueError(f"topic {self.topic!r} has no partition {partition} (it has {len(self.tps)})")
        return tp


class MustWait(Exception):
    """What `_enqueue` hands its `on_wait` handler when a record must wait for its topic's metadata or for
    memory: the record as given to `_enqueue` (serialized already), to place once the wait is over."""

    def __init__(self, for_memory: bool, record: tuple[Any, ...]) -> None:
        super().__init__(record[0])
        self.for_memory = for_memory
        self.record = record


MakeFuture = Callable[[ProducerBatch, int], Any]
OnWait = Callable[[MakeFuture, MustWait], Any]


def raise_wait(make_future: MakeFuture, wait: MustWait) -> NoReturn:
    """The `on_wait` of callers that wait themselves: they catch MustWait (the async `send`)."""
    raise wait


class AsyncProducer(AsyncClient):
    """Produces records to Kafka topics from asyncio code. Configure with Kafka producer property names."""

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        self.config = resolve(PRODUCER_OPTIONS, "producer", config, kwargs)
        cfg = self.config
        codec = codec_from_name(cfg["compression.type"])
        level = cfg.get(f"compression.{codec.name.lower()}.level")
        self.cluster = ClusterClient(
            cfg, max_in_flight=cfg["max.in.flight.requests.per.connection"], allow_auto_topic_creation=True
        )
        self.pool = BufferPool(cfg["buffer.memory"])
        self.accumulator = RecordAccumulator(
            self.pool,
            batch_size=cfg["batch.size"],
            linger_ms=cfg["linger.ms"],
            codec=codec,
            compression_level=level,
            delivery_timeout_ms=cfg["delivery.timeout.ms"],
        )
        self.idempotence = IdempotenceState() if cfg["enable.idempotence"] else None
        self.sender = Sender(self.cluster, self.accumulator, cfg, self.idempotence)
        self.audit = _audit_publisher(cfg) if cfg["audit.enable"] else None
        if self.audit is not None:
            counter = self.audit.counter
            self.sender.on_acknowledged = lambda batch: counter.add_timestamps(
                batch.tp.topic, batch.timestamps
            )
        self._audit_stop = asyncio.Event()
        self._audit_task: asyncio.Task[None] | None = None
        self._sticky = StickyPartitioner()
        self._topics: dict[str, _TopicState] = {}
        self._key_serializer = cfg["key.serializer"]
        self._value_serializer = cfg["value.serializer"]
        self._serializing = self._key_serializer is not None or self._value_serializer is not None
        self._partitioner = cfg["partitioner"]
        self._max_record_size = cfg["max.request.size"] - HEADER_SIZE
        self._lock = self.accumulator.lock  # the hot path's shortcuts
        self._started = False
        self._closed = False

    # -- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the background tasks (no connection is made until the first record or request)."""
        if self._closed:
            raise ClientClosedError("the producer is closed; create a new one")
        if not self._started:
            self._started = True
            self.cluster.start()
            self.sender.start()
            if self.audit is not None:
                interval = self.config["audit.interval.ms"]
                self._audit_task = asyncio.create_task(
                    self.audit.run_periodically(interval, self._audit_stop)
                )

    async def flush(self, timeout: float | None = None) -> None:
        """Send everything waiting now and wait for the answers (KafkaTimeoutError after `timeout` s)."""
        self.accumulator.flushing += 1
        self.sender.wakeup()
        try:
            batches = self.sender.in_flight_batches() + self.accumulator.pending_batches()
            if not await self.sender.wait_for(batches, timeout):
                raise KafkaTimeoutError(
                    f"flush did not finish within {timeout} s; records are still being sent"
                )
        finally:
            self.accumulator.flushing -= 1

    async def close(self, timeout: float | None = None) -> None:
        """Deliver what was sent (up to `timeout` s, default: until delivered or expired), then stop.

        Records still undelivered when the timeout ends fail with ClientClosedError.
        """
        if self._closed:
            return
        self._closed = True
        self.accumulator.closing = True
        if self._started:
            self.sender.wakeup()
            batches = self.sender.in_flight_batches() + self.accumulator.pending_batches()
            await self.sender.wait_for(batches, timeout)
            await self.sender.stop(
                ClientClosedError("the producer was closed before this record was delivered")
            )
        await self.cluster.close()
        await self._close_audit(timeout)

    async def _close_audit(self, timeout: float | None) -> None:
        """Publish the last counts (everything acknowledged is counted by now) and stop auditing."""
        if self.audit is None:
            return
        self._audit_stop.set()
        if self._audit_task is not None:
            await self._audit_task
        await self.audit.close(timeout if timeout is not None else 30.0)

    # -- sending ----------------------------------------------------------------------------------

    async def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        headers: Iterable[tuple[str, bytes | None]] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        *,
        callback: Callback | None = None,
    ) -> AsyncRecordFuture:
        """Queue a record; await the returned future for its RecordMetadata (or the reason it failed).

        `callback(metadata, exception)` is called too, with one of them None. Raises at once for a bad
        record (too large, wrong type), for a topic unknown after `max.block.ms`, and BufferExhaustedError
        when `buffer.memory` stays full for `max.block.ms`.
        """
        if not self._started:
            await self.start()
        if self._serializing:
            key, value = self._serialized(key, value)
        try:
            future: AsyncRecordFuture = self._enqueue(
                AsyncRecordFuture, raise_wait, topic, value, key, headers, partition, timestamp_ms, callback
            )
        except MustWait as wait:
            return await self._wait_and_enqueue(AsyncRecordFuture, wait)
        if future._index == 0:
            # The record opened a batch, so the one before may be full: let the sender run now (once per
            # batch), or a caller that never waits would keep it from sending until memory runs out.
            await asyncio.sleep(0)
        return future

    async def send_many(
        self, topic: str, partition: int, records: Sequence[WireRecord]
    ) -> list[tuple[int, AsyncRecordFuture | BaseException]]:
        """Queue records, in order, for one partition: a copier's path, with far less Python per record.

        Each record is `(key, value, headers, timestamp_ms)` in wire form: bytes or None (serializers do
        not run), headers as (str, bytes | None) pairs. Returns the batches the records went into, in
        order, as `(end, outcome)`: the records from the previous entry's end (0 for the first) up to
        `end` travel in one batch, and `outcome` is a future of the last one's metadata. When a record
        cannot be queued (too large, not bytes, `buffer.memory` full for `max.block.ms`), the last entry
        is `(len(records), exception)`: the records from the previous end on were not queued.
        """
        return await self._append_bulk(topic, partition, records, append_run)

    async def send_encoded(
        self, topic: str, partition: int, records: EncodedRecords
    ) -> list[tuple[int, AsyncRecordFuture | BaseException]]:
        """`send_many` for records that encode themselves into batches many at a time (a mirror's copies
        of a run of alike records, `backbone.protocol.record_copy.HeaderedRun`)."""
        return await self._append_bulk(topic, partition, records, append_encoded)

    async def _append_bulk(
        self, topic: str, partition: int, records: Any, append: Callable[..., None]
    ) -> list[tuple[int, AsyncRecordFuture | BaseException]]:
        if not self._started:
            await self.start()
        if self._closed:
            raise ClientClosedError("the producer is closed; create a new one")
        started = time.monotonic()
        if partition not in await self.cluster.wait_for_topic(topic, self.config["max.block.ms"], partition):
            raise ValueError(f"topic {topic!r} has no partition {partition}")
        tp = TopicPartition(topic, partition)
        progress = RunProgress()
        error: BaseException | None = None
        while progress.done < len(records):
            progress.memory_needed = 0
            with self._lock:
                try:
                    append(self.accumulator, tp, records, progress, self._max_record_size, self._too_large)
                except (MessageTooLargeError, TypeError, ValueError) as refused:
                    error = refused
            if progress.woke_sender:
                progress.woke_sender = False
                self.sender.wakeup()
                await asyncio.sleep(0)  # let the sender ship the batches this run filled or opened
            if error is not None:
                break
            if progress.memory_needed:
                self.sender.wakeup()
                try:
                    await self.pool.wait_for_room(
                        progress.memory_needed,
                        self._max_block_ms_left(started),
                        self.config["max.block.ms"],
                    )
                except BufferExhaustedError as exhausted:
                    error = exhausted
                    break
        outcomes: list[tuple[int, AsyncRecordFuture | BaseException]] = [
            (end, AsyncRecordFuture(batch, index)) for end, batch, index in progress.batches
        ]
        if error is not None:
            outcomes.append((len(records), error))
        return outcomes

    async def send_and_wait(
        self, topic: str, value: Any = None, key: Any = None, **kwargs: Any
    ) -> RecordMetadata:
        """`send`, then wait for the record's metadata."""
        return await (await self.send(topic, value, key, **kwargs))

    async def partitions_for(self, topic: str) -> list[int]:
        """The topic's partition ids (waiting up to `max.block.ms` for its metadata)."""
        if not self._started:
            await self.start()
        return await self.cluster.wait_for_topic(topic, self.config["max.block.ms"])

    def metrics(self) -> dict[str, int]:
        """A few gauges: buffered bytes, waiting and in-flight batches."""
        return {
            "buffer_available_bytes": self.pool.available,
            "batches_waiting": len(self.accumulator.pending_batches()),
            "batches_in_flight": len(self.sender.in_flight_batches()),
        }

    # -- the per-record path, shared with the sync face (called from any thread) ------------------------

    def _serialized(self, key: Any, value: Any) -> tuple[Any, Any]:
        """Key and value through `key.serializer` and `value.serializer` (a None stays None)."""
        if key is not None and self._key_serializer is not None:
            key = self._key_serializer(key)
        if value is not None and self._value_serializer is not None:
            value = self._value_serializer(value)
        return key, value

    def _enqueue(
        self,
        make_future: MakeFuture,
        on_wait: OnWait,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        headers: Iterable[tuple[str, bytes | None]] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        callback: Callback | None = None,
    ) -> Any:
        """Place a serialized record and return `make_future(batch, index)`: the hot path of both faces.

        Check and size the record, then, under the one lock, reserve its memory, pick the partition and
        append. When the topic's metadata is unknown or `buffer.memory` is full, return
        `on_wait(make_future, MustWait)` instead (which may wait, then call this again with the record).
        Raises at once for a bad record.

        One function on purpose, with the arguments of `send` after the first two: the sync face binds
        those two with functools.partial and uses the result as its `send`, so a record costs one Python
        call here (every call saved is ~5% of a send).
        """
        if self._closed:
            raise ClientClosedError("the producer is closed; create a new one")
        size = _RECORD_OVERHEAD
        if value is not None:
            if value.__class__ is not bytes:
                _check_bytes("value", value)
            size += len(value)
        if key is not None:
            if key.__class__ is not bytes:
                _check_bytes("key", key)
            size += len(key)
        if headers:
            headers = _prepared_headers(headers)
            size = estimate_record_size(key, value, headers)
        else:
            headers = _NO_HEADERS
        if size > self._max_record_size:
            raise self._too_large(size)
        if timestamp_ms is None:
            timestamp_ms = _time_ns() // 1_000_000
        state = self._topics.get(topic)
        if state is None or state.metadata is not self.cluster.metadata:
            state = self._topic_state(topic)
            if state is None:
                wait = MustWait(False, (topic, value, key, headers, partition, timestamp_ms, callback))
                return on_wait(make_future, wait)
        accumulator = self.accumulator
        batch_size = accumulator.batch_size
        pool = self.pool
        lock = self._lock
        lock.acquire()  # not `with`: the context manager protocol costs twice as much, once per record
        try:
            if pool.available < size:
                batch = None
            else:
                # The type checker is told, rather than shown with checks, what holds here: each check
                # would cost every record (this is the producer's per-record path).
                if partition is None and self._partitioner is None and key is None:
                    tp = None  # unkeyed: the topic's sticky batch, wherever it is
                    batch = state.sticky
                else:
                    if partition is not None:
                        tp = state.tp(partition)
                    elif self._partitioner is not None:
                        tp = self._custom_partition(state, key)
                    else:  # the test above leaves only a key here
                        tp = state.tp_for_key(key)  # type: ignore[arg-type]
                    queue = accumulator.queues.get(tp)
                    batch = queue[-1] if queue else None
                # RecordAccumulator.try_add inlined (into the open batch): the call alone is 5% of a send.
                appended = False
                if batch is not None and not batch.full:
                    # An open batch (not full) always has its builder.
                    builder: BatchBuilder = batch.builder  # type: ignore[assignment]
                    timestamps = batch.timestamps
                    if builder.append(len(timestamps), timestamp_ms, key, value, headers) is None:
                        batch.full = True
                    else:
                        timestamps.append(timestamp_ms)
                        batch.reserved += size
                        appended = True
                        if builder.size() >= batch_size:
                            batch.full = True
                if not appended:
                    if tp is None:  # the sticky batch is gone (sent or full)
                        batch = self._next_sticky(state, batch, value, headers, timestamp_ms, size)
                    else:  # no open batch: a new one
                        batch = accumulator.add(tp, key, value, headers, timestamp_ms, size)
            if batch is not None:
                # Reserved once the record is in, under the same hold of the lock: nobody sees the record
                # without its memory, and a record that failed to go in took none.
                pool.available -= size
                index = len(batch.timestamps) - 1  # the record is the batch's last
                if callback is not None:
                    # The batch is open, so it is not completing: its callback list is still there.
                    batch.callbacks.append((index, callback))  # type: ignore[union-attr]
                wake = index == 0 or batch.full
        finally:
            lock.release()
        if batch is None:
            record = (topic, value, key, headers, partition, timestamp_ms, callback)
            return on_wait(make_future, MustWait(True, record))
        if wake:
            self.sender.wakeup()
        return make_future(batch, index)

    def _next_sticky(
        self,
        state: _TopicState,
        closed: ProducerBatch | None,
        value: bytes | None,
        headers: list[Header],
        timestamp: int,
        size: int,
    ) -> ProducerBatch:
        """Append an unkeyed record when the sticky batch is gone (sent or full), under the lock.

        Move to another partition before opening a new batch, so unkeyed records keep filling whole
        batches (KIP-480).
        """
        count = len(state.partitions)
        if closed is not None:
            self._sticky.batch_completed(state.topic, closed.tp.partition, count, state.available)
        tp = state.tps[self._sticky.partition(state.topic, count, state.available)]
        batch = state.sticky = self.accumulator.add(tp, None, value, headers, timestamp, size)
        return batch

    def _custom_partition(self, state: _TopicState, key: bytes | None) -> TopicPartition:
        partition = int(self._partitioner(key, state.partitions, state.available))
        return state.tp(partition)

    def _topic_state(self, topic: str) -> _TopicState | None:
        """Cache what sends to `topic` need from the current metadata; None while the topic is unknown."""
        if not isinstance(topic, str) or not topic:
            raise TypeError(f"topic must be a non-empty string, got {topic!r}")
        metadata = self.cluster.metadata
        partitions = metadata.partitions_for(topic)
        if partitions is None:
            return None
        state = self._topics[topic] = _TopicState(topic, metadata, partitions)
        return state

    async def _wait_and_enqueue(
        self, make_future: Callable[[ProducerBatch, int], Any], wait: MustWait
    ) -> Any:
        """Wait (up to `max.block.ms` in all) for what `_enqueue` lacked, then place the record."""
        started = time.monotonic()
        while True:
            if wait.for_memory:
                self.sender.wakeup()  # waiting for memory makes batches sendable at once
                max_block_ms = self.config["max.block.ms"]
                size = _record_size_bound(wait.record)
                await self.pool.wait_for_room(size, self._max_block_ms_left(started), max_block_ms)
            else:
                await self.cluster.wait_for_topic(wait.record[0], self._max_block_ms_left(started))
            try:
                return self._enqueue(make_future, raise_wait, *wait.record)
            except MustWait as again:  # another send took the memory first, or the topic went away
                wait = again

    def _enqueue_blocking(self, make_future: MakeFuture, wait: MustWait, wait_on_loop: OnWait) -> Any:
        """`_wait_and_enqueue` for a caller on another thread than the loop's: wait for memory in the
        calling thread, on the pool's condition, then place the record; a wait for metadata goes to
        `wait_on_loop`. (A memory wait through the loop cost the loop thread, the one sending, a coroutine
        and two wake-ups per wait: per request, once `buffer.memory` is full.)"""
        started = time.monotonic()
        max_block_ms = self.config["max.block.ms"]
        while wait.for_memory:
            self.pool.wait_for_room_blocking(
                _record_size_bound(wait.record),
                self._max_block_ms_left(started),
                max_block_ms,
                waiting=self.sender.wakeup,  # waiting for memory makes batches sendable at once
            )
            try:
                return self._enqueue(make_future, raise_wait, *wait.record)
            except MustWait as again:  # another send took the memory first, or the topic went away
                wait = again
        return wait_on_loop(make_future, wait)

    def _max_block_ms_left(self, started: float) -> int:
        return max(0, int(self.config["max.block.ms"] - (time.monotonic() - started) * 1000))

    def _too_large(self, size: int) -> MessageTooLargeError:
        limit = self.config["max.request.size"]
        return MessageTooLargeError(
            f"a record of about {size} bytes does not fit max.request.size ({limit}); raise "
            "max.request.size (and the topic's max.message.bytes) or send smaller records"
        )


def _audit_publisher(config: Mapping[str, Any]) -> audit.AuditPublisher:
    """The publisher of an audited producer's counts (`audit.enable=true`)."""
    counter = audit.AuditCounter(config["audit.tier"], config["audit.bucket.ms"])
    servers = config["audit.bootstrap.servers"] or config["bootstrap.servers"]
    # The audit cluster is reached with this producer's own security settings.
    security = {k: v for k, v in security_settings(config).items() if v is not None}
    return audit.AuditPublisher(counter, servers, config["audit.topic"], security)


def _record_size_bound(record: tuple[Any, ...]) -> int:
    """The memory a record waiting in a MustWait reserves (as `_enqueue` computes it)."""
    _topic, value, key, headers = record[:4]
    return estimate_record_size(key, value, headers)


def _prepared_headers(headers: Iterable[tuple[str, bytes | None]]) -> list[Header]:
    prepared = [(str(name), data) for name, data in headers]
    for name, data in prepared:
        _check_bytes(f"header {name!r} value", data)
    return prepared
