"""The cluster as a client sees it: connections to every broker, and cached metadata kept fresh.

`ClusterClient` owns one `BrokerConnection` per broker (bootstrap addresses get negative ids until the
first Metadata answer names the real brokers), reconnects with exponential backoff
(`reconnect.backoff.ms` doubling up to `reconnect.backoff.max.ms`, with jitter), and keeps a
`ClusterMetadata` snapshot for the topics its owner cares about. Snapshots are immutable and replaced
whole, so code on any thread may read `client.metadata` without a lock.

Metadata is refreshed when it is older than `metadata.max.age.ms`, when a topic is added, and whenever
someone calls `request_update()`: producers and consumers do so on NOT_LEADER_OR_FOLLOWER,
UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE and friends, and a lost connection does it by itself.
Concurrent refreshes share one request; failed ones are retried after `retry.backoff.ms`, doubling.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import random
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from backbone.client.config import parse_bootstrap
from backbone.client.structs import TopicPartition
from backbone.protocol.api import ApiKey
from backbone.protocol.codec import decode_response
from backbone.protocol.errors import ErrorCode, KafkaError, error_for
from backbone.wire.connection import DEFAULT_MAX_RESPONSE_BYTES, BrokerConnection, Decoder, Encoder
from backbone.wire.errors import (
    ClientClosedError,
    ConfigError,
    KafkaClientError,
    KafkaConnectionError,
    KafkaTimeoutError,
    NoBrokersAvailable,
)
from backbone.wire.messages import encode_request
from backbone.wire.security import ClientSecurity, is_authentication_error

__all__ = ["BrokerInfo", "ClusterClient", "ClusterMetadata", "PartitionInfo", "TopicInfo", "backoff_ms"]

log = logging.getLogger(__name__)
T = TypeVar("T")


def backoff_ms(base_ms: int, max_ms: int, failures: int) -> float:
    """Exponential backoff with +-20% jitter, as the Java client computes it."""
    if failures <= 0 or base_ms <= 0:
        return 0.0
    value = min(base_ms * (2 ** (failures - 1)), max_ms)
    return value * random.uniform(0.8, 1.2)


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()
    error_code: int = 0


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    error_code: int
    partitions: Mapping[int, PartitionInfo]
    is_internal: bool = False
    available: tuple[int, ...] = ()
    """Partitions that have a leader (computed once: the producer asks for every unkeyed record)."""
    topic_id: str | None = None
    """Kafka's text form of the topic's id (Metadata v10+); a re-created topic gets a new one."""


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    """One Metadata answer: brokers, controller and the topics that were asked for."""

    cluster_id: str | None = None
    controller_id: int = -1
    brokers: Mapping[int, BrokerInfo] = field(default_factory=dict)
    topics: Mapping[str, TopicInfo] = field(default_factory=dict)
    created: float = 0.0
    """time.monotonic() when it arrived (0: never)."""

    def partitions_for(self, topic: str) -> list[int] | None:
        """The topic's partition ids, or None when the topic is unknown or in error."""
        info = self.topics.get(topic)
        if info is None or info.error_code or not info.partitions:
            return None
        return sorted(info.partitions)

    def available_partitions(self, topic: str) -> list[int]:
        info = self.topics.get(topic)
        return list(info.available) if info is not None else []

    def leader_for(self, tp: TopicPartition) -> int:
        """The leader's node id, or -1 when unknown."""
        info = self.topics.get(tp.topic)
        part = info.partitions.get(tp.partition) if info is not None else None
        return part.leader if part is not None else -1

    def partition(self, tp: TopicPartition) -> PartitionInfo | None:
        info = self.topics.get(tp.topic)
        return info.partitions.get(tp.partition) if info is not None else None


def _topic_id_text(topic_id: uuid.UUID | None) -> str | None:
    """Kafka's text form of a topic id (URL-safe base64, no padding); None for none or the zero id."""
    if topic_id is None or topic_id.int == 0:
        return None
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode("ascii")


