"""The `_schemas` topic: read from the start on start-up and tailed after, written through one leader.

One partition, compacted and replicated, in the cluster `kafkastore.bootstrap.servers` names. Every
instance applies the topic's records in order to a `RegistryState`, so all of them serve the same ids.

One writer at a time: an instance about to write reads the topic to its end and checks the LEASE record
(see state.py). If another instance holds an unexpired lease, the write is forwarded to that instance's
advertised URL (`NotLeader`); otherwise this instance appends a claim (or a renewal, when its own lease
is past half its time), reads to the end again, and writes only if its claim is the one in force. A lease
is renewed by writing, so a leader that stops is replaced `leader.lease.ms` after its last write.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from typing import Any

from backbone.client import (
    AsyncAdmin,
    AsyncConsumer,
    AsyncProducer,
    KafkaClientError,
    KafkaError,
    NewTopic,
    TopicPartition,
)
from backbone.protocol.errors import TopicAlreadyExistsError
from backbone.schema_registry import errors
from backbone.schema_registry.state import Lease, RegistryState, encode

log = logging.getLogger(__name__)


class NotLeader(Exception):
    def __init__(self, lease: Lease) -> None:
        super().__init__(f"{lease.instance} at {lease.url} leads until {lease.expires_at_ms}")
        self.lease = lease


class SchemaLog:
    def __init__(
        self,
        bootstrap: str,
        topic: str,
        replication_factor: int,
        instance: str,
        url: str,
        lease_ms: int,
        timeout_ms: int,
        state: RegistryState,
    ) -> None:
        self.bootstrap, self.topic, self.replication_factor = bootstrap, topic, replication_factor
        self.instance, self.url, self.lease_ms = instance, url, lease_ms
        self.timeout_s = timeout_ms / 1000
        self.state = state
        self.partition = TopicPartition(topic, 0)
        self.position = 0  # the next offset to apply
        self._advanced = asyncio.Condition()
        self._write_lock = asyncio.Lock()
        self._tail: asyncio.Task[None] | None = None
        self.consumer = AsyncConsumer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": f"schema-registry-{instance}",
                "auto.offset.reset": "earliest",
                "fetch.max.wait.ms": 100,
            }
        )
        self.producer = AsyncProducer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 0,
                "client.id": f"schema-registry-{instance}",
            }
        )

    async def start(self) -> None:
        async with AsyncAdmin({"bootstrap.servers": self.bootstrap}) as admin:
            with contextlib.suppress(TopicAlreadyExistsError):
                await admin.create_topics(
                    [NewTopic(self.topic, 1, self.replication_factor, configs={"cleanup.policy": "compact"})]
                )
        self.consumer.assign([self.partition])
        self.consumer.seek_to_beginning(self.partition)
        self._tail = asyncio.create_task(self._follow())
        await self.read_to_end()
        log.info(
            "event=schemas_loaded topic=%s records=%d schemas=%d",
            self.topic,
            self.position,
            len(self.state.schemas),
        )

    async def close(self) -> None:
        if self._tail is not None:
            self._tail.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._tail
        with contextlib.suppress(KafkaError, KafkaClientError, OSError):
            await self.producer.close(5)
        with contextlib.suppress(KafkaError, KafkaClientError, OSError):
            await self.consumer.close()

    async def _follow(self) -> None:
        while True:
            try:
                polled = await self.consumer.poll(timeout_ms=500)
            except (KafkaError, KafkaClientError, OSError) as error:
                log.warning("event=schemas_read_failed error=%r", str(error))
                await asyncio.sleep(0.5)
                continue
            for records in polled.values():
                for record in records:
                    self._apply(record.key, record.value, record.offset)
                    self.position = record.offset + 1
            if polled:
                async with self._advanced:
                    self._advanced.notify_all()

    def _apply(self, key: Any, value: Any, offset: int) -> None:
        try:
            self.state.apply(json.loads(key), None if value is None else json.loads(value))
        except (TypeError, ValueError, KeyError) as error:
            log.warning("event=schemas_record_unreadable offset=%d error=%r", offset, str(error))

    async def read_to_end(self) -> None:
        """Wait until every record written to the topic before this call is applied."""
        try:
            async with asyncio.timeout(self.timeout_s):
                end = (await self.consumer.end_offsets([self.partition]))[self.partition]
                async with self._advanced:
                    await self._advanced.wait_for(lambda: self.position >= end)
        except TimeoutError:
            raise errors.store_timeout(
                f"reading {self.topic} to its end took over {self.timeout_s} s"
            ) from None
        except (KafkaError, KafkaClientError, OSError) as error:
            raise errors.store_error(str(error)) from None

    async def write(self, records: list[tuple[dict[str, Any], dict[str, Any] | None]]) -> None:
        """Append records as the leader and wait until they are applied here. Raises NotLeader when another
        instance holds the lease. Callers plan their records under `writing()` so plans do not race."""
        await self._ensure_lease()
        await self._append(records)

    def writing(self) -> asyncio.Lock:
        return self._write_lock

    async def _ensure_lease(self) -> None:
        await self.read_to_end()
        now = int(time.time() * 1000)
        lease = self.state.lease
        if lease is not None and lease.instance != self.instance and lease.expires_at_ms > now:
            raise NotLeader(lease)
        if (
            lease is not None
            and lease.instance == self.instance
            and lease.expires_at_ms - now > self.lease_ms / 2
        ):
            return
        claim = {
            "instance": self.instance,
            "url": self.url,
            "claimed_at_ms": now,
            "expires_at_ms": now + self.lease_ms,
        }
        await self._append([({"keytype": "LEASE"}, claim)])
        lease = self.state.lease
        if lease is None or lease.instance != self.instance:
            raise NotLeader(lease)  # another instance's claim came first
        if lease.claimed_at_ms == now:
            log.info("event=schemas_lease_claimed instance=%s url=%s", self.instance, self.url)

    async def _append(self, records: list[tuple[dict[str, Any], dict[str, Any] | None]]) -> None:
        try:
            futures = [
                await self.producer.send(self.topic, encode(value), key=encode(key), partition=0)
                for key, value in records
            ]
            async with asyncio.timeout(self.timeout_s):
                last = await futures[-1]
                for future in futures[:-1]:
                    await future
                async with self._advanced:
                    await self._advanced.wait_for(lambda: self.position > last.offset)
        except TimeoutError:
            raise errors.store_timeout(f"writing to {self.topic} took over {self.timeout_s} s") from None
        except (KafkaError, KafkaClientError, OSError) as error:
            raise errors.store_error(str(error)) from None
