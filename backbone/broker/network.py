"""The broker's connection layer: listeners, connections, and in-order request dispatch.

A `Listener` serves one endpoint of `listeners`. Each accepted socket becomes a `Connection` (an asyncio
BufferedProtocol): the protocol room's FrameDecoder hands the transport the buffer to receive into (a large
request's own body, so the socket's bytes land in place) and splits out frames, enforcing
`socket.request.max.bytes` from the size prefix before a body is buffered; frames are queued and handled one
at a time by the connection's own task, so responses go out in request order however many requests a client
pipelines. Reading pauses while too many requests wait, which bounds a connection's memory. Answers to
pipelined requests are written together: one system call for the requests read in one turn of the event loop
(librdkafka keeps many Produce requests in flight; one `send` per answer was the largest cost of each).

Security hooks in here (the pieces are in `backbone.broker.security`): a listener's `tls` context wraps its
transport (SSL, SASL_SSL), and a connection's `authenticator` learns of the connection once it is made
(a client certificate's principal), sees every request before dispatch (SASL lets nothing else through
before authentication) and may take the raw tokens of a v0 SASL handshake; PLAINTEXT's lets everything
through.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from backbone.broker.config import Endpoint
from backbone.broker.handlers.common import throttle
from backbone.broker.quotas import charge_request_time, quotas_of
from backbone.protocol import codec
from backbone.protocol.api import ApiKey, ApiTable
from backbone.protocol.entities import error_answer
from backbone.protocol.errors import ErrorCode, KafkaError, UnsupportedVersionError
from backbone.protocol.framing import FrameDecoder, FrameError
from backbone.protocol.headers import RequestHeader, decode_request_header, response_header_version
from backbone.protocol.nulls import check_no_illegal_nulls
from backbone.wire.chunks import Chunk, frame_chunks

if TYPE_CHECKING:
    from backbone.broker.connection_limits import ConnectionLimits
    from backbone.broker.quotas import QuotaManager
    from backbone.broker.request_memory import RequestMemory

log = logging.getLogger(__name__)

# Requests, and bytes of requests, one connection may have waiting before the broker stops reading from it
# (one request larger than the byte bound is still taken: it waits alone).
MAX_QUEUED_REQUESTS = 64
MAX_QUEUED_BYTES = 32 * 1024 * 1024
# Answered before a principal is known: their time is not charged to request_percentage.
QUOTA_EXEMPT_APIS = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
# How much of a refused request its log line shows (hex): the header and the start of the body.
HEX_DUMP_BYTES = 64
# Answers to pipelined requests are held back and written together, up to this many bytes at a time.
COALESCE_BYTES = 64 * 1024


@dataclass(slots=True)
class RequestContext:
    """Everything a handler knows about one request."""

    header: RequestHeader
    frame: memoryview
    body_offset: int
    connection: Connection
    remote_wait_s: float = 0.0
    """Time the handler spent waiting for other brokers or for data (acks=all, a long-polled fetch)."""
    started: float = 0.0
    """When the handler began (time.monotonic())."""
    throttle_ms: int | None = None
    """Set by a handler that charged the request to its quotas itself (Produce, Fetch); 0: not throttled."""

    @property
    def api_version(self) -> int:
        return self.header.api_version

    def decode(self) -> Any:
        """The request body as a kio entity (InvalidRequestError when it cannot be read)."""
        entity = codec.decode_request(
            self.header.api_key, self.header.api_version, self.frame, self.body_offset
        )
        check_no_illegal_nulls(entity)
        return entity


# A handler answers with a kio entity, with ready body chunks (fast paths), or None (no response:
# Produce with acks=0).
HandlerResult = Any | list[Chunk] | None
Handler = Callable[[RequestContext], Awaitable[HandlerResult]]


class RegionSender:
    """Writes records regions (file, position, length) to a transport; the fetch path provides one."""

    def inline(self, connection: Connection, region: Any) -> bytes | None:
        """The region's bytes when it is small enough to go out inside the answer's one write, else None."""
        return None

    async def send(self, connection: Connection, region: Any) -> None:  # pragma: no cover - interface
        raise NotImplementedError


@dataclass
class Principal:
    """Who is on the other end; ANONYMOUS until an authenticator says otherwise."""

    name: str = "ANONYMOUS"
    attributes: dict[str, str] = field(default_factory=dict)


class PassThroughAuthenticator:
    """PLAINTEXT: every request is allowed as the anonymous principal."""

    expects_raw_token = False

    def connected(self, connection: Connection) -> None:
        pass

    async def raw_token(self, connection: Connection, frame: memoryview) -> None:  # pragma: no cover
        raise NotImplementedError

    def admit(self, connection: Connection, header: RequestHeader) -> bool:
        return True


class Connection(asyncio.BufferedProtocol):
    def __init__(self, listener: Listener) -> None:
        self.listener = listener
        self.api_table = listener.api_table
        self.decoder = FrameDecoder(listener.max_request_bytes)
        self.queue: collections.deque[tuple[memoryview, float]] = collections.deque()  # frame, arrival
        self.queued_bytes = 0
        self.ready = asyncio.Event()
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.principal = Principal()
        self.authenticator = listener.authenticator_factory()
        self.closed = False
        self._gone = asyncio.Event()  # set once closed: ends a throttle's wait
        self._writable = asyncio.Event()
        self._writable.set()
        self._unsent: list[bytes | bytearray | memoryview] = []  # answers held back (see write_chunks)
        self._unsent_bytes = 0
        self._reading_paused = False
        self.held_bytes = 0  # charged to the broker's request memory (request_memory.py)
        self.reserved = 0  # of which: the unfinished large frame's reservation
        self._waiting_for_memory = False
        self._muted = False  # throttled by a quota (see _mute)
        self._task: asyncio.Task[None] | None = None
        self.ip = "?"
        self.counted = False  # by the listener's connection limits
        self.last_active = time.monotonic()

    # -- asyncio.BufferedProtocol ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses but have its methods
        self.transport = transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.ip = peer[0] if peer else "?"
        limits = self.listener.limits
        if limits is not None and not limits.admit(self.ip):
            self.closed = True
            transport.abort()
            return
        self.counted = limits is not None
        self.listener.connections.add(self)
        self.authenticator.connected(self)
        self._task = asyncio.get_running_loop().create_task(self._serve(), name=f"connection {self.peer}")

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.decoder.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        if self.closed:  # an SSL transport may still deliver bytes while it shuts down
            return
        try:
            frames = self.decoder.buffer_updated(nbytes)
        except FrameError as exc:
            log.warning(
                "event=bad_frame listener=%s peer=%s error=%r", self.listener.name, self.peer, str(exc)
            )
            self.close()
            return
        if frames:
            arrived = time.monotonic()
            self.last_active = arrived  # only whole requests count (connection_limits.py)
            self.queue.extend([(frame, arrived) for frame in frames])
            self.queued_bytes += sum(frame.nbytes for frame in frames)
            self.ready.set()
        if self.listener.memory is not None:
            self._charge(self.listener.memory, frames)
        self._update_reading()

    def eof_received(self) -> bool | None:
        self.close()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if self.counted and self.listener.limits is not None:
            self.counted = False
            self.listener.limits.release(self.ip)
        self.closed = True
        self.listener.connections.discard(self)
        self._release(self.held_bytes)
        if self.listener.memory is not None:
            self.listener.memory.waiting.discard(self)
        self.ready.set()
        self._gone.set()
        self._writable.set()

    async def drained(self) -> None:
        """Return once the transport's buffer is below its high-water mark (or the connection closed)."""
        if not self._writable.is_set():
            await self._writable.wait()

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    # -- serving ---------------------------------------------------------------------------------

    def _queue_full(self) -> bool:
        return len(self.queue) >= MAX_QUEUED_REQUESTS or self.queued_bytes >= MAX_QUEUED_BYTES

    def _update_reading(self) -> None:
        """Read while the queue has room, the broker's request memory has bytes for this connection and no
        quota mutes it."""
        pause = self._queue_full() or self._waiting_for_memory or self._muted
        if pause != self._reading_paused and self.transport is not None and not self.closed:
            self._reading_paused = pause
            if pause:
                self.transport.pause_reading()
            else:
                self.transport.resume_reading()

    def _charge(self, memory: RequestMemory, frames: list[memoryview]) -> None:
        fresh = sum(frame.nbytes for frame in frames)
        if self.reserved and frames:  # the first frame is the large one reserved for when it began
            fresh -= self.reserved
            self.reserved = 0
        self.held_bytes += fresh
        memory.take(fresh)
        self._reserve_or_wait(memory)

    def _reserve_or_wait(self, memory: RequestMemory) -> None:
        """A large frame reserves its size as it begins, if the budget is not spent; a connection without
        a reservation stops reading while it is."""
        size = self.decoder.unfinished_frame_bytes
        if size and not self.reserved and not memory.spent:
            self.reserved = size
            self.held_bytes += size
            memory.take(size)
        self._waiting_for_memory = memory.spent and not self.reserved
        if self._waiting_for_memory:
            memory.wait(self)

    def memory_freed(self) -> None:
        """The broker's request memory has bytes again (this connection was waiting for them)."""
        if self.closed or self.listener.memory is None:
            return
        self._reserve_or_wait(self.listener.memory)
        self._update_reading()

    def _release(self, nbytes: int) -> None:
        nbytes = min(nbytes, self.held_bytes)  # all was released already if the connection is gone
        if nbytes and self.listener.memory is not None:
            self.held_bytes -= nbytes
            self.listener.memory.release(nbytes)

    async def _serve(self) -> None:
        try:
            while not self.closed:
                if not self.queue:
                    self.ready.clear()
                    await self.ready.wait()
                    continue
                frame, arrived = self.queue.popleft()
                self.queued_bytes -= frame.nbytes
                if self._reading_paused:  # taking a request can only resume reading, never pause it
                    self._update_reading()
                await self._handle(frame, arrived)
                if self.held_bytes:  # only with the broker's request memory budget on
                    self._release(frame.nbytes)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("event=connection_failed listener=%s peer=%s", self.listener.name, self.peer)
            self.close()

    async def _handle(self, frame: memoryview, arrived: float) -> None:
        if self.authenticator.expects_raw_token:
            await self.authenticator.raw_token(self, frame)
            return
        try:
            header, body_offset = decode_request_header(frame)
        except KafkaError as exc:
            await self._refuse(None, frame, f"malformed request header: {exc}")
            return
        if not self.authenticator.admit(self, header):
            await self._refuse(header, frame, "not authenticated")
            return
        try:
            handler = self.api_table.handler(header.api_key, header.api_version)
        except UnsupportedVersionError:
            if header.api_key == ApiKey.API_VERSIONS:
                # A newer client probes with its newest version: answer v0 so it can retry.
                await self.send_entity(header, self.api_table.unsupported_api_versions_response(), version=0)
                return
            await self._refuse(header, frame, "unsupported version", ErrorCode.unsupported_version)
            return
        except KafkaError:
            await self._refuse(header, frame, "unsupported API key", ErrorCode.unsupported_version)
            return
        started = time.monotonic()
        context = RequestContext(header, frame, body_offset, self, started=started)
        try:
            result = await handler(context)
        except KafkaError as exc:
            # The request body could not be decoded or was not acceptable as a whole.
            await self._refuse(header, frame, str(exc), exc.code)
            return
        except Exception as exc:  # a handler's bug: this request fails, not the broker
            log.error(
                "event=handler_failed api_key=%d api_version=%d",
                header.api_key,
                header.api_version,
                exc_info=exc,
            )
            await self._refuse(header, frame, f"unexpected error: {exc!r}", ErrorCode.unknown_server_error)
            return
        throttle_ms = context.throttle_ms
        if throttle_ms is None:
            throttle_ms, result = self._charge_request_time(context, result)
        ready = time.monotonic()
        if result is not None:
            if isinstance(result, list):
                await self.send_chunks(header, result)
            else:
                await self.send_entity(header, result)
        metrics = self.listener.metrics
        if metrics is not None:
            metrics.request_done(
                header.api_key, header.api_version, arrived, started, ready, context.remote_wait_s
            )
        if throttle_ms > 0:
            await self._mute(throttle_ms / 1000)

    def _charge_request_time(
        self, context: RequestContext, result: HandlerResult
    ) -> tuple[int, HandlerResult]:
        """The request-time quota's throttle for a request whose handler did not charge it, and the answer
        carrying it."""
        quotas = quotas_of(context)
        if quotas is None or context.header.api_key in QUOTA_EXEMPT_APIS:
            return 0, result
        throttle_ms = charge_request_time(quotas, context)
        if throttle_ms > 0 and dataclasses.is_dataclass(result) and hasattr(result, "throttle_time"):
            result = dataclasses.replace(result, throttle_time=throttle(throttle_ms))  # type: ignore[type-var]
        return throttle_ms, result

    async def _mute(self, seconds: float) -> None:
        """Read nothing more from this client until its throttle time is over (its answer is already sent):
        requests it already pipelined wait too, as this connection serves one request at a time."""
        self._muted = True
        self._update_reading()
        with contextlib.suppress(TimeoutError):  # a closed connection waits no longer
            await asyncio.wait_for(self._gone.wait(), seconds)
        self._muted = False
        self._update_reading()

    async def _refuse(
        self, header: RequestHeader | None, frame: memoryview, reason: str, code: ErrorCode | None = None
    ) -> None:
        """A request we cannot serve, logged once with its first bytes. It is answered with `code` where the
        response of its API version has a top-level error field; otherwise the connection closes, as Kafka
        closes it (the client could not read any answer we sent)."""
        answer = None
        if header is not None and code is not None:
            answer = error_answer(header.api_key, header.api_version, code)
        what = (
            f"api_key={header.api_key} api_version={header.api_version} "
            f"correlation_id={header.correlation_id} client_id={header.client_id!r}"
            if header
            else "header=unreadable"
        )
        if header is not None and self.listener.metrics is not None:
            self.listener.metrics.request_failed(header.api_key, header.api_version)
        log.warning(
            "event=request_rejected listener=%s peer=%s %s reason=%r answer=%s size=%d head=%s",
            self.listener.name,
            self.peer,
            what,
            reason,
            "connection_closed" if answer is None or code is None else code.name.upper(),
            frame.nbytes,
            bytes(frame[:HEX_DUMP_BYTES]).hex(),
        )
        if answer is None or header is None:
            self.close()
        else:
            await self.send_entity(header, answer)

    # -- writing ---------------------------------------------------------------------------------

    async def send_entity(self, header: RequestHeader, entity: Any, version: int | None = None) -> None:
        header_version = response_header_version(
            header.api_key, header.api_version if version is None else version
        )
        await self.write_chunks(frame_chunks(header.correlation_id, header_version, [codec.encode(entity)]))

    async def send_chunks(self, header: RequestHeader, body: Sequence[Chunk]) -> None:
        await self.write_chunks(frame_chunks(header.correlation_id, header.response_header_version, body))

    async def write_chunks(self, chunks: Sequence[Chunk]) -> None:
        """Write one answer. While more requests wait behind it (a client pipelining, as librdkafka does),
        byte chunks are held back and written with the next answers in one system call, at the latest on the
        event loop's next turn; the answer to the last waiting request goes out at once."""
        transport = self.transport
        if transport is None or self.closed:
            return
        for chunk in chunks:
            if not isinstance(chunk, (bytes, bytearray, memoryview)):
                # A small records region is read and written with the rest of the answer: each write is a
                # segment that wakes the client, which on loopback costs more than copying the bytes.
                inline = self.listener.region_sender.inline(self, chunk)
                if inline is None:
                    self.flush()
                    await self.listener.region_sender.send(self, chunk)
                    if self.closed:
                        return
                    continue
                chunk = inline
            if not self._unsent and self.queue:
                asyncio.get_running_loop().call_soon(self.flush)
            self._unsent.append(chunk)
            self._unsent_bytes += len(chunk)
            if self.closed:
                return
        if not self.queue or self._unsent_bytes >= COALESCE_BYTES:
            self.flush()
        self.last_active = time.monotonic()
        if not self._writable.is_set():  # as `drained`, without a coroutine per answer
            await self._writable.wait()

    def flush(self) -> None:
        """Write the answers held back, in one system call."""
        if not self._unsent:
            return
        unsent = self._unsent
        self._unsent = []
        self._unsent_bytes = 0
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(unsent[0] if len(unsent) == 1 else b"".join(unsent))

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.flush()
            self.closed = True
            self.transport.close()
        self.ready.set()
        self._gone.set()