def parse_metadata(response: Any) -> ClusterMetadata:
    """A ClusterMetadata from a kio MetadataResponse of any version."""
    brokers = {
        int(b.node_id): BrokerInfo(int(b.node_id), b.host, int(b.port), getattr(b, "rack", None))
        for b in response.brokers
    }
    topics = {}
    for topic in response.topics:
        name = topic.name or ""
        partitions = {
            int(p.partition_index): PartitionInfo(
                topic=name,
                partition=int(p.partition_index),
                leader=int(p.leader_id),
                leader_epoch=int(getattr(p, "leader_epoch", -1)),
                replicas=tuple(int(r) for r in p.replica_nodes),
                isr=tuple(int(r) for r in p.isr_nodes),
                offline_replicas=tuple(int(r) for r in getattr(p, "offline_replicas", ())),
                error_code=int(p.error_code),
            )
            for p in topic.partitions
        }
        available = tuple(sorted(p for p, part in partitions.items() if part.leader >= 0))
        internal = bool(getattr(topic, "is_internal", False))
        topic_id = _topic_id_text(getattr(topic, "topic_id", None))
        topics[name] = TopicInfo(name, int(topic.error_code), partitions, internal, available, topic_id)
    return ClusterMetadata(
        cluster_id=getattr(response, "cluster_id", None),
        controller_id=int(getattr(response, "controller_id", -1)),
        brokers=brokers,
        topics=topics,
        created=time.monotonic(),
    )


