"""Completeness audit counts: how many records a tier handled per topic and time bucket, published as deltas.

Every tier (an audited producer, a cluster's `backbone audit count`, a mirror) keeps an `AuditCounter` and
an `AuditPublisher` sends what it counted to the audit topic as JSON records (see `AuditCount`):

    {"tier": "dc1", "process": "host:4242:9f1c...", "sequence": 7, "topic": "pageviews",
     "bucket_start_ms": 1700000400000, "bucket_ms": 600000, "count": 1200, "emitted_at_ms": 1700000461000}

A count is the delta since the process's previous message for that (topic, bucket), so a report sums them.
A message that was not acknowledged is sent again unchanged, with the same (process, sequence), so a
report drops the copies a retry may have written. The module lives in the client room because our producer
counts what it sent (`audit.enable=true`); the mirror and the `audit` command use it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from backbone.client.config import security_settings
from backbone.protocol.errors import KafkaError
from backbone.wire.errors import KafkaClientError

log = logging.getLogger(__name__)

DEFAULT_TOPIC = "__audit"
DEFAULT_BUCKET_MS = 600_000  # 10 minutes
DEFAULT_INTERVAL_MS = 10_000


def bucket_start(timestamp_ms: int, bucket_ms: int) -> int:
    """The start of the bucket holding `timestamp_ms` (buckets are aligned on the epoch)."""
    return timestamp_ms - timestamp_ms % bucket_ms


def process_id() -> str:
    """Host, pid and a random part: unique even for a process restarted with the same pid."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


