"""The asyncio producer: `send` records, get their offsets back through futures.

    async with AsyncProducer(bootstrap_servers="localhost:9092", linger_ms=10) as producer:
        future = await producer.send("events", b"value", key=b"user-1")
        metadata = await future          # RecordMetadata(topic, partition, offset, timestamp)

`send` places the record in its partition's batch and returns at once with an asyncio future (it waits
only for metadata of a topic it has not seen and for room in `buffer.memory`, both bounded by
`max.block.ms`). The sender (`sender.py`) ships batches per partition leader. Idempotence is on by default
(see `idempotence.py`). Records with a key go to `murmur2(key) % partitions`, exactly like the Java client;
records without one stick to a partition until its batch is closed (KIP-480).

The sync `Producer` (`sync.py`) runs this core on its own event-loop thread and appends from the caller's
thread directly, so it pays no thread hop per record.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from backbone.client.accumulator import BufferPool, ProducerBatch, RecordAccumulator, run_callback
from backbone.client.cluster import ClusterClient
from backbone.client.config import PRODUCER_OPTIONS, resolve
from backbone.client.errors import ClientClosedError, KafkaTimeoutError
from backbone.client.idempotence import IdempotenceState
from backbone.client.partitioner import StickyPartitioner, partition_for_key
from backbone.client.sender import Sender
from backbone.client.structs import RecordMetadata, TopicPartition
from backbone.protocol.compression import codec_from_name
from backbone.protocol.errors import MessageTooLargeError
from backbone.protocol.record_batch import HEADER_SIZE
from backbone.protocol.records import Header, estimate_record_size

__all__ = ["AsyncProducer", "PreparedRecord"]

Callback = Callable[[RecordMetadata | None, BaseException | None], Any]
_BYTES = (bytes, bytearray, memoryview)


class PreparedRecord:
    """A record serialized and checked, ready to be placed in a partition."""

    __slots__ = ("headers", "key", "size", "timestamp", "topic", "value")

    def __init__(
        self, topic: str, key: bytes | None, value: bytes | None, headers: tuple[Header, ...], timestamp: int
    ) -> None:
        self.topic = topic
        self.key = key
        self.value = value
        self.headers = headers
        self.timestamp = timestamp
        self.size = estimate_record_size(key, value, headers)


def _check_bytes(what: str, data: Any) -> None:
    if data is not None and not isinstance(data, _BYTES):
        raise TypeError(
            f"record {what} must be bytes or None, got {type(data).__name__}; encode it first or configure "
            f"{what}.serializer"
        )


class AsyncProducer:
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
        self._sticky = StickyPartitioner()
        self._partition_lock = threading.Lock()
        self._tp_cache: dict[str, dict[int, TopicPartition]] = {}
        self._key_serializer = cfg["key.serializer"]
        self._value_serializer = cfg["value.serializer"]
        self._partitioner = cfg["partitioner"]
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

    async def __aenter__(self) -> AsyncProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def flush(self, timeout: float | None = None) -> None:
        """Send everything waiting now and wait for the answers (KafkaTimeoutError after `timeout` s)."""
        self.accumulator.flushing += 1
        self.sender.wakeup()
        try:
            batches = self.accumulator.pending_batches() + self.sender.in_flight_batches()
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
            batches = self.accumulator.pending_batches() + self.sender.in_flight_batches()
            await self.sender.wait_for(batches, timeout)
            await self.sender.stop(
                ClientClosedError("the producer was closed before this record was delivered")
            )
        await self.cluster.close()

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
    ) -> asyncio.Future[RecordMetadata]:
        """Queue a record; the returned future resolves to its RecordMetadata or raises why it failed.

        `callback(metadata, exception)` is called too, with one of them None. Raises at once for a bad
        record (too large, wrong type), for a topic unknown after `max.block.ms`, and BufferExhaustedError
        when `buffer.memory` stays full for `max.block.ms`.
        """
        self._check_open()
        if not self._started:
            await self.start()
        started = time.monotonic()
        record = self._prepare(topic, key, value, headers, timestamp_ms)
        partitions = self.cluster.metadata.partitions_for(topic)
        if partitions is None:
            partitions = await self.cluster.wait_for_topic(topic, self._max_block_ms_left(started))
        if not self.pool.try_reserve(record.size):
            self.sender.wakeup()  # waiting for memory makes batches sendable at once
            await self.pool.reserve(record.size, self._max_block_ms_left(started))
        loop = asyncio.get_running_loop()
        batch, wake = self._append(record, partition, partitions, lambda _batch: loop.create_future())
        future: asyncio.Future[RecordMetadata] = batch.sinks[-1]
        if callback is not None:
            future.add_done_callback(_future_callback(callback))
        if wake:
            self.sender.wakeup()
        return future

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

    # -- shared with the sync face (called from any thread) ------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("the producer is closed; create a new one")

    def _max_block_ms_left(self, started: float) -> int:
        return max(0, int(self.config["max.block.ms"] - (time.monotonic() - started) * 1000))

    def _prepare(
        self,
        topic: str,
        key: Any,
        value: Any,
        headers: Iterable[tuple[str, bytes | None]] | None,
        timestamp_ms: int | None,
    ) -> PreparedRecord:
        if not isinstance(topic, str) or not topic:
            raise TypeError(f"topic must be a non-empty string, got {topic!r}")
        if self._key_serializer is not None and key is not None:
            key = self._key_serializer(key)
        if self._value_serializer is not None and value is not None:
            value = self._value_serializer(value)
        _check_bytes("key", key)
        _check_bytes("value", value)
        header_tuple: tuple[Header, ...] = ()
        if headers:
            header_tuple = tuple((str(name), data) for name, data in headers)
            for name, data in header_tuple:
                _check_bytes(f"header {name!r} value", data)
        if timestamp_ms is None:
            timestamp_ms = time.time_ns() // 1_000_000
        record = PreparedRecord(topic, key, value, header_tuple, timestamp_ms)
        limit = self.config["max.request.size"]
        if record.size + HEADER_SIZE > limit:
            raise MessageTooLargeError(
                f"a record of about {record.size} bytes does not fit max.request.size ({limit}); raise "
                "max.request.size (and the topic's max.message.bytes) or send smaller records"
            )
        return record

    def _choose_partition(self, record: PreparedRecord, partition: int | None, partitions: list[int]) -> int:
        if partition is not None:
            if partition not in partitions:
                raise ValueError(
                    f"topic {record.topic!r} has no partition {partition} (it has {len(partitions)})"
                )
            return partition
        if self._partitioner is not None:
            available = self.cluster.metadata.available_partitions(record.topic)
            return int(self._partitioner(record.key, partitions, available))
        if record.key is not None:
            return partitions[partition_for_key(bytes(record.key), len(partitions))]
        available = self.cluster.metadata.available_partitions(record.topic)
        return self._sticky.partition(record.topic, len(partitions), available)

    def _tp(self, topic: str, partition: int) -> TopicPartition:
        # One TopicPartition per partition, reused: creating a NamedTuple per record is measurable.
        cache = self._tp_cache.get(topic)
        if cache is None:
            cache = self._tp_cache[topic] = {}
        tp = cache.get(partition)
        if tp is None:
            tp = cache[partition] = TopicPartition(topic, partition)
        return tp

    def _append(
        self,
        record: PreparedRecord,
        partition: int | None,
        partitions: list[int],
        make_sink: Callable[[ProducerBatch], Any],
    ) -> tuple[ProducerBatch, bool]:
        """Place the record (its memory already reserved); return its batch and whether to wake the sender."""
        sticky = partition is None and record.key is None and self._partitioner is None
        append = self.accumulator.append
        try:
            with self._partition_lock:
                tp = self._tp(record.topic, self._choose_partition(record, partition, partitions))
                args = (record.key, record.value, record.headers, record.timestamp, make_sink, record.size)
                result = append(tp, *args, abort_if_new=sticky)
                if result is None:
                    # The sticky partition's batch is gone (sent or full): move on before opening a new one,
                    # so unkeyed records keep filling whole batches (KIP-480).
                    available = self.cluster.metadata.available_partitions(record.topic)
                    self._sticky.batch_completed(record.topic, tp.partition, len(partitions), available)
                    tp = self._tp(
                        record.topic, self._sticky.partition(record.topic, len(partitions), available)
                    )
                    result = append(tp, *args)
                    assert result is not None
        except BaseException:
            self.pool.release(record.size)
            raise
        batch, created = result
        return batch, created or batch.full


def _future_callback(callback: Callback) -> Callable[[asyncio.Future[RecordMetadata]], None]:
    def done(future: asyncio.Future[RecordMetadata]) -> None:
        if future.cancelled():
            run_callback(callback, None, asyncio.CancelledError())
        elif future.exception() is not None:
            run_callback(callback, None, future.exception())
        else:
            run_callback(callback, future.result(), None)

    return done