class ClusterClient:
    """Connections and metadata shared by one producer, consumer or admin client."""

    def __init__(
        self,
        config: Mapping[str, Any],
        *,
        max_in_flight: int = 5,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        allow_auto_topic_creation: bool = False,
    ) -> None:
        self.config = config
        self.client_id: str = config["client.id"]
        self.request_timeout_ms: int = config["request.timeout.ms"]
        try:
            self.security = ClientSecurity.from_config(config)
        except (ValueError, OSError) as error:
            raise ConfigError(f"security settings: {error}") from None
        self._bootstrap = [parse_bootstrap(server) for server in config["bootstrap.servers"]]
        self._max_in_flight = max_in_flight
        self._max_response_bytes = max_response_bytes
        self._auto_create = allow_auto_topic_creation
        self.metadata = ClusterMetadata()
        self.topics: set[str] = set()
        self._connections: dict[int, BrokerConnection] = {}
        self._failures: dict[int, tuple[int, float]] = {}  # node -> (consecutive failures, retry at)
        self._refreshing: asyncio.Task[ClusterMetadata] | None = None
        self._update_wanted = asyncio.Event()
        self._updated = asyncio.Condition()
        self._refresh_failures = 0
        self._refresher: asyncio.Task[None] | None = None
        self._closed = False
        self.listeners: list[Callable[[], None]] = []
        """Called (on the event loop) after every metadata update."""

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the background metadata refresher (no network I/O until something is asked)."""
        if self._refresher is None:
            self._refresher = asyncio.ensure_future(self._refresh_loop())

    async def close(self) -> None:
        self._closed = True
        tasks = [t for t in (self._refresher, self._refreshing) if t is not None and not t.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        connections = list(self._connections.values())
        self._connections.clear()
        await asyncio.gather(*(c.close() for c in connections))

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("the client is closed; create a new one")

    # -- connections ------------------------------------------------------------------------------

    def _address(self, node_id: int) -> tuple[str, int]:
        if node_id < 0:
            return self._bootstrap[-node_id - 1]
        broker = self.metadata.brokers.get(node_id)
        if broker is None:
            raise KafkaConnectionError(f"broker {node_id} is not in the cluster metadata; refreshing it")
        return broker.host, broker.port

    def connection_if_ready(self, node_id: int) -> BrokerConnection | None:
        conn = self._connections.get(node_id)
        return conn if conn is not None and conn.is_ready else None

    def backoff_remaining(self, node_id: int) -> float:
        """Seconds before `node_id` may be dialled again after failed attempts."""
        _, retry_at = self._failures.get(node_id, (0, 0.0))
        return max(0.0, retry_at - time.monotonic())

    async def connection(self, node_id: int) -> BrokerConnection:
        """A ready connection to `node_id`, connecting (after any backoff) when needed."""
        self._check_open()
        conn = self._connections.get(node_id)
        if conn is None or conn.is_closed:
            wait = self.backoff_remaining(node_id)
            if wait > 0:
                await asyncio.sleep(wait)
                self._check_open()
                conn = self._connections.get(node_id)
        if (conn is None or conn.is_closed) and node_id >= 0 and node_id not in self.metadata.brokers:
            # A broker named by someone else (a config resource, a leader) and not connected: its address
            # comes from fresh metadata. A live connection needs none, and asking here while a refresh runs
            # (a restarted broker may briefly answer with no brokers) would wait on that refresh itself.
            await self.refresh_metadata()
        try:
            if conn is None or conn.is_closed:
                host, port = self._address(node_id)
                conn = BrokerConnection(
                    host,
                    port,
                    node_id,
                    client_id=self.client_id,
                    request_timeout_ms=self.request_timeout_ms,
                    connect_timeout_ms=self.config["socket.connection.setup.timeout.ms"],
                    max_in_flight=self._max_in_flight,
                    max_response_bytes=self._max_response_bytes,
                    on_close=self._connection_closed,
                    security=self.security,
                )
                self._connections[node_id] = conn
            await conn.connect()
        except (KafkaConnectionError, KafkaError):
            failures = self._failures.get(node_id, (0, 0.0))[0] + 1
            delay = backoff_ms(
                self.config["reconnect.backoff.ms"], self.config["reconnect.backoff.max.ms"], failures
            )
            self._failures[node_id] = (failures, time.monotonic() + delay / 1000)
            raise
        self._failures.pop(node_id, None)
        return conn

    def _connection_closed(self, conn: BrokerConnection, error: Exception | None) -> None:
        if self._connections.get(conn.node_id) is conn:
            del self._connections[conn.node_id]
        if not self._closed and conn.node_id >= 0:
            self.request_update()

    def _candidates(self) -> list[int]:
        """Nodes to ask for metadata: connected ones (least busy first), other brokers, bootstrap."""
        ready = sorted((c for c in self._connections.values() if c.is_ready), key=lambda c: c.in_flight)
        order = [c.node_id for c in ready]
        known = [n for n in self.metadata.brokers if n not in order]
        random.shuffle(known)
        bootstrap = [-(i + 1) for i in range(len(self._bootstrap))]
        random.shuffle(bootstrap)
        candidates = order + known + [n for n in bootstrap if n not in order]
        return sorted(candidates, key=lambda n: self.backoff_remaining(n) > 0)  # stable: ready ones first

    async def any_connection(self, timeout_ms: int | None = None) -> BrokerConnection:
        """A connection to any broker, trying them in `_candidates` order until `timeout_ms` passes."""
        timeout_ms = self.request_timeout_ms if timeout_ms is None else timeout_ms
        deadline = time.monotonic() + timeout_ms / 1000
        errors: list[str] = []
        attempt = 0
        while True:
            for node_id in self._candidates():
                if time.monotonic() >= deadline:
                    break
                try:
                    async with asyncio.timeout(max(deadline - time.monotonic(), 0.001)):
                        return await self.connection(node_id)
                except (KafkaConnectionError, KafkaError, TimeoutError) as error:
                    if is_authentication_error(error):
                        raise  # credentials the broker refused do not get better with retries
                    errors.append(str(error))
            attempt += 1
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                shown = "; ".join(errors[-3:]) or "no attempt finished"
                raise NoBrokersAvailable(
                    f"no broker reachable within {timeout_ms} ms (bootstrap.servers="
                    f"{','.join(self.config['bootstrap.servers'])}): {shown}. Check that the brokers run "
                    "and that bootstrap.servers and the brokers' advertised listeners are reachable from here"
                )
            delay = backoff_ms(
                self.config["reconnect.backoff.ms"], self.config["reconnect.backoff.max.ms"], attempt
            )
            await asyncio.sleep(min(delay / 1000, remaining))

    async def request(
        self,
        node_id: int | None,
        api_key: int,
        encode: Encoder,
        decode: Decoder[T],
        *,
        timeout_ms: int | None = None,
    ) -> T:
        """One request to `node_id` (None: any broker)."""
        conn = await (self.any_connection() if node_id is None else self.connection(node_id))
        return await conn.request(api_key, encode, decode, timeout_ms=timeout_ms)

    async def request_kio(
        self, node_id: int | None, api_key: int, *, request_timeout_ms: int | None = None, **values: Any
    ) -> Any:
        """One kio request of `api_key` built from `values` to `node_id` (None: any broker); its response."""
        conn = await (self.any_connection() if node_id is None else self.connection(node_id))
        return await conn.request_kio(api_key, request_timeout_ms=request_timeout_ms, **values)

    # -- metadata ---------------------------------------------------------------------------------

    def add_topics(self, topics: Iterable[str]) -> None:
        """Track these topics too; metadata is refreshed if any is new."""
        new = set(topics) - self.topics
        if new:
            self.topics |= new
            self.request_update()

    def request_update(self) -> None:
        """Ask the background refresher for fresh metadata (it respects the retry backoff)."""
        self._update_wanted.set()

    async def refresh_metadata(self, timeout_ms: int | None = None) -> ClusterMetadata:
        """Fetch metadata for the tracked topics now; concurrent callers share one request."""
        self._check_open()
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.ensure_future(self._fetch_metadata(timeout_ms))
        return await asyncio.shield(self._refreshing)

    async def fetch_metadata(
        self, topics: Iterable[str] | None, timeout_ms: int | None = None, *, auto_create: bool = False
    ) -> ClusterMetadata:
        """One Metadata request for `topics` (None: every topic), without touching the cache."""
        metadata, _ = await self._metadata_request(topics, timeout_ms, auto_create)
        return metadata

    async def _metadata_request(
        self, topics: Iterable[str] | None, timeout_ms: int | None, auto_create: bool
    ) -> tuple[ClusterMetadata, BrokerConnection]:
        rows = None if topics is None else [{"name": name} for name in sorted(topics)]
        conn = await self.any_connection(timeout_ms)
        response = await conn.request(
            ApiKey.METADATA,
            lambda version: encode_request(
                ApiKey.METADATA, version, topics=rows, allow_auto_topic_creation=auto_create
            ),
            lambda version, frame, pos: decode_response(ApiKey.METADATA, version, frame, pos),
            timeout_ms=timeout_ms,
        )
        return parse_metadata(response), conn

    async def _fetch_metadata(self, timeout_ms: int | None) -> ClusterMetadata:
        metadata, conn = await self._metadata_request(self.topics, timeout_ms, self._auto_create)
        self.metadata = metadata
        self._refresh_failures = 0
        self._close_bootstrap_connections(conn)
        async with self._updated:
            self._updated.notify_all()
        for listener in self.listeners:
            listener()
        log.debug(
            "event=metadata_updated brokers=%d topics=%d controller=%s",
            len(metadata.brokers),
            len(metadata.topics),
            metadata.controller_id,
        )
        return metadata

    def _close_bootstrap_connections(self, keep: BrokerConnection) -> None:
        # Once brokers are known by id, bootstrap connections are duplicates of some of them.
        for node_id, conn in list(self._connections.items()):
            if node_id < 0 and conn is not keep and self.metadata.brokers:
                conn.abort()

    async def _refresh_loop(self) -> None:
        # Never more often than retry.backoff.ms, even with metadata.max.age.ms=0.
        max_age = max(self.config["metadata.max.age.ms"], self.config["retry.backoff.ms"], 1) / 1000
        while not self._closed:
            age = time.monotonic() - self.metadata.created
            try:
                async with asyncio.timeout(max(max_age - age, 0.0) if self.metadata.created else max_age):
                    await self._update_wanted.wait()
            except TimeoutError:
                pass  # metadata.max.age.ms passed: refresh anyway
            if self._refresh_failures:
                delay = backoff_ms(
                    self.config["retry.backoff.ms"],
                    self.config["retry.backoff.max.ms"],
                    self._refresh_failures,
                )
                await asyncio.sleep(delay / 1000)
            self._update_wanted.clear()
            try:
                await self.refresh_metadata()
            except (KafkaClientError, KafkaError) as error:
                self._refresh_failures += 1
                log.warning(
                    "event=metadata_refresh_failed attempt=%d error=%s", self._refresh_failures, error
                )
                self._update_wanted.set()

    async def wait_for_update(self, timeout: float) -> None:
        """Wait until the next metadata answer arrives (or `timeout` seconds pass)."""
        self.request_update()
        async with self._updated:
            try:
                async with asyncio.timeout(timeout):
                    await self._updated.wait()
            except TimeoutError:
                return

    async def wait_for_topic(self, topic: str, timeout_ms: int, partition: int | None = None) -> list[int]:
        """The topic's partitions, waiting (and refreshing) until known or `timeout_ms` passes; with
        `partition`, until they include it (a topic grown a moment ago), or the time is up."""
        self.add_topics([topic])
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            partitions = self.metadata.partitions_for(topic)
            if partitions is not None and (partition is None or partition in partitions):
                return partitions
            if partitions is not None and time.monotonic() >= deadline:
                return partitions
            info = self.metadata.topics.get(topic)
            if info is not None and info.error_code and not error_for(info.error_code).retriable:
                raise error_for(info.error_code, f"topic {topic!r}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                why = (
                    ErrorCode(info.error_code).name
                    if info is not None and info.error_code
                    else "not in metadata"
                )
                raise KafkaTimeoutError(
                    f"topic {topic!r} not available after {timeout_ms} ms ({why}); create it first, "
                    "or let the broker auto-create topics"
                )
            await self.wait_for_update(remaining)