@dataclass(frozen=True)
class AuditCount:
    """One audit message: `count` more records of `topic` in the bucket, seen by `tier`."""

    tier: str
    process: str
    sequence: int
    topic: str
    bucket_start_ms: int
    bucket_ms: int
    count: int
    emitted_at_ms: int

    def encode(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def decode(cls, value: bytes) -> AuditCount:
        """Raises ValueError for anything that is not an audit message."""
        try:
            fields = json.loads(value)
            found = cls(
                tier=str(fields["tier"]),
                process=str(fields["process"]),
                sequence=int(fields["sequence"]),
                topic=str(fields["topic"]),
                bucket_start_ms=int(fields["bucket_start_ms"]),
                bucket_ms=int(fields["bucket_ms"]),
                count=int(fields["count"]),
                emitted_at_ms=int(fields["emitted_at_ms"]),
            )
        except (TypeError, KeyError, json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ValueError(f"not an audit message: {error}") from None
        if found.bucket_ms <= 0:
            raise ValueError(f"not an audit message: bucket_ms={found.bucket_ms}")
        return found


class AuditCounter:
    """Counts per (topic, bucket) since the last `take`; thread-safe (a producer counts on its sender's
    thread while its publisher takes the counts)."""

    def __init__(self, tier: str, bucket_ms: int = DEFAULT_BUCKET_MS, process: str | None = None) -> None:
        if bucket_ms <= 0:
            raise ValueError(f"the audit bucket must be at least 1 ms, got {bucket_ms}")
        self.tier = tier
        self.bucket_ms = bucket_ms
        self.process = process or process_id()
        self._sequence = 0
        self._counts: Counter[tuple[str, int]] = Counter()
        self._lock = threading.Lock()
        self._announcing = False

    def announce(self) -> None:
        """Send, with the next counts, a message of no records (topic ''): the tier says it is counting,
        so a report can tell a tier that saw nothing from one that never ran."""
        self._announcing = True

    def add(self, topic: str, timestamp_ms: int, count: int = 1) -> None:
        key = (topic, bucket_start(timestamp_ms, self.bucket_ms))
        with self._lock:
            self._counts[key] += count

    def add_timestamps(self, topic: str, timestamps: list[int]) -> None:
        """Count records by their timestamps: one addition when they all fall in one bucket (the usual
        case for a batch), one per record only when they span buckets."""
        if not timestamps:
            return
        bucket_ms = self.bucket_ms
        first = bucket_start(min(timestamps), bucket_ms)
        if first == bucket_start(max(timestamps), bucket_ms):
            self.add(topic, first, len(timestamps))
            return
        spread = Counter(t - t % bucket_ms for t in timestamps)
        with self._lock:
            for bucket, count in spread.items():
                self._counts[(topic, bucket)] += count

    def take(self, now_ms: int | None = None) -> list[AuditCount]:
        """The counts since the previous take as messages, each with the next sequence number."""
        with self._lock:
            counts, self._counts = self._counts, Counter()
            emitted = now_ms if now_ms is not None else int(time.time() * 1000)
            messages = []
            if self._announcing:
                self._announcing = False
                self._sequence += 1
                start = bucket_start(emitted, self.bucket_ms)
                messages.append(
                    AuditCount(self.tier, self.process, self._sequence, "", start, self.bucket_ms, 0, emitted)
                )
            for (topic, bucket), count in sorted(counts.items()):
                if count:
                    self._sequence += 1
                    messages.append(
                        AuditCount(
                            self.tier,
                            self.process,
                            self._sequence,
                            topic,
                            bucket,
                            self.bucket_ms,
                            count,
                            emitted,
                        )
                    )
            return messages

    def pending(self) -> int:
        with self._lock:
            return sum(self._counts.values())


class AuditPublisher:
    """Publishes a counter's messages to the audit topic (acks=all, idempotent) in the given cluster.

    `publish` returns True when every message so far was acknowledged; the ones that were not are kept and
    sent again, unchanged, the next time.
    """

    def __init__(
        self,
        counter: AuditCounter,
        bootstrap_servers: str | Iterable[str],
        topic: str = DEFAULT_TOPIC,
        producer_config: Mapping[str, Any] | None = None,
    ) -> None:
        from backbone.client.producer.producer import AsyncProducer  # the producer imports this module

        self.counter = counter
        self.topic = topic
        self._bootstrap = bootstrap_servers
        self._security = security_settings(producer_config or {})
        self._unacknowledged: list[AuditCount] = []
        self._topic_ready = False
        self._lock = asyncio.Lock()
        self.producer = AsyncProducer(
            {
                "bootstrap.servers": bootstrap_servers,
                "acks": "all",
                "enable.idempotence": True,
                "client.id": f"audit-{counter.tier}",
                **(producer_config or {}),
            }
        )

    async def publish(self, timeout: float | None = 30.0) -> bool:
        async with self._lock:
            messages = self._unacknowledged + self.counter.take()
            if not messages:
                return True
            self._unacknowledged = messages
            try:
                await self._ensure_topic()
                futures = [
                    await self.producer.send(
                        self.topic,
                        message.encode(),
                        key=f"{message.tier}|{message.topic}".encode(),
                        timestamp_ms=message.emitted_at_ms,
                    )
                    for message in messages
                ]
                await self.producer.flush(timeout)
            except (KafkaError, KafkaClientError, OSError) as error:  # keep the messages, try again later
                log.warning("event=audit_publish_failed messages=%d error=%r", len(messages), str(error))
                return False
            self._unacknowledged = [m for m, f in zip(messages, futures, strict=True) if not f.succeeded()]
            if self._unacknowledged:
                log.warning(
                    "event=audit_publish_incomplete unacknowledged=%d error=%r",
                    len(self._unacknowledged),
                    str(next(f.exception() for f in futures if f.failed())),
                )
            return not self._unacknowledged

    async def _ensure_topic(self) -> None:
        """Create the audit topic when missing (one partition: counts are few, and ordered per process)."""
        if self._topic_ready:
            return
        from backbone.client.admin.client import AsyncAdmin
        from backbone.client.admin.descriptions import NewTopic
        from backbone.protocol.errors import TopicAlreadyExistsError

        async with AsyncAdmin({"bootstrap.servers": self._bootstrap, **self._security}) as admin:
            with contextlib.suppress(TopicAlreadyExistsError):
                await admin.create_topics([NewTopic(self.topic, 1, -1)])
        self._topic_ready = True

    async def close(self, timeout: float | None = 30.0) -> bool:
        """Publish what is left, then close; False when some counts could not be delivered."""
        delivered = await self.publish(timeout)
        await self.producer.close(timeout)
        if not delivered:
            log.error(
                "event=audit_counts_lost tier=%s messages=%d reason='the audit topic %s was not reachable'",
                self.counter.tier,
                len(self._unacknowledged),
                self.topic,
            )
        return delivered

    async def run_periodically(self, interval_ms: int, stop: asyncio.Event) -> None:
        """Publish every `interval_ms` until `stop` is set (the caller closes the publisher)."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval_ms / 1000)
            if not stop.is_set():
                await self.publish()
