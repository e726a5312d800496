"""The `_schemas` topic: read from the start on start-up and tailed after, written through one leader.

One partition, compacted and replicated, in the cluster `kafkastore.bootstrap.servers` names. Every
instance applies the topic's records in order to a `RegistryState`, so all of them serve the same ids.

One writer at a time: an instance about to write reads the topic to its end and checks the LEASE record
(see state.py). If another instance holds an unexpired lease, the write is forwarded to that instance's
advertised URL (`NotLeader`); otherwise this instance appends a claim (or a renewal, when its own lease
is past half its time), reads to the end again, and writes only if its claim is the one in force. A lease
is renewed by writing, so a leader that stops is replaced `leader.lease.ms` after its last write.

While its lease has more than half its time left, a leader does not read the topic: no other instance
can write before the lease runs out, and its own writes were applied when staged. Reading resumes (within
50 ms) once the lease passes half its time, before any other instance could claim it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Mapping
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

WRITE_HEADER = "registry.write"  # instance:sequence on every staged record, so its writer skips it on reading


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
        security: Mapping[str, Any] | None = None,
    ) -> None:
        """`security`: the storage client's security settings (security.protocol, sasl.*, ssl.*)."""
        self.bootstrap, self.topic, self.replication_factor = bootstrap, topic, replication_factor
        self.instance, self.url, self.lease_ms = instance, url, lease_ms
        self.timeout_s = timeout_ms / 1000
        self.state = state
        self.partition = TopicPartition(topic, 0)
        self.position = 0  # the next offset to apply
        self._advanced = asyncio.Condition()
        self._write_lock = asyncio.Lock()
        self._tail: asyncio.Task[None] | None = None
        self._own: set[bytes] = set()  # tags of staged records the tail has not read back yet
        self._sequence = 0
        self._staged: list[Any] = []
        self._paused = False
        self.security = dict(security or {})
        self.consumer = AsyncConsumer(
            {
                **self.security,
                "bootstrap.servers": bootstrap,
                "client.id": f"schema-registry-{instance}",
                "auto.offset.reset": "earliest",
                "fetch.max.wait.ms": 100,
            }
        )
        self.producer = AsyncProducer(
            {
                **self.security,
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 0,
                # One produce request at a time: the registrations staged while it is out go together in
                # the next (a group commit), rather than one request each racing five in flight.
                "max.in.flight.requests.per.connection": 1,
                "client.id": f"schema-registry-{instance}",
            }
        )

    async def start(self) -> None:
        async with AsyncAdmin({**self.security, "bootstrap.servers": self.bootstrap}) as admin:
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

    def _leading(self) -> bool:
        """This instance holds the lease with more than half its time left."""
        lease = self.state.lease
        return (
            lease is not None
            and lease.instance == self.instance
            and lease.expires_at_ms - time.time() * 1000 > self.lease_ms / 2
        )

    async def _follow(self) -> None:
        while True:
            leading = self._leading()
            if leading != self._paused:  # a leader's reads would only bring back its own writes
                (self.consumer.pause if leading else self.consumer.resume)(self.partition)
                self._paused = leading
            try:
                polled = await self.consumer.poll(timeout_ms=50 if leading else 500)
            except (KafkaError, KafkaClientError, OSError) as error:
                log.warning("event=schemas_read_failed error=%r", str(error))
                await asyncio.sleep(0.5)
                continue
            for records in polled.values():
                for record in records:
                    tag = dict(record.headers).get(WRITE_HEADER)
                    if tag in self._own:
                        self._own.discard(tag)  # staged: applied here when it was written
                    else:
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

    def writing(self) -> asyncio.Lock:
        """Held while a write is planned and appended, so that plans made here do not race."""
        return self._write_lock

    async def lead(self) -> None:
        """Make sure this instance holds the lease, with the state read to the end; NotLeader when another
        instance does. While its lease runs no other instance writes, so the state stays current from its
        own appends alone and no read is needed."""
        if self._leading():
            return
        await self.read_to_end()
        now = int(time.time() * 1000)
        lease = self.state.lease
        if lease is not None and lease.instance != self.instance and lease.expires_at_ms > now:
            raise NotLeader(lease)
        claim = {
            "instance": self.instance,
            "url": self.url,
            "claimed_at_ms": now,
            "expires_at_ms": now + self.lease_ms,
        }
        await self.append([({"keytype": "LEASE"}, claim)])
        lease = self.state.lease
        if lease is None:  # append() applied our claim, and a claim always replaces an empty lease
            raise RuntimeError(f"the lease claim in {self.topic} was written but not applied")
        if lease.instance != self.instance:
            raise NotLeader(lease)  # another instance's claim came first
        if lease.claimed_at_ms == now:
            log.info("event=schemas_lease_claimed instance=%s url=%s", self.instance, self.url)

    async def append(self, records: list[tuple[dict[str, Any], dict[str, Any] | None]]) -> None:
        """Write records and wait until the tail has read and applied them (for lease claims, whose outcome
        depends on what other instances wrote before them)."""
        try:
            async with asyncio.timeout(self.timeout_s):
                futures = [await self._send(key, value) for key, value in records]
                last = await futures[-1]
                async with self._advanced:
                    await self._advanced.wait_for(lambda: self.position > last.offset)
        except TimeoutError:
            raise errors.store_timeout(f"writing to {self.topic} took over {self.timeout_s} s") from None
        except (KafkaError, KafkaClientError, OSError) as error:
            raise errors.store_error(str(error)) from None

    async def stage(self, records: list[tuple[dict[str, Any], dict[str, Any] | None]]) -> None:
        """As the leader (under `writing()`, after `lead()`): apply records here at once and send them;
        `confirm` waits for their acknowledgement after the lock is released, so concurrent writes share
        the broker's round trips."""
        for key, value in records:
            self._sequence += 1
            tag = f"{self.instance}:{self._sequence}".encode()
            self._own.add(tag)
            self.state.apply(key, value)
            self._staged.append(await self._send(key, value, tag))

    def take_staged(self) -> list[Any]:
        staged, self._staged = self._staged, []
        return staged

    async def confirm(self, futures: list[Any]) -> None:
        """Wait for staged records' acknowledgement; when one fails, the state (which already holds them) is
        read again from the topic and the write reported failed."""
        try:
            async with asyncio.timeout(self.timeout_s):
                for future in futures:
                    await future
            return
        except TimeoutError:
            failure = errors.store_timeout(f"writing to {self.topic} took over {self.timeout_s} s")
        except (KafkaError, KafkaClientError, OSError) as error:
            failure = errors.store_error(str(error))
        log.error("event=schemas_write_failed error=%r then=reload_state_from_topic", failure.message)
        await self._reload()
        raise failure

    async def _reload(self) -> None:
        self.state.__dict__.update(RegistryState(default_level=self.state.default_level).__dict__)
        self._own.clear()
        self.position = 0
        self.consumer.seek_to_beginning(self.partition)
        await self.read_to_end()

    async def _send(self, key: dict[str, Any], value: dict[str, Any] | None, tag: bytes | None = None) -> Any:
        headers = [(WRITE_HEADER, tag)] if tag else None
        return await self.producer.send(
            self.topic, encode(value), key=encode(key), partition=0, headers=headers
        )
