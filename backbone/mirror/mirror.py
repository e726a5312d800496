"""One mirror process: a consumer in the source cluster and a producer into the target cluster.

The cycle: poll up to `poll.max.records` records from the partitions the group gave this mirror, send
each to the target (same key, value, headers and timestamp; the same partition number when the partition
counts match, else by key hash; one provenance header added), flush, and only then count the records as
copied. Source offsets are committed every `commit.interval.ms` and whenever partitions are revoked, and
only up to what the target acknowledged (acks=all, idempotent producer): a mirror killed at any moment
copies again at most what it had not committed, and loses nothing.

A record that the target refuses for good (too large, a topic that cannot be created) stops its partition
here (nothing past it is committed) while the other partitions go on; a retriable failure rewinds the
partition to the failed record and tries again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from dataclasses import dataclass, field
from typing import Any

from backbone.client import (
    AsyncAdmin,
    AsyncConsumer,
    AsyncProducer,
    CommitFailedError,
    ConsumerRebalanceListener,
    ConsumerRecord,
    KafkaClientError,
    KafkaError,
    NewTopic,
    OffsetAndMetadata,
    TopicPartition,
)
from backbone.mirror import provenance
from backbone.mirror.config import MirrorConfig
from backbone.mirror.metrics import MirrorMetrics
from backbone.protocol.errors import TopicAlreadyExistsError

log = logging.getLogger(__name__)

_POLL_MS = 500
_RETRY_BACKOFF_S = 1.0


@dataclass
class _Route:
    """Where a source topic's records go."""

    target_topic: str
    source_partitions: int
    target_partitions: int

    def partition_for(self, source_partition: int) -> int | None:
        same = self.source_partitions == self.target_partitions
        return source_partition if same else None  # None: the producer hashes the key


@dataclass
class _PartitionProgress:
    acknowledged: int | None = None  # next source offset to commit: everything before it is in the target
    committed: int | None = None
    newest_timestamp: int | None = None
    stopped_reason: str | None = None


@dataclass
class _Stats:
    partitions: dict[TopicPartition, _PartitionProgress] = field(default_factory=dict)

    def of(self, tp: TopicPartition) -> _PartitionProgress:
        return self.partitions.setdefault(tp, _PartitionProgress())


