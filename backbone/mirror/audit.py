"""A cluster's audit tier (`backbone audit count`); reading the topic back is `backbone.client.audit`.

`ClusterAuditor` is a consumer group over every topic of one cluster but the internal ones (`__.*`, the
audit topic among them). It counts the records it reads per topic and time bucket (by record timestamp)
and publishes the counts (message format: backbone/client/audit/counts.py) to the audit topic of the
cluster it is told to publish to. Its offsets are committed only after the counts covering them were
acknowledged, so a process killed at any moment loses no count; it may count some records twice (the
ones read after the last commit). At the aggregate tier the report shows those as extra records; at a
baseline tier (dc1, dc2) they would make the aggregate look incomplete. So a process stays up through its
clusters' trouble (a poll, publish or commit that fails with a retriable error is tried again rather than
ending the process), and is meant to count nothing twice while it does: when its partitions come back
from an older committed offset (a commit lost when the member was dropped from its group, or a revocation
while the audit cluster could not take the counts), it resumes where its counts end, also when the group's
coordinator cannot say what was committed. (One extra count at a datacenter tier after the compose suite's
faults is not explained yet: see tests/system/test_compose_topology.py.)

Run one per datacenter cluster (tier `dc1`, ...) and one on the aggregate cluster (tier `aggregate`);
several processes with the same tier share the partitions through their group.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from backbone.client import (
    AsyncConsumer,
    ConsumerRebalanceListener,
    KafkaClientError,
    KafkaError,
    OffsetAndMetadata,
    TopicPartition,
)
from backbone.client.audit import (
    DEFAULT_BUCKET_MS,
    DEFAULT_INTERVAL_MS,
    DEFAULT_TOPIC,
    AuditCounter,
    AuditPublisher,
)
from backbone.client.config import security_settings

log = logging.getLogger(__name__)

_POLL_MS = 500
_RETRY_BACKOFF_S = 1.0
_LOOKUP_ATTEMPTS = 3
INTERNAL_TOPICS = r"__.*|_schemas"  # _schemas: the schema registry's, kept in one cluster


def mirror_tier(source_alias: str, target_alias: str) -> str:
    """The tier name a mirror counts under."""
    return f"mirror-{source_alias}-{target_alias}"


@dataclass(frozen=True)
class AuditorSettings:
    bootstrap_servers: str
    tier: str
    publish_to: str  # the cluster holding the audit topic (normally the aggregate)
    audit_topic: str = DEFAULT_TOPIC
    bucket_ms: int = DEFAULT_BUCKET_MS
    interval_ms: int = DEFAULT_INTERVAL_MS
    group_id: str = ""  # default audit-<tier>
    exclude_regex: str = INTERNAL_TOPICS

    def subscription_pattern(self) -> str:
        return f"(?!(?:{self.exclude_regex})$).*"


class ClusterAuditor(ConsumerRebalanceListener):
    def __init__(
        self,
        settings: AuditorSettings,
        consumer_config: Mapping[str, Any] | None = None,
        publisher_config: Mapping[str, Any] | None = None,
    ) -> None:
        """`consumer_config` (e.g. security settings) is the counted cluster's; `publisher_config` the
        audit topic's cluster's (default: the same as the counted one's)."""
        self.settings = settings
        self.counter = AuditCounter(settings.tier, settings.bucket_ms)
        self.publisher = AuditPublisher(
            self.counter,
            settings.publish_to,
            settings.audit_topic,
            publisher_config or security_settings(consumer_config or {}),
        )
        self.consumer = AsyncConsumer(
            {
                "bootstrap.servers": settings.bootstrap_servers,
                "group.id": settings.group_id or f"audit-{settings.tier}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "client.id": f"audit-{settings.tier}",
                "session.timeout.ms": 10_000,
                "heartbeat.interval.ms": 3_000,
                "metadata.max.age.ms": 5_000,  # new topics are counted within seconds
                # Counts are published every few seconds, so a fetch may wait (fetch.max.wait.ms, 500 ms) for
                # records to gather: one exchange per broker and half second, not one per produced batch.
                "fetch.min.bytes": 1 << 20,
                # Only timestamps are counted: records that are not uniform runs (a mirror's copies carry a
                # header each) stay undecoded, and their timestamps are read alone (RecordList.timestamps).
                "record.regions": True,
                **(consumer_config or {}),
            }
        )
        self._positions: dict[TopicPartition, int] = {}  # next offset after what was counted
        self._committed: dict[TopicPartition, int] = {}
        # Next offset after what this process counted, kept across rebalances: those counts are published,
        # or held by the publisher until they are (it keeps unacknowledged ones). A partition that comes
        # back from an older committed offset (a commit lost when the member was dropped from its group, or
        # a revocation while the audit cluster could not take the counts) must not be counted twice: a
        # double count at a baseline tier would show as records missing in the aggregate.
        self._counted: dict[TopicPartition, int] = {}
        self._last_checkpoint = time.monotonic()
        self.counted_total = 0
        self.counter.announce()

    async def run(self, stop: asyncio.Event) -> None:
        """Count until `stop` is set; then publish and commit what was counted, and close."""
        self.consumer.subscribe(pattern=self.settings.subscription_pattern(), listener=self)
        log.info(
            "event=audit_count_started tier=%s cluster=%s publish_to=%s topic=%s",
            self.settings.tier,
            self.settings.bootstrap_servers,
            self.settings.publish_to,
            self.settings.audit_topic,
        )
        try:
            while not stop.is_set():
                try:
                    await self._count_and_checkpoint()
                except (KafkaError, KafkaClientError) as error:
                    # A restarted process counts again what it read since its last commit, so it stays
                    # up through a cluster's trouble rather than exit; only a lasting refusal ends it.
                    if not error.retriable:
                        raise
                    log.warning("event=audit_count_retry error=%r", str(error))
                    await asyncio.sleep(_RETRY_BACKOFF_S)
        finally:
            with contextlib.suppress(KafkaError, KafkaClientError):
                await self.checkpoint()
            await self.publisher.close()
            with contextlib.suppress(KafkaError, KafkaClientError, OSError):
                await self.consumer.close()

    async def _count_and_checkpoint(self) -> None:
        polled = await self.consumer.poll(timeout_ms=_POLL_MS)
        for tp, records in polled.items():
            self.counter.add_timestamps(tp.topic, records.timestamps())
            self._positions[tp] = self._counted[tp] = records[-1].offset + 1
            self.counted_total += len(records)
        if time.monotonic() - self._last_checkpoint >= self.settings.interval_ms / 1000:
            await self.checkpoint()

    async def checkpoint(self, partitions: set[TopicPartition] | None = None) -> None:
        """Publish the counts, and once they are acknowledged commit the offsets they cover."""
        self._last_checkpoint = time.monotonic()
        covered = {
            tp: offset
            for tp, offset in self._positions.items()
            if self._committed.get(tp) != offset and (partitions is None or tp in partitions)
        }
        if not await self.publisher.publish():
            return  # not committed: counted again after a restart rather than lost
        if not covered:
            return
        try:
            await self.consumer.commit({tp: OffsetAndMetadata(o, "") for tp, o in covered.items()})
        except (KafkaError, KafkaClientError) as error:
            # Committed at a later checkpoint; meanwhile `_counted` says where the counts end.
            log.warning("event=audit_commit_failed partitions=%d error=%r", len(covered), str(error))
            return
        self._committed.update(covered)
        log.info("event=audit_checkpoint partitions=%d counted_total=%d", len(covered), self.counted_total)

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self.checkpoint(revoked)
        self._drop(revoked)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        """Resume where this process's counts end, when that is past the committed offset."""
        counted = {tp: self._counted[tp] for tp in assigned if tp in self._counted}
        if not counted:
            return
        committed = await self._committed_offsets(set(counted))
        for tp, offset in counted.items():
            found = committed.get(tp)
            if found is None or found.offset < offset:
                log.info(
                    "event=audit_resumed_after_published topic=%s partition=%d committed=%s published=%d",
                    tp.topic,
                    tp.partition,
                    None if found is None else found.offset,
                    offset,
                )
                self.consumer.seek(tp, offset)
                self._positions[tp] = offset  # committed at the next checkpoint

    async def _committed_offsets(self, partitions: set[TopicPartition]) -> Mapping[TopicPartition, Any]:
        """The group's committed offsets, asked a few times while its coordinator is in trouble. When it
        does not answer, none: resuming after this process's own counts then counts nothing twice
        (unless another member of the tier counted the partition meanwhile, which it cannot tell)."""
        for attempt in range(_LOOKUP_ATTEMPTS):
            try:
                return await self.consumer.committed(partitions)
            except (KafkaError, KafkaClientError) as error:
                log.warning(
                    "event=audit_committed_lookup_failed attempt=%d error=%r", attempt + 1, str(error)
                )
                await asyncio.sleep(_RETRY_BACKOFF_S)
        return {}

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self._drop(lost)

    def _drop(self, partitions: set[TopicPartition]) -> None:
        for tp in partitions:
            self._positions.pop(tp, None)
            self._committed.pop(tp, None)
