"""The asyncio consumer: assign partitions, seek, and poll records.

    consumer = AsyncConsumer(bootstrap_servers="localhost:9092", auto_offset_reset="earliest")
    await consumer.start()
    consumer.assign([TopicPartition("events", 0)])
    batch = await consumer.poll(timeout_ms=1000)     # {TopicPartition: [ConsumerRecord, ...]}

Partitions are either assigned by hand (`assign`) or, with a `group.id`, shared out among the group's
members (`subscribe` to topics or a pattern; `consumer_group.py` and `group_membership.py`), with committed
offsets (`commit`, `commit_async`, auto-commit, `committed`). Positions start at the group's committed offset,
where `seek` put them, or per `auto.offset.reset` (earliest, latest, or none: OffsetOutOfRangeError). The
fetching itself, pipelined ahead of `poll`, is in `fetcher.py`.

    consumer = AsyncConsumer(bootstrap_servers="localhost:9092", group_id="billing", enable_auto_commit=False)
    consumer.subscribe(topics=["events"], listener=my_listener)
    while True:
        batch = await consumer.poll(timeout_ms=1000)
        process(batch)
        await consumer.commit()        # at-least-once: commit what was processed
"""

from __future__ import annotations

import asyncio
import collections
import logging
import re
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, overload

from backbone.client.async_client import AsyncClient
from backbone.client.cluster import ClusterClient
from backbone.client.config import CONSUMER_OPTIONS, resolve
from backbone.client.consumer.fetcher import EARLIEST, LATEST, Fetcher, PartitionState
from backbone.client.consumer.subscription import CommitCallback, Subscription
from backbone.client.structs import (
    ConsumerRecord,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    RecordList,
    TopicPartition,
)
from backbone.protocol.errors import KafkaError
from backbone.wire.errors import (
    ClientClosedError,
    IllegalStateError,
    KafkaConnectionError,
    KafkaTimeoutError,
)

if TYPE_CHECKING:
    from backbone.client.consumer.group import ConsumerGroup

__all__ = ["AsyncConsumer"]

log = logging.getLogger(__name__)

# Room for the response's own fields around fetch.max.bytes of records.
_RESPONSE_MARGIN = 1024 * 1024


