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
from collections import deque
from collections.abc import Awaitable, Iterable, Iterator, Mapping, Sequence
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
    OffsetAndMetadata,
    RecordList,
    TopicPartition,
)
from backbone.client.admin.mirror_progress import commit_metadata, copied_topic_id
from backbone.client.audit import AuditCounter, AuditPublisher
from backbone.client.config import security_settings
from backbone.client.producer.bulk_append import WireRecord
from backbone.mirror import provenance
from backbone.mirror.audit import mirror_tier
from backbone.mirror.config import MirrorConfig
from backbone.mirror.metrics import MirrorMetrics
from backbone.mirror.routes import Routes
from backbone.mirror.state import MirrorStats, PartitionProgress, Route, SentChunk
from backbone.protocol.record_copy import HeaderedRun
from backbone.protocol.record_runs import UniformRun
from backbone.protocol.records import LazyRecords, Record

log = logging.getLogger(__name__)

_POLL_MS = 500
_RETRY_BACKOFF_S = 1.0
_CLOSE_STEP_S = 10.0  # each step of a shutdown waits at most this long
_ANSWER_WAIT_S = 1.0  # the longest the loop waits for the target's answers at once (it then goes on)
_SOURCE_CHECK_S = 5.0  # how often copied source topics are checked for new partitions or a new topic id


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
                # A fetch waits up to 100 ms for records to gather instead of returning at each produced
                # batch: on a busy source a third of the exchanges, here and in the target (fewer, larger
                # produce requests), for at most 100 ms more latency.
                "fetch.min.bytes": 256 * 1024,
                "fetch.max.wait.ms": 100,
                **({"group.instance.id": config.instance_id} if config.instance_id else {}),
                **config.consumer,
            }
        )
        self.producer = AsyncProducer(
            {
                "bootstrap.servers": config.target_bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                # Large batches: a mirror always has records waiting, and each produce request costs the
                # target broker about the same whatever its size (1 MiB batches: 45% faster than 16 KiB).
                "batch.size": 1_048_576,
                "linger.ms": 10,
                "client.id": f"mirror-{config.source_alias}-{config.target_alias}",
                **config.producer,
            }
        )
        # The admins connect as the consumer (source) and the producer (target) do.
        self.source_admin = AsyncAdmin(
            {"bootstrap.servers": config.source_bootstrap, **security_settings(config.consumer)}
        )
        self.target_admin = AsyncAdmin(
            {"bootstrap.servers": config.target_bootstrap, **security_settings(config.producer)}
        )
        self.routes = Routes(config, self.source_admin, self.target_admin)
        self._stats = MirrorStats()
        self._last_commit = time.monotonic()
        self._last_progress = (time.monotonic(), 0)
        self._in_flight: deque[SentChunk] = deque()  # sent, not yet settled, in send order
        self._in_flight_records = 0
        self._isolating: dict[TopicPartition, int] = {}  # partition -> last offset sent one by one
        self._retrying = False  # a partition was rewound this cycle: back off before reading it again
        self._held = False  # reading stopped until the target answers (`_hold_reading`)
        self.audit = _audit_publisher(config) if config.audit_bootstrap else None
        self._last_audit = time.monotonic()
        self._audit_publishing: asyncio.Task[bool] | None = None
        self._last_source_check = time.monotonic()

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
                self._hold_reading()
                polled = await self.consumer.poll(
                    timeout_ms=_POLL_MS, max_records=self.config.poll_max_records
                )
                if polled:
                    await self._copy(polled)
                else:
                    self._settle_done()
                if self._retrying:
                    self._retrying = False
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), _RETRY_BACKOFF_S)
                if time.monotonic() - self._last_source_check >= _SOURCE_CHECK_S:
                    self._last_source_check = time.monotonic()
                    await self._check_sources(self.routes.topics())
                self._update_lag()
                if time.monotonic() - self._last_commit >= self.config.commit_interval_ms / 1000:
                    await self._commit(None)
                if self.audit and time.monotonic() - self._last_audit >= self.config.audit_interval_ms / 1000:
                    self._last_audit = time.monotonic()
                    self._publish_audit(self.audit)
                self._report_progress()
        finally:
            await self._close()

    def _publish_audit(self, audit: AuditPublisher) -> None:
        """Publish the audit counts in the background, one publish at a time: a publish waits up to 30 s for
        an audit cluster in trouble, and copying must not wait with it (it is idle otherwise)."""
        if self._audit_publishing is None or self._audit_publishing.done():
            self._audit_publishing = asyncio.ensure_future(audit.publish())

    async def _copy(self, polled: Mapping[TopicPartition, Sequence[ConsumerRecord]]) -> None:
        """Send the polled records; they are counted (and committable) once acknowledged (`_settle_done`)."""
        # Before sending anything: a topic whose partitions went back (offset out of range) or grew may
        # have been re-created.
        recreated = await self._check_sources({tp.topic for tp, rs in polled.items() if self._moved(tp, rs)})
        for tp, records in polled.items():
            progress = self._stats.of(tp)
            if progress.stopped_reason is not None:
                continue
            if tp.topic in recreated:
                continue  # read again from the new topic's start
            try:
                route = await self.routes.route(tp.topic, tp.partition)
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
            self._in_flight.append(await self._send(route, tp, records))
            self._in_flight_records += len(records)
        if self._isolating or self._in_flight_records > self.config.max_in_flight_records:
            # Bounds what is unacknowledged, and isolation needs each answer now; but a target that does not
            # answer must not stop the loop (commits, heartbeats, progress): when the answers do not come in
            # time, reading stops instead (`_hold_reading`) until they do.
            with contextlib.suppress(KafkaClientError):
                await self._settle_all(_ANSWER_WAIT_S)
        self._settle_done()

    def _hold_reading(self) -> None:
        """Read nothing while the target has not answered enough of what was sent (more than
        `max.in.flight.records`, or a record being isolated); read again once it has. Held
        partitions stay in the group (the loop keeps polling) and keep what was fetched for them."""
        hold = self._in_flight_records > self.config.max_in_flight_records or bool(
            self._isolating and self._in_flight
        )
        if not hold and not self._held:
            return
        readable = {tp for tp in self.consumer.assignment() if self._stats.of(tp).stopped_reason is None}
        if hold:  # every time: partitions assigned meanwhile are held too
            if not self._held:
                log.warning(
                    "event=mirror_reading_held in_flight_records=%d reason=%r",
                    self._in_flight_records,
                    "waiting for the target to acknowledge what was sent",
                )
            self.consumer.pause(*readable)
        else:
            log.info("event=mirror_reading_resumed in_flight_records=%d", self._in_flight_records)
            self.consumer.resume(*readable)
        self._held = hold

    def _moved(self, tp: TopicPartition, records: Sequence[ConsumerRecord]) -> bool:
        """The partition is new to its route, or its records start before the mirror's position."""
        route = self.routes.known(tp.topic)
        if route is None:
            return False
        progress = self._stats.of(tp)
        position = progress.resumed_from if progress.acknowledged is None else progress.acknowledged
        return tp.partition >= route.source_partitions or (
            position is not None and records[0].offset < position
        )

    def _settle_done(self) -> None:
        """Settle sent chunks, oldest first, while they are fully acknowledged (or failed)."""
        while self._in_flight:
            chunk = self._in_flight[0]
            if not all(_finished(outcome) for _, outcome in chunk.outcomes):
                return
            self._in_flight.popleft()
            self._in_flight_records -= chunk.polled
            if not self._settle(chunk):
                # Later chunks of the partition were sent past the failure: it is read again from there,
                # so their outcome must not move its acknowledged offset.
                self._forget_in_flight({chunk.tp})

    async def _settle_all(self, timeout: float | None = None) -> None:
        await self.producer.flush(timeout)
        self._settle_done()

    async def _send(self, route: Route, tp: TopicPartition, records: Sequence[ConsumerRecord]) -> SentChunk:
        """Send one partition's records, each with its provenance header added, in order.

        Runs of alike records without headers (what most producers write) are copied without making a
        record each: `HeaderedRun` encodes their copies straight from the fetched bytes. The rest are
        copied one by one."""
        target_alias = self.config.target_alias
        prefix = provenance.value_prefix(self.config.source_alias, tp.partition)
        header = provenance.HEADER
        chunk = SentChunk(tp, len(records), records[-1].offset + 1)
        partition = route.partition_for(tp.partition)
        rows: list[WireRecord] = []  # records to send one by one, waiting for the next run
        for piece in _pieces(records):
            if isinstance(piece, UniformRun) and partition is not None:
                if rows and not await self._send_rows(chunk, route, partition, rows):
                    return chunk
                rows = []
                copies = HeaderedRun(piece, header, prefix)
                chunk.add_run(copies)
                sending = self.producer.send_encoded(route.target_topic, partition, copies)
                if not await self._queued(chunk, len(copies), sending):
                    return chunk
                continue
            for record in piece:
                offset, timestamp, key, value, headers = record
                if headers and provenance.has_been_in(headers, target_alias):
                    # It was read from the target cluster: copying it there would send it back.
                    chunk.skipped += 1
                    continue
                chunk.add(offset, timestamp, len(value or b"") + len(key or b""))
                rows.append((key, value, [*headers, (header, prefix + b"%d" % offset)], timestamp))
        if rows:
            await self._send_rows(chunk, route, partition, rows)
        return chunk

    async def _send_rows(
        self, chunk: SentChunk, route: Route, partition: int | None, rows: list[WireRecord]
    ) -> bool:
        """Send the last `len(rows)` records of the chunk; False when some could not be sent."""
        if partition is not None:
            sending = self.producer.send_many(route.target_topic, partition, rows)
            return await self._queued(chunk, len(rows), sending)
        # Partition counts differ: each record goes where its key hashes.
        sent = len(chunk.offsets) - len(rows)
        try:
            for end, (key, value, marked_headers, timestamp) in enumerate(rows, sent + 1):
                future = await self.producer.send(
                    route.target_topic, value, key, headers=marked_headers, timestamp_ms=timestamp
                )
                chunk.outcomes.append((end, future))
        except (KafkaError, KafkaClientError, ValueError) as error:
            chunk.outcomes.append((len(chunk.offsets), error))
            return False
        return True

    @staticmethod
    async def _queued(chunk: SentChunk, count: int, sending: Awaitable[list[tuple[int, Any]]]) -> bool:
        """Note the outcomes of sending the chunk's last `count` records; False when some could not be
        sent (nothing after them may be: the partition is read again from there)."""
        sent = len(chunk.offsets)
        try:
            outcomes = await sending
        except (KafkaError, KafkaClientError, ValueError) as error:
            chunk.outcomes.append((sent, error))
            return False
        before = sent - count  # the outcomes' ends count from the first of the `count` records
        chunk.outcomes += [(before + end, outcome) for end, outcome in outcomes]
        return not (outcomes and isinstance(outcomes[-1][1], BaseException))

    def _settle(self, chunk: SentChunk) -> bool:
        """Count what the target acknowledged; stop or rewind at the first record it did not (False)."""
        tp = chunk.tp
        progress = self._stats.of(tp)
        copied = 0  # the first `copied` records sent are in the target
        error = None
        for end, outcome in chunk.outcomes:
            if isinstance(outcome, BaseException):
                error = outcome
            elif outcome.failed():
                error = outcome.exception()
            if error is not None:
                break
            copied = end
        self._count_copied(chunk, copied)
        if error is not None:
            failed = chunk.offsets[copied]
            progress.acknowledged = failed  # everything before it is copied or skipped
            self._record_failure(tp, failed, chunk.offsets[-1], error)
            return False
        progress.acknowledged = chunk.next_offset
        if copied:
            progress.newest_timestamp = chunk.timestamps[copied - 1]
        if self._isolating.get(tp, chunk.next_offset) < chunk.next_offset:
            self._isolating.pop(tp, None)
        return True

    def _count_copied(self, chunk: SentChunk, copied: int) -> None:
        tp = chunk.tp
        self.metrics.copied(tp.topic, copied, sum(chunk.sizes[:copied]))
        if self.audit is not None:
            self.audit.counter.add_timestamps(self.config.target_topic(tp.topic), chunk.timestamps[:copied])
        if chunk.skipped:
            self.metrics.skip(tp.topic, chunk.skipped)

    def _record_failure(self, tp: TopicPartition, offset: int, last: int, error: BaseException) -> None:
        """Rewind to `offset` for a retriable error; for a refusal, find the refused record (a whole batch
        fails with it: `last` is the chunk's last offset) by sending one record at a time, and stop at it."""
        self.metrics.fail(tp.topic)
        if _retriable(error):
            self._rewind(tp, offset, error)
            return
        if tp not in self._isolating and last > offset:
            self._isolating[tp] = last
            self.consumer.seek(tp, offset)
            return
        self._stop_partition(tp, offset, f"the target refused the record at offset {offset}: {error}")

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
            "action='fix the cause and restart the mirror: it resumes from offset %d'",
            tp.topic,
            tp.partition,
            offset,
            reason,
            offset,
        )

    # -- target topics -----------------------------------------------------------------------------

    async def _check_sources(self, topics: set[str]) -> set[str]:
        """Follow the routed source topics (`Routes.recreated_sources`); a re-created one is copied from its
        start. Returns the re-created ones."""
        recreated = await self.routes.recreated_sources(topics)
        for topic, (old, new_id) in recreated.items():
            await self._source_recreated(topic, old, new_id)
        return set(recreated)

    async def _source_recreated(self, topic: str, old: Route, new_id: str | None) -> None:
        """A source topic deleted and created again is a new topic: copy it from its start into the same
        target topic, which keeps the records copied from the old one (its retention removes them)."""
        partitions = {tp for tp in self.consumer.assignment() if tp.topic == topic}
        _log_recreated(topic, old.source_topic_id, new_id, len(partitions))
        self._forget_in_flight(partitions)
        await self.routes.make(topic)
        starts = (
            await self.source_admin.list_offsets(dict.fromkeys(partitions, "earliest")) if partitions else {}
        )
        for tp in partitions:
            self._isolating.pop(tp, None)
            start = starts[tp].offset if tp in starts else None
            # The new start is committed at once, so a restart does not resume from the old topic's offsets.
            self._stats.partitions[tp] = PartitionProgress(acknowledged=start, resumed_from=start)
            if start is not None:
                self.consumer.seek(tp, start)
            self.consumer.resume(tp)

    # -- offsets and rebalances ----------------------------------------------------------------------

    async def _commit(self, partitions: set[TopicPartition] | None) -> None:
        offsets = {
            tp: OffsetAndMetadata(
                p.acknowledged, commit_metadata(p.newest_timestamp, self.routes.topic_ids.get(tp.topic))
            )
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
        """Commit what the target acknowledged of the revoked partitions before giving them up. Their
        answers are awaited a bounded time (the group waits for this member meanwhile): what the target did
        not acknowledge by then is not committed, so the next owner copies it again (duplicates, no loss)."""
        with contextlib.suppress(KafkaClientError):
            await self._settle_all(self.config.revoke_wait_ms / 1000)
        await self._commit(revoked)
        self._drop(revoked)

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self._drop(lost)  # no longer ours: their new owner commits

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        log.info(
            "event=mirror_assigned partitions=%s",
            ",".join(f"{t.topic}-{t.partition}" for t in sorted(assigned)),
        )
        if assigned:
            await self._note_resume_points(assigned)

    async def _note_resume_points(self, assigned: set[TopicPartition]) -> None:
        """Where each partition's copy resumes (committed offset, else the log start, as
        auto.offset.reset=earliest does), so its lag is known before the first acknowledgement. A partition
        whose commit names another topic id than its topic's now (deleted and created again while no mirror
        ran) resumes from the new topic's start."""
        self.consumer.pause(*assigned)  # nothing is read from the committed offsets before they are judged
        try:
            await self._judge_resume_points(assigned)
        finally:
            self.consumer.resume(*(assigned & self.consumer.assignment()))

    async def _judge_resume_points(self, assigned: set[TopicPartition]) -> None:
        try:
            committed = await self.consumer.committed(assigned)
            for topic, source in (await self.routes.describe_sources({tp.topic for tp in assigned})).items():
                self.routes.topic_ids[topic] = source.topic_id
            recreated = {
                tp: commit
                for tp in assigned
                if (commit := committed.get(tp)) is not None and self._copied_another(tp, commit)
            }
            fresh = {tp: "earliest" for tp in assigned if committed.get(tp) is None or tp in recreated}
            starts = await self.source_admin.list_offsets(fresh) if fresh else {}
        except (KafkaError, KafkaClientError) as error:  # lag stays unknown until the first acknowledgement
            log.warning("event=mirror_resume_points_unknown error=%r", str(error))
            return
        for topic in sorted({tp.topic for tp in recreated}):
            commits = [c for tp, c in recreated.items() if tp.topic == topic]
            old_ids = ",".join(sorted({copied_topic_id(c.metadata) or "" for c in commits}))
            _log_recreated(topic, old_ids, self.routes.topic_ids[topic], len(commits))
        for tp in assigned & self.consumer.assignment():
            progress = self._stats.of(tp)
            position = committed.get(tp)
            if position is not None:
                progress.resumed_from = progress.committed = position.offset
            if tp in starts:
                progress.resumed_from = starts[tp].offset
            if tp in recreated and tp in starts:  # committed at once: the old topic's offset is gone for good
                progress.acknowledged = starts[tp].offset
                self.consumer.seek(tp, starts[tp].offset)

    def _copied_another(self, tp: TopicPartition, committed: OffsetAndMetadata | None) -> bool:
        """The commit was made copying another topic of the same name (one since deleted)."""
        old_id = copied_topic_id(committed.metadata) if committed is not None else None
        new_id = self.routes.topic_ids.get(tp.topic)
        return None not in (old_id, new_id) and old_id != new_id

    def _drop(self, partitions: set[TopicPartition]) -> None:
        for tp in partitions:
            self._stats.partitions.pop(tp, None)
            self._isolating.pop(tp, None)
            self.metrics.forget(tp.topic, tp.partition)
        self._forget_in_flight(partitions)

    def _forget_in_flight(self, partitions: set[TopicPartition]) -> None:
        """Stop tracking the partitions' sent chunks (they are read again, or no longer ours)."""
        self._in_flight = deque(c for c in self._in_flight if c.tp not in partitions)
        self._in_flight_records = sum(c.polled for c in self._in_flight)

    # -- reporting ---------------------------------------------------------------------------------

    def _update_lag(self) -> None:
        for tp, records in self.lag().items():
            self.metrics.lag(tp.topic, tp.partition, records, self._stats.of(tp).newest_timestamp)

    def lag(self) -> dict[TopicPartition, int]:
        """Records still to copy, per assigned partition whose high watermark and position are known: the
        position is what the target acknowledged, or where the copy resumed until it acknowledges."""
        found = {}
        for tp in self.consumer.assignment():
            high = self.consumer.highwater(tp)
            progress = self._stats.of(tp)
            position = progress.resumed_from if progress.acknowledged is None else progress.acknowledged
            if high is not None and position is not None:
                found[tp] = max(0, high - position)
        return found

    def _report_progress(self, final: bool = False) -> None:
        """A progress line every progress.interval.ms (0: none), and a last one as the mirror stops."""
        interval = self.config.progress_interval_ms / 1000
        now = time.monotonic()
        then, copied_then = self._last_progress
        if interval <= 0 or (now - then < interval and not final):
            return
        copied = self.metrics.copied_total
        lag = self.lag()
        stopped = [tp for tp, p in self._stats.partitions.items() if p.stopped_reason]
        log.info(
            "event=mirror_progress copied=%d rate=%.0f/s partitions=%d lag=%d stopped=%d",
            copied,
            (copied - copied_then) / max(now - then, 1e-6),
            len(self.consumer.assignment()),
            sum(lag.values()),
            len(stopped),
        )
        self._last_progress = (now, copied)

    async def _close(self) -> None:
        """Commit what the target acknowledged and stop, in bounded time: a stopped mirror must exit even
        when the target stops answering (what it did not acknowledge is copied again by the next owner)."""
        with contextlib.suppress(KafkaError, KafkaClientError):
            await self._settle_all(_CLOSE_STEP_S)
        with contextlib.suppress(KafkaError, KafkaClientError):
            await self._commit(None)
        self._report_progress(final=True)
        if self.audit is not None:
            if self._audit_publishing is not None:  # its counts stay unacknowledged: close publishes them
                self._audit_publishing.cancel()
                await asyncio.gather(self._audit_publishing, return_exceptions=True)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.audit.close(_CLOSE_STEP_S), 3 * _CLOSE_STEP_S)
        for closing in (
            self.consumer.close(_CLOSE_STEP_S),
            self.producer.close(_CLOSE_STEP_S),
            self.source_admin.close(),
            self.target_admin.close(),
        ):
            with contextlib.suppress(KafkaError, KafkaClientError, OSError, TimeoutError):
                await asyncio.wait_for(closing, 2 * _CLOSE_STEP_S)