class Listener:
    """One listening endpoint with its security protocol."""

    def __init__(
        self,
        endpoint: Endpoint,
        api_table: ApiTable[Handler],
        region_sender: RegionSender,
        *,
        max_request_bytes: int,
    ) -> None:
        self.endpoint = endpoint
        self.name = endpoint.listener
        self.api_table = api_table
        self.region_sender = region_sender
        self.max_request_bytes = max_request_bytes
        self.connections: set[Connection] = set()
        self.server: asyncio.Server | None = None
        self.authenticator_factory: Callable[[], Any] = PassThroughAuthenticator
        self.metrics: Any = None  # the broker's BrokerMetrics when metrics.port is set
        self.tls: ssl.SSLContext | None = None  # SSL and SASL_SSL listeners get theirs from the broker
        self.limits: ConnectionLimits | None = None  # the broker's, shared by its listeners
        self.memory: RequestMemory | None = None  # the broker's request bytes budget, shared likewise
        self.quotas: QuotaManager | None = None  # the broker's client quotas, shared by its listeners

    def ssl_context(self) -> ssl.SSLContext | None:
        return self.tls

    @property
    def port(self) -> int:
        if self.server is None or not self.server.sockets:
            return self.endpoint.port
        return self.server.sockets[0].getsockname()[1]

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(
            lambda: Connection(self),
            host=self.endpoint.host,
            port=self.endpoint.port,
            ssl=self.ssl_context(),
            reuse_address=True,
            backlog=1024,
            # Bound now (its port is registered in ZooKeeper), served once the broker is ready.
            start_serving=False,
        )

    async def start_serving(self) -> None:
        assert self.server is not None
        await self.server.start_serving()
        log.info("event=listening listener=%s address=%s:%d", self.name, self.endpoint.host, self.port)

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
        for connection in list(self.connections):
            connection.close()
        if self.server is not None:
            await self.server.wait_closed()