class AsyncConsumer(AsyncClient):
    """Reads records from assigned partitions. Configure with Kafka consumer property names."""

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        self.config = resolve(CONSUMER_OPTIONS, "consumer", config, kwargs)
        cfg = self.config
        self.cluster = ClusterClient(cfg, max_response_bytes=cfg["fetch.max.bytes"] + _RESPONSE_MARGIN)
        key_deserializer, value_deserializer = cfg["key.deserializer"], cfg["value.deserializer"]
        deserialize = None
        if key_deserializer is not None or value_deserializer is not None:

            def deserialize(topic: str, key: Any, value: Any) -> tuple[Any, Any]:
                if key is not None and key_deserializer is not None:
                    key = key_deserializer(key)
                if value is not None and value_deserializer is not None:
                    value = value_deserializer(value)
                return key, value

        self.fetcher = Fetcher(self.cluster, cfg, deserialize)
        self.group: ConsumerGroup | None = None
        if cfg["group.id"] is not None:
            from backbone.client.consumer.group import ConsumerGroup

            self.group = ConsumerGroup(self.cluster, self.fetcher, cfg)
        self._subscribed = False
        self._iterator_buffer: collections.deque[ConsumerRecord] = collections.deque()
        self._started = False
        self._closed = False

    # -- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> None:
        self._check_open()
        if not self._started:
            self._started = True
            self.cluster.start()
            self.fetcher.start()
            if self.group is not None:
                self.group.start()

    async def close(self, timeout: float | None = None) -> None:
        """Commit (with auto-commit), leave the group, and stop; `timeout` (s) bounds the commit."""
        if self._closed:
            return
        self._closed = True
        if self.group is not None and self._started:
            await self.group.close(
                self.config["default.api.timeout.ms"] / 1000 if timeout is None else timeout
            )
        await self.fetcher.stop()
        await self.cluster.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("the consumer is closed; create a new one")

    # -- assignment -------------------------------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly these partitions (replacing any earlier assignment); positions of kept ones stay."""
        self._check_open()
        if self._subscribed:
            raise IllegalStateError(
                "assign() after subscribe(): unsubscribe() first; a consumer does one or the other"
            )
        wanted = [TopicPartition(*tp) for tp in partitions]
        old = self.fetcher.assignment
        self.fetcher.assignment = {tp: old.get(tp) or PartitionState() for tp in wanted}
        self.cluster.add_topics({tp.topic for tp in wanted})
        if self.group is not None:
            self.group.start_from_committed([tp for tp in wanted if tp not in old])
        self.fetcher.wakeup()

    def assignment(self) -> set[TopicPartition]:
        return set(self.fetcher.assignment)

    def subscribe(
        self,
        topics: Iterable[str] | str | None = None,
        pattern: str | re.Pattern[str] | None = None,
        listener: Any = None,
    ) -> None:
        """Join the group (`group.id`) reading `topics`, or every topic matching `pattern` (a regex matched
        against whole names, re-checked as topics appear). The group's members share the partitions;
        `listener` (see `ConsumerRebalanceListener`) hears of partitions revoked, assigned and lost. The
        group is joined by the next `poll`. Subscribing again replaces the subscription."""
        self._check_open()
        if self.group is None:
            raise IllegalStateError(
                "subscribe() needs a group.id (set group_id=...); without a group, use "
                "assign([TopicPartition(topic, partition), ...])"
            )
        if self.fetcher.assignment and not self._subscribed:
            raise IllegalStateError(
                "subscribe() after assign(): assign([]) first; a consumer does one or the other"
            )
        self.group.subscribe(Subscription.create(topics, pattern, listener))
        self._subscribed = True

    def subscription(self) -> set[str]:
        """The topics subscribed to (for a pattern: those it matches now); empty when not subscribed."""
        if self.group is None or self.group.subscription is None:
            return set()
        return set(self.group.subscription.matched)

    async def unsubscribe(self) -> None:
        """Stop reading every partition: a subscription is revoked (commits first with auto-commit) and the
        group left; manually assigned partitions are dropped."""
        if self._subscribed and self.group is not None:
            self._subscribed = False
            await self.group.unsubscribe()
        else:
            self.assign([])

    def _state(self, tp: TopicPartition) -> PartitionState:
        state = self.fetcher.assignment.get(TopicPartition(*tp))
        if state is None:
            raise IllegalStateError(
                f"{TopicPartition(*tp)} is not assigned to this consumer; assign() it first"
            )
        return state

    def pause(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._state(tp).paused = True

    def resume(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            state = self._state(tp)
            state.paused = False
            if state.buffered:  # fetched while paused: poll may return it now
                self.fetcher.data_ready.set()
        self.fetcher.wakeup()

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, state in self.fetcher.assignment.items() if state.paused}

    # -- positions --------------------------------------------------------------------------------

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Make the next poll return records of `partition` from `offset` on."""
        if offset < 0:
            raise ValueError(f"offset must not be negative, got {offset}")
        self._state(partition).seek(offset)
        self.fetcher.wakeup()

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Go to the earliest offset (looked up before the next fetch); every assigned one if none given."""
        for tp in partitions or tuple(self.fetcher.assignment):
            self._state(tp).seek(None, EARLIEST)
        self.fetcher.wakeup()

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Go to the log end: only records produced from now on are read."""
        for tp in partitions or tuple(self.fetcher.assignment):
            self._state(tp).seek(None, LATEST)
        self.fetcher.wakeup()

    def seek_to_timestamp(self, timestamp_ms: int, *partitions: TopicPartition) -> None:
        """Go to the first record with a timestamp at or after `timestamp_ms` (the end if there is none)."""
        for tp in partitions or tuple(self.fetcher.assignment):
            self._state(tp).seek(None, timestamp_ms)
        self.fetcher.wakeup()

    async def position(self, partition: TopicPartition, timeout_ms: int | None = None) -> int:
        """The offset of the next record poll will return, looking it up first if it was reset."""
        await self.start()
        state = self._state(partition)
        self.fetcher.positions_wanted = True
        deadline = time.monotonic() + (timeout_ms or self.config["request.timeout.ms"]) / 1000
        while state.position is None or state.reset_to is not None:
            if state.error is not None:
                error, state.error = state.error, None
                raise error
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KafkaTimeoutError(
                    f"position of {partition} not known within the timeout; is its leader up?"
                )
            self.fetcher.wakeup()
            await asyncio.sleep(min(0.01, remaining))
        return state.position

    def highwater(self, partition: TopicPartition) -> int | None:
        """The high watermark from the last fetch of `partition` (None before one)."""
        value = self._state(partition).high_watermark
        return None if value < 0 else value

    # -- polling ----------------------------------------------------------------------------------

    async def poll(
        self, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, RecordList]:
        """Records fetched for the assigned partitions, waiting up to `timeout_ms` for some to arrive.

        Returns at most `max_records` (default `max.poll.records`) records, in offset order per partition.
        Raises errors found while fetching (OffsetOutOfRangeError with auto.offset.reset=none, ...).
        """
        self._check_open()
        await self.start()
        if not self.fetcher.positions_wanted:
            self.fetcher.positions_wanted = True
            self.fetcher.wakeup()
        limit = max_records or self.config["max.poll.records"]
        deadline = time.monotonic() + timeout_ms / 1000
        group = self.group if self._subscribed else None
        if self.group is not None and group is None:
            self.group.maybe_auto_commit()  # manually assigned partitions of a consumer with a group.id
        first = True
        while True:
            if group is not None:
                if first or group.needs_join:
                    # Rebalances (and listener calls) happen here, between polls, as in Kafka's consumer.
                    await group.before_poll(max(deadline - time.monotonic(), 0.0))
                group.polling()
            first = False
            records = self.fetcher.drain(limit)
            if records:
                return records
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return {}
            # A group member looks up now and then whether a rebalance started while it waits.
            wait = remaining if group is None else min(remaining, group.check_interval_s)
            try:
                async with asyncio.timeout(wait):
                    await self.fetcher.data_ready.wait()
            except TimeoutError:
                if wait >= remaining:
                    return self.fetcher.drain(limit)

    async def getmany(
        self, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, RecordList]:
        """aiokafka's name for `poll`."""
        return await self.poll(timeout_ms, max_records)

    def __aiter__(self) -> AsyncConsumer:
        return self

    async def __anext__(self) -> ConsumerRecord:
        """One record at a time (`async for record in consumer`); ends only when the consumer closes."""
        buffered = self._iterator_buffer
        while not buffered:
            if self._closed:
                raise StopAsyncIteration
            for records in (await self.poll(timeout_ms=1000)).values():
                buffered.extend(records)
        return buffered.popleft()

    # -- committed offsets ------------------------------------------------------------------------

    def _group(self) -> ConsumerGroup:
        self._check_open()
        if self.group is None:
            raise IllegalStateError("committed offsets belong to a group: set group_id=... on the consumer")
        return self.group

    def _api_timeout(self, timeout_ms: int | None) -> float:
        return (self.config["default.api.timeout.ms"] if timeout_ms is None else timeout_ms) / 1000

    async def commit(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None,
        *,
        timeout_ms: int | None = None,
    ) -> None:
        """Commit `offsets` ({tp: OffsetAndMetadata(next offset to read, metadata)}), or by default the
        position of every assigned partition (the offset after the last record poll returned), and wait for
        the coordinator to store them. Raises CommitFailedError when the group rebalanced meanwhile."""
        group = self._group()
        await self.start()
        await group.commit(offsets, self._api_timeout(timeout_ms))

    def commit_async(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None,
        callback: CommitCallback | None = None,
    ) -> asyncio.Task[None]:
        """`commit` in the background; `callback(offsets, exception_or_None)` runs on the event loop when
        done. Returns the task (awaiting it is optional; it never raises)."""
        group = self._group()
        if not self._started:
            raise IllegalStateError("start() the consumer (or poll) before commit_async()")
        return group.commit_async(offsets, callback)

    @overload
    async def committed(
        self, partitions: TopicPartition, *, timeout_ms: int | None = None
    ) -> OffsetAndMetadata | None: ...
    @overload
    async def committed(
        self, partitions: Iterable[TopicPartition], *, timeout_ms: int | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata | None]: ...
    async def committed(
        self, partitions: TopicPartition | Iterable[TopicPartition], *, timeout_ms: int | None = None
    ) -> OffsetAndMetadata | dict[TopicPartition, OffsetAndMetadata | None] | None:
        """The group's committed offset of one partition (None when nothing is committed), or a dict of
        them for several."""
        group = self._group()
        await self.start()
        if isinstance(partitions, TopicPartition):
            return (await group.committed([partitions], self._api_timeout(timeout_ms)))[partitions]
        return await group.committed(partitions, self._api_timeout(timeout_ms))

    # -- offsets lookups --------------------------------------------------------------------------

    async def _lookup(self, targets: Mapping[TopicPartition, int]) -> dict[TopicPartition, tuple[int, int]]:
        """ListOffsets for `targets`, asked again (with fresh metadata) while a leader is moving or
        unreachable, as Kafka's consumer does, until default.api.timeout.ms passes."""
        await self.start()
        topics = {tp.topic for tp in targets}
        self.cluster.add_topics(topics)
        deadline = time.monotonic() + self._api_timeout(None)
        for topic in topics:
            await self.cluster.wait_for_topic(topic, self.config["request.timeout.ms"])
        while True:
            try:
                return await self._lookup_once(targets)
            except (KafkaError, KafkaConnectionError, KafkaTimeoutError) as error:
                retriable = not isinstance(error, KafkaError) or error.retriable
                remaining = deadline - time.monotonic()
                if not retriable:
                    raise
                if remaining <= 0:
                    raise KafkaTimeoutError(
                        f"offsets of {sorted(targets)} not found within default.api.timeout.ms "
                        f"({self.config['default.api.timeout.ms']} ms); last error: {error}"
                    ) from error
                log.info("event=offsets_lookup_retry error=%s", error)
                # A retry waits for metadata newer than the answer that pointed at the old leader.
                await self.cluster.wait_for_update(min(remaining, self.config["retry.backoff.max.ms"] / 1000))

    async def _lookup_once(
        self, targets: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, tuple[int, int]]:
        by_leader: dict[int, dict[TopicPartition, int]] = collections.defaultdict(dict)
        for tp, target in targets.items():
            leader = self.cluster.metadata.leader_for(tp)
            if leader < 0:
                raise KafkaTimeoutError(
                    f"{tp} has no leader right now; retry once the cluster has elected one"
                )
            by_leader[leader][tp] = target
        results = await asyncio.gather(*(self.fetcher.list_offsets(n, t) for n, t in by_leader.items()))
        merged: dict[TopicPartition, tuple[int, int]] = {}
        for result in results:
            merged.update(result)
        return merged

    async def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The earliest offset still in each partition."""
        found = await self._lookup({TopicPartition(*tp): EARLIEST for tp in partitions})
        return {tp: offset for tp, (offset, _) in found.items()}

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The offset the next produced record of each partition will get (the log end)."""
        found = await self._lookup({TopicPartition(*tp): LATEST for tp in partitions})
        return {tp: offset for tp, (offset, _) in found.items()}

    async def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """Per partition, the first record at or after the timestamp (ms), or None if there is none."""
        for tp, stamp in timestamps.items():
            if stamp < 0:
                raise ValueError(f"timestamp for {tp} must not be negative, got {stamp}")
        found = await self._lookup({TopicPartition(*tp): stamp for tp, stamp in timestamps.items()})
        return {
            tp: (OffsetAndTimestamp(offset, stamp) if offset >= 0 else None)
            for tp, (offset, stamp) in found.items()
        }

    async def partitions_for_topic(self, topic: str) -> set[int]:
        await self.start()
        return set(await self.cluster.wait_for_topic(topic, self.config["request.timeout.ms"]))

    async def topics(self) -> set[str]:
        """Every topic in the cluster."""
        await self.start()
        metadata = await self.cluster.fetch_metadata(None)
        return set(metadata.topics)