def _log_recreated(topic: str, old_id: str | None, new_id: str | None, partitions: int) -> None:
    log.warning(
        "event=mirror_source_topic_recreated topic=%s old_topic_id=%s new_topic_id=%s partitions=%d "
        "decision=%r",
        topic,
        old_id,
        new_id,
        partitions,
        "copy the new topic from its first offset; the target keeps what was copied from the old one",
    )


def _pieces(records: Sequence[ConsumerRecord]) -> Iterator[Iterable[Record] | UniformRun]:
    """The records in order as the decoder left them: uniform runs (undecoded) and plain tuples."""
    if not isinstance(records, RecordList):
        # The mirror's consumer has no deserializer, so its keys and values are bytes or None.
        yield [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records]
        return
    for _, items in records.runs():
        if isinstance(items, LazyRecords):
            yield from items.parts
        else:
            yield items


def _finished(outcome: Any) -> bool:
    """A send's outcome is known: refused at once (an exception), or completed."""
    return isinstance(outcome, BaseException) or outcome.done()


def _audit_publisher(config: MirrorConfig) -> AuditPublisher:
    """Counts of the copied records (under the target topic's name), published to the audit topic."""
    counter = AuditCounter(mirror_tier(config.source_alias, config.target_alias), config.audit_bucket_ms)
    # The audit topic normally lives in the target cluster: its security settings, unless told otherwise.
    producer = config.audit_producer or security_settings(config.producer)
    return AuditPublisher(counter, config.audit_bootstrap, config.audit_topic, producer)


def _retriable(error: BaseException) -> bool:
    """Worth trying again: Kafka's retriable codes, and client-side timeouts and lost connections."""
    return bool(getattr(error, "retriable", False)) or isinstance(error, KafkaClientError)


def matches(config: MirrorConfig, topic: str) -> bool:
    """Whether the mirror copies `topic` (its subscription pattern, matched as the consumer does)."""
    return re.fullmatch(config.subscription_pattern(), topic) is not None
