"""An in-process fake Kafka cluster speaking the real wire protocol, for testing code that uses the client.

`FakeCluster` listens on loopback ports (one per fake broker), keeps partitions in memory and answers the
requests this client sends (ApiVersions, Metadata, Produce, Fetch, ListOffsets, InitProducerId and the
admin APIs) with real Kafka frames, so everything from framing to retries runs as it would against a broker.
It is no broker: no replication, no persistence, one log per partition. What it adds is control:
leaders can be moved (`move_leader`), errors injected per API and partition (`inject_error`), ApiVersions
limited (`api_versions_max`, `advertised`), connections dropped, and every request is recorded
(`requests`). The client's own unit tests use it; applications may too.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from backbone.protocol.api import ApiKey
from backbone.protocol.codec import decode_request, encode_response_frame
from backbone.protocol.errors import ErrorCode, KafkaError
from backbone.protocol.framing import ConnectionClosed, FrameError, encode_frame, read_frame
from backbone.protocol.headers import decode_request_header, encode_response_header, response_header_version
from backbone.protocol.record_batch import check_batch, set_base_offset
from backbone.protocol.records import DecodedBatch, decode_batch
from backbone.wire.chunks import frame_chunks
from backbone.wire.fetch import FetchPartitionResult, encode_fetch_response
from backbone.wire.messages import CLIENT_VERSIONS, build_response
from backbone.wire.produce import ProducePartitionResult, decode_produce_request, encode_produce_response
from tests.helpers import fake_cluster_admin as _fake_admin

__all__ = ["FakeCluster", "FakePartition", "ThreadedFakeCluster"]

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass
class FakePartition:
    leader: int
    batches: list[bytes] = field(default_factory=list)
    """Stored batches with their base offsets written in."""
    offsets: list[int] = field(default_factory=list)
    """Base offset of each stored batch."""
    next_offset: int = 0
    log_start_offset: int = 0
    producers: dict[int, tuple[int, int, list[tuple[int, int, int]]]] = field(default_factory=dict)
    """producer id -> (epoch, last sequence, [(first sequence, last sequence, base offset)])."""

    def decoded(self) -> Iterator[DecodedBatch]:
        for batch in self.batches:
            yield decode_batch(batch)


class FakeCluster:
    """`brokers` fake brokers on 127.0.0.1 sharing one in-memory state. Use as an async context manager."""

    def __init__(
        self,
        brokers: int = 1,
        *,
        api_versions_max: int = 4,
        advertised: dict[int, tuple[int, int]] | None = None,
        auto_create_topics: bool = False,
        cluster_id: str = "fake-cluster",
    ) -> None:
        self.node_ids = list(range(brokers))
        self.api_versions_max = api_versions_max
        self.advertised = advertised or {int(k): (v.min, v.max) for k, v in CLIENT_VERSIONS.items()}
        self.auto_create_topics = auto_create_topics
        self.cluster_id = cluster_id
        self.topics: dict[str, dict[int, FakePartition]] = {}
        self.configs: dict[tuple[int, str], dict[str, str]] = {}
        self.requests: list[tuple[int, int, int]] = []
        """(node id, API key, version) of every request received, in order."""
        self.errors: dict[tuple[int, str | None, int | None], collections.deque[int]] = {}
        self.ports: dict[int, int] = {}
        self._servers: list[asyncio.AbstractServer] = []
        self._writers: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[Any]] = set()
        self._appended = asyncio.Condition()
        self._next_producer_id = 1000
        self.lose_produce_responses = 0
        """Appends of this many Produce requests happen but their answers are lost (the connection closes)."""
        self.produce_answers = asyncio.Event()
        """Produce requests are appended, then answered only while this is set (clear it: a broker that
        takes requests and hangs; set it again: the held answers go out, late)."""
        self.produce_answers.set()

    # -- control ----------------------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{port}" for port in self.ports.values())

    async def start(self) -> FakeCluster:
        for node_id in self.node_ids:
            server = await asyncio.start_server(
                lambda r, w, n=node_id: self._serve(n, r, w), "127.0.0.1", self.ports.get(node_id, 0)
            )
            self._servers.append(server)
            self.ports[node_id] = server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        for server in self._servers:
            server.close()
        self.drop_connections()
        handlers = list(self._handlers)
        for handler in handlers:
            handler.cancel()  # long-polling fetches would otherwise outlive the cluster
        await asyncio.gather(*handlers, return_exceptions=True)
        for server in self._servers:
            await server.wait_closed()
        self._servers.clear()

    async def __aenter__(self) -> FakeCluster:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    def create_topic(self, name: str, partitions: int = 1, leaders: list[int] | None = None) -> None:
        self.topics[name] = {
            p: FakePartition(leader=(leaders[p] if leaders else self.node_ids[p % len(self.node_ids)]))
            for p in range(partitions)
        }

    def move_leader(self, topic: str, partition: int, node_id: int) -> None:
        self.topics[topic][partition].leader = node_id

    def inject_error(
        self,
        api_key: int,
        error_code: int,
        count: int = 1,
        topic: str | None = None,
        partition: int | None = None,
    ) -> None:
        """The next `count` matching partition results of `api_key` (Produce, Fetch) answer `error_code`."""
        self.errors.setdefault((int(api_key), topic, partition), collections.deque()).extend(
            [error_code] * count
        )

    def drop_connections(self) -> None:
        for writer in list(self._writers):
            writer.close()

    def append_raw(self, topic: str, partition: int, batch: bytes) -> int:
        """Store a batch as its leader would (control and transactional batches included); its base offset."""
        part = self.topics[topic][partition]
        result = self._append(part.leader, topic, partition, batch)
        if result.error_code:
            raise ValueError(f"cannot append to {topic}-{partition}: error {result.error_code}")
        return result.base_offset

    def partition(self, topic: str, partition: int) -> FakePartition:
        return self.topics[topic][partition]

    def values(self, topic: str, partition: int) -> list[bytes | None]:
        """The values stored in a partition, in offset order."""
        return [record[3] for batch in self.partition(topic, partition).decoded() for record in batch.records]

    def _take_error(self, api_key: int, topic: str, partition: int) -> int:
        for key in ((api_key, topic, partition), (api_key, topic, None), (api_key, None, None)):
            queue = self.errors.get(key)
            if queue:
                return queue.popleft()
        return 0

    # -- serving ----------------------------------------------------------------------------------

    async def _serve(self, node_id: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        handler = asyncio.current_task()
        if handler is not None:
            self._handlers.add(handler)
        try:
            while True:
                frame = await read_frame(reader)
                header, pos = decode_request_header(frame)
                self.requests.append((node_id, header.api_key, header.api_version))
                response = await self._dispatch(node_id, header.api_key, header.api_version, frame, pos)
                if response is None:
                    continue
                if isinstance(response, list):
                    chunks = frame_chunks(
                        header.correlation_id,
                        response_header_version(header.api_key, header.api_version),
                        response,
                    )
                    writer.writelines([bytes(chunk) for chunk in chunks])  # type: ignore[arg-type]
                elif isinstance(response, bytes):
                    head = encode_response_header(
                        header.correlation_id, response_header_version(header.api_key, header.api_version)
                    )
                    writer.write(encode_frame(head + response))
                else:
                    writer.write(encode_response_frame(header.correlation_id, response))
                await writer.drain()
        except (ConnectionClosed, ConnectionError):
            pass  # the client went away: the normal end of a connection
        except asyncio.CancelledError:
            # The loop is shutting down. Ending normally, because asyncio (3.11) reports a cancelled
            # connection handler as an "unhandled exception" of the server.
            log.debug("fake broker connection handler cancelled node=%d", node_id)
        except (FrameError, KafkaError) as error:
            log.warning("fake broker closing a connection node=%d error=%s", node_id, error)
        except Exception:
            log.exception(
                "fake broker failed node=%d", node_id
            )  # a bug in the fake: show it, end the connection
        finally:
            self._writers.discard(writer)
            if handler is not None:
                self._handlers.discard(handler)
            writer.close()

    async def _dispatch(self, node_id: int, api_key: int, version: int, frame: bytes, pos: int) -> Any:
        if api_key == ApiKey.API_VERSIONS:
            return self._api_versions(version)
        if api_key == ApiKey.PRODUCE:
            return await self._produce(node_id, version, frame, pos)
        if api_key == ApiKey.FETCH:
            return await self._fetch(node_id, version, decode_request(api_key, version, frame, pos))
        request = decode_request(api_key, version, frame, pos)
        if api_key == ApiKey.METADATA:
            return self._metadata(version, request)
        return _fake_admin.handle(self, node_id, api_key, version, request)

    def _api_versions(self, version: int) -> Any:
        if version > self.api_versions_max:
            row = [{"api_key": ApiKey.API_VERSIONS, "min_version": 0, "max_version": self.api_versions_max}]
            return build_response(
                ApiKey.API_VERSIONS, 0, error_code=ErrorCode.unsupported_version, api_keys=row
            )
        rows = [
            {"api_key": k, "min_version": low, "max_version": high}
            for k, (low, high) in self.advertised.items()
        ]
        return build_response(ApiKey.API_VERSIONS, version, error_code=0, api_keys=rows)

    def _metadata(self, version: int, request: Any) -> Any:
        names = list(self.topics) if request.topics is None else [t.name for t in request.topics]
        topics = []
        for name in names:
            if name not in self.topics and self.auto_create_topics and request.allow_auto_topic_creation:
                self.create_topic(name)
            parts = self.topics.get(name)
            if parts is None:
                topics.append(
                    {"name": name, "error_code": ErrorCode.unknown_topic_or_partition, "partitions": []}
                )
                continue
            rows = [
                {
                    "error_code": 0,
                    "partition_index": p,
                    "leader_id": part.leader,
                    "leader_epoch": 0,
                    "replica_nodes": [part.leader],
                    "isr_nodes": [part.leader],
                }
                for p, part in parts.items()
            ]
            topics.append({"name": name, "error_code": 0, "partitions": rows})
        brokers = [{"node_id": n, "host": "127.0.0.1", "port": port} for n, port in self.ports.items()]
        return build_response(
            ApiKey.METADATA,
            version,
            brokers=brokers,
            cluster_id=self.cluster_id,
            controller_id=self.node_ids[0],
            topics=topics,
        )

    # -- produce ----------------------------------------------------------------------------------

    async def _produce(self, node_id: int, version: int, frame: bytes, pos: int) -> bytes | None:
        request = decode_produce_request(frame, version, pos)
        results = []
        for topic in request.topics:
            rows = []
            for part in topic.partitions:
                rows.append(self._append(node_id, topic.name, part.index, bytes(part.records or b"")))
            results.append((topic.name, rows))
        if results:
            async with self._appended:
                self._appended.notify_all()
        if request.acks == 0:
            return None
        await self.produce_answers.wait()
        if self.lose_produce_responses > 0:
            self.lose_produce_responses -= 1
            raise ConnectionResetError("fake broker: answer lost on purpose")
        return encode_produce_response(version, results)

    def _append(self, node_id: int, topic: str, index: int, records: bytes) -> ProducePartitionResult:
        part = self.topics.get(topic, {}).get(index)
        if part is None:
            return ProducePartitionResult(index, ErrorCode.unknown_topic_or_partition)
        if part.leader != node_id:
            return ProducePartitionResult(index, ErrorCode.not_leader_or_follower)
        injected = self._take_error(ApiKey.PRODUCE, topic, index)
        if injected:
            return ProducePartitionResult(index, injected, log_start_offset=part.log_start_offset)
        header = check_batch(records)
        if header.producer_id >= 0 and not header.is_control:
            problem = self._check_sequence(part, header.producer_id, header.producer_epoch, header)
            if isinstance(problem, ProducePartitionResult):
                problem.index = index
                return problem
        stored = bytearray(records)
        set_base_offset(stored, 0, part.next_offset)
        base = part.next_offset
        part.batches.append(bytes(stored))
        part.offsets.append(base)
        part.next_offset += header.last_offset_delta + 1
        return ProducePartitionResult(index, 0, base, log_start_offset=part.log_start_offset)

    @staticmethod
    def _check_sequence(part: FakePartition, producer_id: int, epoch: int, header: Any) -> Any:
        """As a Kafka leader checks an idempotent batch: a duplicate, a bad epoch or sequence, or None."""
        known = part.producers.get(producer_id)
        recent: list[tuple[int, int, int]] = []
        if known is not None:
            known_epoch, last, recent = known
            for first_seq, last_seq, offset in recent:
                if epoch == known_epoch and (first_seq, last_seq) == (
                    header.base_sequence,
                    header.last_sequence,
                ):
                    return ProducePartitionResult(0, 0, offset, log_start_offset=part.log_start_offset)
            if epoch < known_epoch:
                return ProducePartitionResult(0, ErrorCode.invalid_producer_epoch)
            expected = 0 if epoch > known_epoch else last + 1
            if header.base_sequence != expected:
                return ProducePartitionResult(0, ErrorCode.out_of_order_sequence_number)
            if epoch > known_epoch:
                recent = []
        recent = [*recent[-4:], (header.base_sequence, header.last_sequence, part.next_offset)]
        part.producers[producer_id] = (epoch, header.last_sequence, recent)
        return None

    # -- fetch ------------------------------------------------------------------------------------

    async def _fetch(self, node_id: int, version: int, request: Any) -> list[Any]:
        deadline = asyncio.get_running_loop().time() + request.max_wait.total_seconds()
        while True:
            topics, size = self._read(node_id, request)
            remaining = deadline - asyncio.get_running_loop().time()
            if size >= max(request.min_bytes, 1) or remaining <= 0:
                return encode_fetch_response(version, topics)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining), self._appended:
                    await self._appended.wait()

    def _read(self, node_id: int, request: Any) -> tuple[list[tuple[str, list[FetchPartitionResult]]], int]:
        total = 0
        topics = []
        for topic in request.topics:
            rows = []
            for wanted in topic.partitions:
                part = self.topics.get(topic.topic, {}).get(wanted.partition)
                row = FetchPartitionResult(wanted.partition)
                rows.append(row)
                if part is None:
                    row.error_code = ErrorCode.unknown_topic_or_partition
                    continue
                row.high_watermark = row.last_stable_offset = part.next_offset
                row.log_start_offset = part.log_start_offset
                injected = self._take_error(ApiKey.FETCH, topic.topic, wanted.partition)
                if part.leader != node_id or injected:
                    row.error_code = injected or ErrorCode.not_leader_or_follower
                    continue
                offset = wanted.fetch_offset
                if offset < part.log_start_offset or offset > part.next_offset:
                    row.error_code = ErrorCode.offset_out_of_range
                    continue
                chunks: list[bytes] = []
                size = 0
                for base, batch in zip(part.offsets, part.batches, strict=True):
                    last = base + check_batch(batch).last_offset_delta
                    if last < offset:
                        continue
                    if chunks and size + len(batch) > wanted.partition_max_bytes:
                        break
                    chunks.append(batch)
                    size += len(batch)
                row.records = b"".join(chunks)
                total += size
            topics.append((topic.topic, rows))
        return topics, total


class ThreadedFakeCluster:
    """A FakeCluster on its own event-loop thread, for testing blocking code (the sync clients).

    with ThreadedFakeCluster(brokers=1) as fake:
        fake.call(fake.cluster.create_topic, "events", 3)
        producer = Producer(bootstrap_servers=fake.bootstrap)
    """

    def __init__(self, brokers: int = 1, **options: Any) -> None:
        self.cluster = FakeCluster(brokers, **options)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fake-cluster", daemon=True)

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap

    def call(self, function: Callable[..., T], *args: Any) -> T:
        """Run `function(*args)` on the fake's loop thread and return its result."""

        async def run() -> T:
            return function(*args)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(30)

    def __enter__(self) -> ThreadedFakeCluster:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.cluster.start(), self._loop).result(30)
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            asyncio.run_coroutine_threadsafe(self.cluster.stop(), self._loop).result(30)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(30)
            self._loop.close()
