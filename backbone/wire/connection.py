"""One asyncio connection to one broker: framing, correlation ids, pipelining, version negotiation.

Requests are written as soon as they are made, up to `max_in_flight` unanswered ones (more wait for a
slot), and Kafka answers them in order on a connection, so each response must match the oldest request
still waiting; one that does not means the stream is out of step and the connection is closed, failing
everything in flight with a retriable `KafkaConnectionError`. A request that gets no answer within its
timeout closes the connection for the same reason: a late answer would arrive out of step.

On connect the client sends ApiVersions at the highest version it speaks. A broker that does not know that
version answers UNSUPPORTED_VERSION with a v0 body listing the ApiVersions versions it does know, and the
client asks again with the highest common one (Kafka's KIP-511 fallback). Each API then uses the highest
version both sides speak (`messages.negotiate`).

Bytes are read by an asyncio BufferedProtocol into buffers the protocol room's FrameDecoder hands out: a large
response (a Fetch) is received straight into its own body buffer, small ones are split out of a shared one.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import struct
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from backbone.protocol.api import ApiKey, VersionRange
from backbone.protocol.codec import decode_response
from backbone.protocol.errors import ErrorCode, KafkaError, error_for
from backbone.protocol.framing import FrameDecoder, FrameError, frame_prefix
from backbone.protocol.headers import decode_response_header, encode_request_header, response_header_version
from backbone.wire.errors import KafkaConnectionError, KafkaTimeoutError
from backbone.wire.messages import CLIENT_VERSIONS, encode_request, negotiate, pick_version, require_version
from backbone.wire.security import ClientSecurity

__all__ = ["BrokerConnection", "Response"]

log = logging.getLogger(__name__)

T = TypeVar("T")
Body = bytes | Sequence[bytes | bytearray]  # one buffer, or chunks written in order (no join)
Encoder = Callable[[int], Body]
Decoder = Callable[[int, memoryview, int], T]

SOFTWARE_NAME = "backbone-python"
SOFTWARE_VERSION = "0.1.0"
DEFAULT_MAX_RESPONSE_BYTES = 512 * 1024 * 1024
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


@dataclass(slots=True)
class Response:
    """A response frame: the version it answers, the whole frame and where the body starts in it."""

    version: int
    frame: memoryview
    body_offset: int


@dataclass(slots=True)
class _InFlight:
    correlation_id: int
    api_key: int
    version: int
    future: asyncio.Future[Response]


class _Protocol(asyncio.BufferedProtocol):
    def __init__(self, connection: BrokerConnection, max_response_bytes: int) -> None:
        self._connection = connection
        self._decoder = FrameDecoder(max_response_bytes)
        self.transport: asyncio.Transport | None = None
        self._drained: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses but have its methods
        self.transport = cast(asyncio.Transport, transport)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._decoder.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        try:
            frames = self._decoder.buffer_updated(nbytes)
        except FrameError as error:
            self._connection._fail(KafkaConnectionError(f"bad response frame: {error}"))
            return
        for frame in frames:
            self._connection._on_frame(frame)

    def connection_lost(self, exc: Exception | None) -> None:
        reason = f"connection lost: {exc}" if exc else "connection closed by the broker"
        self._connection._fail(KafkaConnectionError(reason))
        self._wake_writers(exc)

    def pause_writing(self) -> None:
        if self._drained is None:
            self._drained = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        self._wake_writers(None)

    def _wake_writers(self, exc: Exception | None) -> None:
        waiter, self._drained = self._drained, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def drain(self) -> None:
        if self._drained is not None:
            await asyncio.shield(self._drained)


class BrokerConnection:
    """A connection to one broker (`node_id`, or a negative id for a bootstrap address)."""

    def __init__(
        self,
        host: str,
        port: int,
        node_id: int,
        *,
        client_id: str,
        request_timeout_ms: int = 30_000,
        connect_timeout_ms: int = 10_000,
        max_in_flight: int = 5,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        client_versions: Mapping[int, VersionRange] = CLIENT_VERSIONS,
        on_close: Callable[[BrokerConnection, Exception | None], None] | None = None,
        security: ClientSecurity | None = None,
    ) -> None:
        self.host = host
        self.security = security or ClientSecurity()
        self.port = port
        self.node_id = node_id
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.max_in_flight = max_in_flight
        self._max_response_bytes = max_response_bytes
        self._client_versions = client_versions
        self._on_close = on_close
        self.versions: dict[int, int] = {}
        self.broker_versions: dict[int, tuple[int, int]] = {}
        self._protocol: _Protocol | None = None
        self._in_flight: collections.deque[_InFlight] = collections.deque()
        self._slots = asyncio.Semaphore(max_in_flight)
        self._correlation = 0
        self._connect_task: asyncio.Task[None] | None = None
        self._closed: Exception | None = None
        self._closing = False
        self._ready = False
        self.last_used = time.monotonic()

    def __repr__(self) -> str:
        state = "ready" if self._ready else "closed" if self._closed else "connecting"
        return f"<BrokerConnection node={self.node_id} {self.host}:{self.port} {state}>"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def is_ready(self) -> bool:
        return self._ready and self._closed is None

    @property
    def is_closed(self) -> bool:
        return self._closed is not None

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def can_send(self) -> bool:
        """Ready, with a free in-flight slot (what a sender checks before draining for this broker)."""
        return self.is_ready and len(self._in_flight) < self.max_in_flight

    def version(self, api_key: int) -> int:
        """The negotiated version of `api_key`; UnsupportedVersionError if the broker lacks it."""
        return require_version(self.versions, api_key, f"{self.node_id} ({self.address})")

    # -- connecting -------------------------------------------------------------------------------

    async def connect(self) -> None:
        """Open the socket and negotiate versions; concurrent callers share one attempt."""
        if self._closed is not None:
            raise KafkaConnectionError(f"connection to {self.address} is closed: {self._closed}")
        if self._ready:
            return
        if self._connect_task is None:
            self._connect_task = asyncio.ensure_future(self._connect())
        try:
            await asyncio.shield(self._connect_task)
        except asyncio.CancelledError:
            # `abort` cancels an attempt in progress: its waiters get a connection error, not a
            # cancellation they never asked for (which would end their task). Their own cancellation passes.
            task = asyncio.current_task()
            if (task is not None and task.cancelling()) or self._closed is None:
                raise
            raise KafkaConnectionError(f"connection to {self.address} closed while connecting") from None

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        try:
            async with asyncio.timeout(self.connect_timeout_ms / 1000):
                _, protocol = await loop.create_connection(
                    lambda: _Protocol(self, self._max_response_bytes),
                    self.host,
                    self.port,
                    ssl=self.security.ssl_context,
                )
        except (OSError, TimeoutError) as error:
            what = (
                "timed out (socket.connection.setup.timeout.ms)" if isinstance(error, TimeoutError) else error
            )
            failure = KafkaConnectionError(
                f"cannot connect to broker {self.node_id} at {self.address}: {what}"
            )
            self._fail(failure)
            raise failure from None
        self._protocol = protocol
        try:
            await self._negotiate()
            await self.security.authenticate(self._call, self.address)
        except (KafkaError, KafkaConnectionError, KafkaTimeoutError) as error:
            self._fail(error if isinstance(error, KafkaConnectionError) else KafkaConnectionError(str(error)))
            raise
        self._ready = True
        log.debug(
            "event=connected node=%s address=%s apis=%d ms=%.1f",
            self.node_id,
            self.address,
            len(self.versions),
            (time.monotonic() - started) * 1000,
        )

    async def _negotiate(self) -> None:
        ours = self._client_versions[ApiKey.API_VERSIONS]
        version = ours.max
        for _ in range(3):  # newest, then the broker's newest, then v0 at worst
            body = encode_request(
                ApiKey.API_VERSIONS,
                version,
                client_software_name=SOFTWARE_NAME,
                client_software_version=SOFTWARE_VERSION,
            )
            response = await self._send(ApiKey.API_VERSIONS, version, body, self.request_timeout_ms)
            (error_code,) = _I16.unpack_from(response.frame, response.body_offset)
            if error_code == ErrorCode.unsupported_version:
                # The broker answers in v0, listing the ApiVersions versions it does speak.
                fallback = decode_response(ApiKey.API_VERSIONS, 0, response.frame, response.body_offset)
                theirs = [k for k in fallback.api_keys if k.api_key == ApiKey.API_VERSIONS]
                picked = pick_version(ApiKey.API_VERSIONS, ours, 0, theirs[0].max_version) if theirs else 0
                next_version = 0 if picked is None else picked
                if next_version >= version:
                    next_version = version - 1
                if next_version < 0:
                    break
                version = next_version
                continue
            if error_code:
                raise error_for(error_code, f"ApiVersions v{version} refused by {self.address}")
            decoded = decode_response(ApiKey.API_VERSIONS, version, response.frame, response.body_offset)
            self.broker_versions = {
                int(k.api_key): (int(k.min_version), int(k.max_version)) for k in decoded.api_keys
            }
            self.versions = negotiate(self.broker_versions, self._client_versions)
            return
        raise KafkaConnectionError(
            f"broker at {self.address} accepts no ApiVersions version this client speaks"
        )

    async def _call(self, api_key: int, **values: Any) -> Any:
        """A request while connecting (SASL): the negotiated version, the kio response entity."""
        version = self.version(api_key)
        body = encode_request(api_key, version, **values)
        response = await self._send(api_key, version, body, self.request_timeout_ms)
        return decode_response(api_key, version, response.frame, response.body_offset)

    # -- requests ---------------------------------------------------------------------------------

    async def request(
        self,
        api_key: int,
        encode: Encoder,
        decode: Decoder[T],
        *,
        timeout_ms: int | None = None,
    ) -> T:
        """Send the request `encode(version)` builds and return `decode(version, frame, body_offset)`."""
        await self.connect()
        version = self.version(api_key)
        response = await self._send(api_key, version, encode(version), timeout_ms or self.request_timeout_ms)
        return decode(response.version, response.frame, response.body_offset)

    async def request_kio(self, api_key: int, *, request_timeout_ms: int | None = None, **values: Any) -> Any:
        """Send the kio request of `api_key` built from `values`; the kio response entity."""
        return await self.request(
            api_key, encode_kio(api_key, **values), decode_kio(api_key), timeout_ms=request_timeout_ms
        )

    async def send_no_response(self, api_key: int, version: int, body: Body) -> None:
        """Write a request the broker does not answer (Produce with acks=0)."""
        await self.connect()
        await self._write(api_key, version, body)

    async def _send(self, api_key: int, version: int, body: Body, timeout_ms: int) -> Response:
        async with self._slots:
            future = await self._write(api_key, version, body, expect_response=True)
            assert future is not None
            # A timer that fails the answer's future: asyncio.timeout costs about twice as much, per request.
            timer = asyncio.get_running_loop().call_later(timeout_ms / 1000, _no_answer, future)
            try:
                return await future
            except _NoAnswer:
                error = KafkaTimeoutError(
                    f"{_api_name(api_key)} request to broker {self.node_id} ({self.address}) got no answer "
                    f"within {timeout_ms} ms (request.timeout.ms); the connection was closed and will be "
                    "reopened"
                )
                self._fail(KafkaConnectionError(str(error)))
                raise error from None
            finally:
                timer.cancel()

    async def _write(
        self, api_key: int, version: int, body: Body, expect_response: bool = False
    ) -> asyncio.Future[Response] | None:
        if self._closed is not None:
            raise KafkaConnectionError(f"connection to broker {self.node_id} ({self.address}) is closed")
        protocol = self._protocol
        assert protocol is not None and protocol.transport is not None
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        correlation_id = self._correlation
        header = encode_request_header(api_key, version, correlation_id, self.client_id)
        chunks = [body] if isinstance(body, bytes | bytearray | memoryview) else list(body)
        size = len(header) + sum(len(chunk) for chunk in chunks)
        future: asyncio.Future[Response] | None = None
        if expect_response:
            future = asyncio.get_running_loop().create_future()
            self._in_flight.append(_InFlight(correlation_id, api_key, version, future))
        protocol.transport.writelines([frame_prefix(size) + header, *chunks])
        self.last_used = time.monotonic()
        await protocol.drain()
        return future

    def _on_frame(self, frame: memoryview) -> None:
        if len(frame) < 4:
            self._fail(
                KafkaConnectionError(f"response of {len(frame)} bytes from {self.address} has no header")
            )
            return
        (correlation_id,) = _I32.unpack_from(frame, 0)
        if not self._in_flight or self._in_flight[0].correlation_id != correlation_id:
            expected = self._in_flight[0].correlation_id if self._in_flight else None
            self._fail(
                KafkaConnectionError(
                    f"broker {self.address} answered correlation id {correlation_id}, expected {expected}"
                )
            )
            return
        pending = self._in_flight.popleft()
        frame = frame.toreadonly()  # kio's native reader accepts read-only buffers only
        if pending.future.done():  # the caller was cancelled; the answer is dropped
            return
        try:
            _, body_offset = decode_response_header(
                frame, response_header_version(pending.api_key, pending.version)
            )
        except KafkaError as error:
            pending.future.set_exception(error)
            return
        pending.future.set_result(Response(pending.version, frame, body_offset))

    # -- closing ----------------------------------------------------------------------------------

    def _fail(self, error: Exception) -> None:
        """Close the connection and fail every request waiting on it with `error`."""
        if self._closed is not None:
            return
        self._closed = error
        self._ready = False
        lost = len(self._in_flight)
        while self._in_flight:
            pending = self._in_flight.popleft()
            if not pending.future.done():
                pending.future.set_exception(error)
        if self._protocol is not None and self._protocol.transport is not None:
            self._protocol.transport.close()
        # Our own closes are routine; a broker going away is worth an operator's attention.
        level = logging.DEBUG if self._closing else logging.INFO
        log.log(
            level,
            "disconnected node=%s address=%s in_flight=%d reason=%s",
            self.node_id,
            self.address,
            lost,
            error,
        )
        if self._on_close is not None:
            self._on_close(self, error)

    def abort(self) -> None:
        """Close now without waiting; requests still waiting fail with KafkaConnectionError."""
        self._closing = True
        if self._closed is None:
            self._fail(KafkaConnectionError(f"connection to {self.address} closed by the client"))
        if self._connect_task is not None and not self._connect_task.done():
            self._connect_task.cancel()

    async def close(self) -> None:
        """`abort`, then wait until a connection attempt in progress has ended."""
        self.abort()
        if self._connect_task is not None:
            await asyncio.gather(self._connect_task, return_exceptions=True)


class _NoAnswer(Exception):
    """A request's timer ran out before its answer came (`request.timeout.ms`)."""


def _no_answer(future: asyncio.Future[Response]) -> None:
    if not future.done():
        future.set_exception(_NoAnswer())


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return f"API {api_key}"


def decode_kio(api_key: int) -> Decoder[Any]:
    """A decoder that returns the kio response entity of `api_key`."""

    def decode(version: int, frame: memoryview, pos: int) -> Any:
        return decode_response(api_key, version, frame, pos)

    return decode


def encode_kio(api_key: int, **values: Any) -> Encoder:
    """An encoder that builds the kio request of `api_key` from `values` for whatever version is picked."""

    def encode(version: int) -> bytes:
        return encode_request(api_key, version, **values)

    return encode