class Mirror(ConsumerRebalanceListener):
    def __init__(self, config: MirrorConfig, metrics: MirrorMetrics | None = None) -> None:
        self.config = config
        self.metrics = metrics or MirrorMetrics(config.source_alias, config.target_alias)
        self.consumer = AsyncConsumer(
            {
                "bootstrap.servers": config.source_bootstrap,
                "group.id": config.group_id,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "client.id": f"mirror-{config.source_alias}-{config.target_alias}",
                # A dead mirror's partitions move to the others within 10 s (Kafka's default is 45 s).
                "session.timeout.ms": 10_000,
                "heartbeat.interval.ms": 3_000,
                "metadata.max.age.ms": 5_000,  # new matching source topics are found within seconds
                **({"group.instance.id": config.instance_id} if config.instance_id else {}),
                **config.consumer,
            }
        )
        self.producer = AsyncProducer(
            {
                "bootstrap.servers": config.target_bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "client.id": f"mirror-{config.source_alias}-{config.target_alias}",
                **config.producer,
            }
        )
        self.source_admin = AsyncAdmin({"bootstrap.servers": config.source_bootstrap})
        self.target_admin = AsyncAdmin({"bootstrap.servers": config.target_bootstrap})
        self._routes: dict[str, _Route] = {}
        self._stats = _Stats()
        self._last_commit = time.monotonic()
        self._last_progress = (time.monotonic(), 0)
        self._isolating: dict[TopicPartition, int] = {}  # partition -> last offset sent one by one
        self._retrying = False  # a partition was rewound this cycle: back off before reading it again

    # -- the cycle ---------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Mirror until `stop` is set; then commit what the target acknowledged and close."""
        self.consumer.subscribe(pattern=self.config.subscription_pattern(), listener=self)
        log.info(
            "event=mirror_started source=%s target=%s group=%s pattern=%r",
            self.config.source_alias,
            self.config.target_alias,
            self.config.group_id,
            self.config.subscription_pattern(),
        )
        try:
            while not stop.is_set():
                polled = await self.consumer.poll(
                    timeout_ms=_POLL_MS, max_records=self.config.poll_max_records
                )
                if polled:
                    await self._copy(polled)
                if self._retrying:
                    self._retrying = False
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), _RETRY_BACKOFF_S)
                self._update_lag()
                if time.monotonic() - self._last_commit >= self.config.commit_interval_ms / 1000:
                    await self._commit(None)
                self._report_progress()
        finally:
            await self._close()

    async def _copy(self, polled: dict[TopicPartition, list[ConsumerRecord]]) -> None:
        sent: list[tuple[TopicPartition, list[ConsumerRecord], list[Any]]] = []
        for tp, records in polled.items():
            progress = self._stats.of(tp)
            if progress.stopped_reason is not None:
                continue
            try:
                route = await self._route(tp.topic, tp.partition)
            except (KafkaError, KafkaClientError) as error:
                if _retriable(error):  # e.g. a topic just created, not yet in every broker's metadata
                    self._rewind(tp, records[0].offset, error)
                else:
                    self._stop_partition(tp, records[0].offset, f"target topic unavailable: {error}")
                continue
            if tp in self._isolating and len(records) > 1:
                # One record at a time until the refused one is found; the rest is read again.
                self.consumer.seek(tp, records[1].offset)
                records = records[:1]
            futures = [await self._send(route, record) for record in records]
            sent.append((tp, records, futures))
        if not sent:
            return
        await self.producer.flush()
        for tp, records, futures in sent:
            self._settle(tp, records, futures)

    async def _send(self, route: _Route, record: ConsumerRecord) -> Any:
        """The record's future, None when skipped, or the exception `send` raised at once."""
        if provenance.has_been_in(record.headers, self.config.target_alias):
            return None
        hop = provenance.Provenance(self.config.source_alias, record.partition, record.offset)
        try:
            return await self.producer.send(
                route.target_topic,
                record.value,
                record.key,
                headers=(*record.headers, (provenance.HEADER, hop.encode())),
                partition=route.partition_for(record.partition),
                timestamp_ms=record.timestamp,
            )
        except (KafkaError, KafkaClientError) as error:
            return error

    def _settle(self, tp: TopicPartition, records: list[ConsumerRecord], futures: list[Any]) -> None:
        """Count what the target acknowledged; stop or rewind at the first record it did not."""
        progress = self._stats.of(tp)
        copied = size = skipped = 0
        for record, future in zip(records, futures, strict=True):
            error = future if isinstance(future, BaseException) else None
            if future is not None and error is None and future.failed():
                error = future.exception()
            if error is not None:
                self._record_failure(tp, record, records[-1].offset, error)
                break
            if future is None:
                skipped += 1
            else:
                copied += 1
                size += len(record.value or b"") + len(record.key or b"")
            progress.acknowledged = record.offset + 1
            progress.newest_timestamp = record.timestamp
            if self._isolating.get(tp, -1) <= record.offset:
                self._isolating.pop(tp, None)
        self.metrics.copied(tp.topic, copied, size)
        if skipped:
            self.metrics.skip(tp.topic, skipped)

    def _record_failure(
        self, tp: TopicPartition, record: ConsumerRecord, last: int, error: BaseException
    ) -> None:
        """Rewind for a retriable error; for a refusal, find the refused record (a whole batch fails with
        it: `last` is the chunk's last offset) by sending one record at a time, and stop at it."""
        self.metrics.fail(tp.topic)
        if _retriable(error):
            self._rewind(tp, record.offset, error)
            return
        if tp not in self._isolating and last > record.offset:
            self._isolating[tp] = last
            self.consumer.seek(tp, record.offset)
            return
        self._stop_partition(
            tp, record.offset, f"the target refused the record at offset {record.offset}: {error}"
        )

    def _rewind(self, tp: TopicPartition, offset: int, error: BaseException) -> None:
        log.warning(
            "event=mirror_retry partition=%s-%d offset=%d error=%r",
            tp.topic,
            tp.partition,
            offset,
            str(error),
        )
        self.consumer.seek(tp, offset)  # the next poll reads it again, after a back-off
        self._retrying = True

    def _stop_partition(self, tp: TopicPartition, offset: int, reason: str) -> None:
        """Stop copying a partition: nothing from `offset` on is committed, the others go on."""
        progress = self._stats.of(tp)
        progress.stopped_reason = reason
        self.consumer.pause(tp)
        log.error(
            "event=mirror_partition_stopped partition=%s-%d offset=%d reason=%r "
            "(fix the cause and restart the mirror: it resumes from offset %d)",
            tp.topic,
            tp.partition,
            offset,
            reason,
            offset,
        )

    # -- target topics -----------------------------------------------------------------------------

    async def _route(self, topic: str, partition: int) -> _Route:
        route = self._routes.get(topic)
        if route is None or partition >= route.source_partitions:  # new topic, or partitions were added
            route = await self._make_route(topic)
            self._routes[topic] = route
        return route

    async def _make_route(self, topic: str) -> _Route:
        source = (await self.source_admin.describe_topics([topic]))[topic]
        target_topic = self.config.target_topic(topic)
        count = len(source.partitions)
        try:
            await self.target_admin.create_topics(
                [
                    NewTopic(
                        target_topic, count, self.config.replication_factor, configs=self.config.topic_configs
                    )
                ]
            )
            log.info("event=mirror_topic_created topic=%s partitions=%d", target_topic, count)
        except TopicAlreadyExistsError:
            pass  # made by another mirror, or earlier
        target = (await self.target_admin.describe_topics([target_topic]))[target_topic]
        return _Route(target_topic, count, len(target.partitions))

    # -- offsets and rebalances ----------------------------------------------------------------------

    async def _commit(self, partitions: set[TopicPartition] | None) -> None:
        offsets = {
            tp: OffsetAndMetadata(p.acknowledged, "")
            for tp, p in self._stats.partitions.items()
            if p.acknowledged is not None
            and p.acknowledged != p.committed
            and (partitions is None or tp in partitions)
        }
        self._last_commit = time.monotonic()
        if not offsets:
            return
        try:
            await self.consumer.commit(offsets)
        except CommitFailedError as error:
            # The group rebalanced: the new owner copies from the last commit (duplicates, no loss).
            log.warning("event=mirror_commit_failed partitions=%d error=%r", len(offsets), str(error))
            return
        for tp, offset in offsets.items():
            self._stats.of(tp).committed = offset.offset

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        # Everything polled so far was flushed and settled before this poll; commit it before giving it up.
        await self._commit(revoked)
        self._drop(revoked)

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self._drop(lost)  # no longer ours: their new owner commits

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        log.info(
            "event=mirror_assigned partitions=%s",
            ",".join(f"{t.topic}-{t.partition}" for t in sorted(assigned)),
        )

    def _drop(self, partitions: set[TopicPartition]) -> None:
        for tp in partitions:
            self._stats.partitions.pop(tp, None)
            self._isolating.pop(tp, None)
            self.metrics.forget(tp.topic, tp.partition)

    # -- reporting ---------------------------------------------------------------------------------

    def _update_lag(self) -> None:
        for tp in self.consumer.assignment():
            high = self.consumer.highwater(tp)
            progress = self._stats.of(tp)
            if high is None or progress.acknowledged is None:
                continue
            self.metrics.lag(
                tp.topic, tp.partition, max(0, high - progress.acknowledged), progress.newest_timestamp
            )

    def lag(self) -> dict[TopicPartition, int]:
        """Records still to copy, per assigned partition whose high watermark is known."""
        found = {}
        for tp in self.consumer.assignment():
            high = self.consumer.highwater(tp)
            acknowledged = self._stats.of(tp).acknowledged
            if high is not None:
                found[tp] = max(0, high - (acknowledged or 0))
        return found

    def _report_progress(self) -> None:
        interval = self.config.progress_interval_ms / 1000
        now = time.monotonic()
        then, copied_then = self._last_progress
        if interval <= 0 or now - then < interval:
            return
        copied = self.metrics.copied_total
        lag = self.lag()
        stopped = [tp for tp, p in self._stats.partitions.items() if p.stopped_reason]
        log.info(
            "event=mirror_progress copied=%d rate=%.0f/s partitions=%d lag=%d stopped=%d",
            copied,
            (copied - copied_then) / (now - then),
            len(self.consumer.assignment()),
            sum(lag.values()),
            len(stopped),
        )
        self._last_progress = (now, copied)

    async def _close(self) -> None:
        with contextlib.suppress(KafkaError, KafkaClientError):
            await self.producer.flush()
        with contextlib.suppress(KafkaError, KafkaClientError):
            await self._commit(None)
        for closing in (
            self.consumer.close(),
            self.producer.close(),
            self.source_admin.close(),
            self.target_admin.close(),
        ):
            with contextlib.suppress(KafkaError, KafkaClientError, OSError):
                await closing


def _retriable(error: BaseException) -> bool:
    """Worth trying again: Kafka's retriable codes, and client-side timeouts and lost connections."""
    return bool(getattr(error, "retriable", False)) or isinstance(error, KafkaClientError)


def matches(config: MirrorConfig, topic: str) -> bool:
    """Whether the mirror copies `topic` (its subscription pattern, matched as the consumer does)."""
    return re.fullmatch(config.subscription_pattern(), topic) is not None
