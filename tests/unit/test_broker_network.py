"""The broker's connections receive frames in place (asyncio BufferedProtocol), over plain TCP and TLS:
pipelined small requests, large requests in pieces, bad prefixes closing only their connection, and reading
paused while too many requests wait."""

from __future__ import annotations

import asyncio
import logging
import random
import shutil
import ssl
import struct
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from backbone.broker import network
from backbone.broker.config import Endpoint
from backbone.broker.network import Listener, RegionSender, RequestContext
from backbone.broker.region_sender import INLINE_MAX_BYTES, FileRegionSender
from backbone.log.files import FileRegion, SegmentFile
from backbone.protocol.api import ApiKey, ApiTable
from backbone.protocol.framing import encode_frame, read_frame
from backbone.protocol.headers import encode_request_header

pytestmark = pytest.mark.unit

MAX_REQUEST_BYTES = 8 * 1024 * 1024


class EchoListener(Listener):
    """A listener whose only API (Produce v3, a header without tagged fields) echoes the request body,
    optionally held until `gate` opens; TLS when given a server context."""

    def __init__(self, server_context: ssl.SSLContext | None = None) -> None:
        table: ApiTable[network.Handler] = ApiTable()
        table.register(ApiKey.PRODUCE, self.echo)
        endpoint = Endpoint("TEST", "127.0.0.1", 0, "SSL" if server_context else "PLAINTEXT")
        super().__init__(endpoint, table, RegionSender(), max_request_bytes=MAX_REQUEST_BYTES)
        self.server_context = server_context
        self.gate = asyncio.Event()
        self.gate.set()

    def ssl_context(self) -> ssl.SSLContext | None:
        return self.server_context

    async def echo(self, context: RequestContext) -> list[bytes]:
        await self.gate.wait()
        return [bytes(context.frame[context.body_offset :])]


def request(correlation_id: int, body: bytes) -> bytes:
    return encode_frame(encode_request_header(ApiKey.PRODUCE, 3, correlation_id, "test") + body)


async def answers(reader: asyncio.StreamReader, count: int) -> list[tuple[int, bytes]]:
    result = []
    for _ in range(count):
        frame = await asyncio.wait_for(read_frame(reader, 1 << 30), timeout=20)
        result.append((struct.unpack_from(">i", frame)[0], frame[4:]))
    return result


async def closed_by_peer(reader: asyncio.StreamReader) -> bool:
    """Whether the broker closes the connection (an end of stream, or a reset when bytes were left
    unread) within ten seconds."""
    try:
        return await asyncio.wait_for(reader.read(), timeout=10) == b""
    except ConnectionResetError:
        return True


@pytest.fixture
async def listener() -> AsyncIterator[EchoListener]:
    served = EchoListener()
    await served.start()
    await served.start_serving()
    yield served
    await served.stop()


async def test_pipelined_small_requests_in_one_write_are_answered_in_order(listener: EchoListener) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
    bodies = [b"body %d" % i * (i % 5) for i in range(300)]
    writer.write(b"".join(request(i, body) for i, body in enumerate(bodies)))
    assert await answers(reader, len(bodies)) == list(enumerate(bodies))
    writer.close()


def counted_writes(listener: Listener) -> list[int]:
    """The sizes of the writes the listener's one connection makes from now on, as they happen."""
    (connection,) = listener.connections
    assert connection.transport is not None
    written: list[int] = []
    send = connection.transport.write

    def counted(data: bytes | bytearray | memoryview) -> None:
        written.append(len(data))
        send(data)

    connection.transport.write = counted  # type: ignore[method-assign]
    return written


async def test_answers_to_pipelined_requests_leave_together(listener: EchoListener) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
    await answers_after(writer, reader, request(0, b"first"))
    written = counted_writes(listener)
    bodies = [b"body %d" % i for i in range(1, 301)]
    writer.write(b"".join(request(i, body) for i, body in enumerate(bodies, 1)))
    assert await answers(reader, len(bodies)) == list(enumerate(bodies, 1))
    # 300 answers arrived in order; they went out in a few writes, not one each.
    assert len(written) < 30
    writer.close()


class HoldingListener(EchoListener):
    """Echoes at once, except a body of b"hold", which waits for `gate`."""

    async def echo(self, context: RequestContext) -> list[bytes]:
        body = bytes(context.frame[context.body_offset :])
        if body == b"hold":
            await self.gate.wait()
        return [body]


async def test_an_answer_is_not_held_back_by_a_later_request_that_waits() -> None:
    served = HoldingListener()
    served.gate.clear()
    await served.start()
    await served.start_serving()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
        writer.write(request(1, b"quick") + request(2, b"hold"))
        assert await answers(reader, 1) == [(1, b"quick")]  # while the second still waits
        served.gate.set()
        assert await answers(reader, 1) == [(2, b"hold")]
        writer.close()
    finally:
        await served.stop()


async def answers_after(
    writer: asyncio.StreamWriter, reader: asyncio.StreamReader, frame: bytes
) -> list[tuple[int, bytes]]:
    writer.write(frame)
    return await answers(reader, 1)


class RegionListener(EchoListener):
    """Answers every request with bytes, a region of `file` as long as the body says, and more bytes, the
    way a Fetch answer leaves: its records a file region between the encoded fields."""

    def __init__(self, file: SegmentFile) -> None:
        super().__init__()
        self.file = file
        self.region_sender = FileRegionSender()

    async def echo(self, context: RequestContext) -> list[object]:  # type: ignore[override]
        length = int(bytes(context.frame[context.body_offset :]))
        return [b"head", FileRegion(self.file, 0, length), b"tail"]


async def test_a_small_region_leaves_in_the_answers_one_write_a_large_one_in_its_own(tmp_path: Path) -> None:
    data = random.randbytes(INLINE_MAX_BYTES + 1)
    (tmp_path / "segment.log").write_bytes(data)
    file = SegmentFile.open(tmp_path / "segment.log")
    served = RegionListener(file)
    await served.start()
    await served.start_serving()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
        await answers_after(writer, reader, request(0, b"1"))
        written = counted_writes(served)
        for size in (16_000, INLINE_MAX_BYTES):
            written.clear()
            assert await answers_after(writer, reader, request(1, b"%d" % size)) == [
                (1, b"head" + data[:size] + b"tail")
            ]
            assert len(written) == 1  # one segment: the client wakes once for the whole answer
        written.clear()
        large = INLINE_MAX_BYTES + 1
        assert await answers_after(writer, reader, request(2, b"%d" % large)) == [
            (2, b"head" + data[:large] + b"tail")
        ]
        assert len(written) == 3  # the region in a write of its own, between the answer's bytes
        writer.close()
    finally:
        await served.stop()
        file.close()


async def test_large_requests_arriving_in_pieces_are_whole(listener: EchoListener) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
    big = random.Random(3).randbytes(3 * 1024 * 1024 + 5)
    stream = request(1, b"small") + request(2, big) + request(3, b"tail") + request(4, big[:100_000])
    for start in range(0, len(stream), 40_000):
        writer.write(stream[start : start + 40_000])
        await writer.drain()
    assert await answers(reader, 4) == [(1, b"small"), (2, big), (3, b"tail"), (4, big[:100_000])]
    writer.close()


@pytest.mark.parametrize(
    "size", [MAX_REQUEST_BYTES + 1, -5, 2**31 - 1], ids=["past-limit", "negative", "huge"]
)
async def test_a_bad_prefix_closes_only_its_connection_and_is_logged_once(
    listener: EchoListener, size: int, caplog: pytest.LogCaptureFixture
) -> None:
    bystander_reader, bystander = await asyncio.open_connection("127.0.0.1", listener.port)
    reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
    with caplog.at_level(logging.WARNING, logger=network.__name__):
        writer.write(request(1, b"fine"))
        assert await answers(reader, 1) == [(1, b"fine")]
        writer.write(request(2, b"lost") + struct.pack(">i", size) + b"x" * 100_000)
        assert await closed_by_peer(reader)
    assert sum("event=bad_frame" in record.getMessage() for record in caplog.records) == 1
    bystander.write(request(9, b"still here"))
    assert await answers(bystander_reader, 1) == [(9, b"still here")]
    writer.close()
    bystander.close()


async def wait_until(condition, what: str) -> None:  # type: ignore[no-untyped-def]
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.parametrize("bound", ["requests", "bytes"])
async def test_reading_pauses_while_too_many_requests_wait(
    listener: EchoListener, bound: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if bound == "bytes":
        monkeypatch.setattr(network, "MAX_QUEUED_BYTES", 1024 * 1024)
        bodies = [bytes([i]) * 300_000 for i in range(12)]  # received in place, 4 queued reach the bound
    else:
        bodies = [b"%d" % i for i in range(network.MAX_QUEUED_REQUESTS * 3)]
    listener.gate.clear()
    reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
    await wait_until(lambda: listener.connections, "the connection")
    (connection,) = listener.connections
    for i, body in enumerate(bodies):  # one read each: the bound is checked after every read
        writer.write(request(i, body))
        await writer.drain()
        await asyncio.sleep(0.002)
    await wait_until(lambda: connection._reading_paused, "reading to pause")
    assert connection.transport is not None and not connection.transport.is_reading()
    assert len(connection.queue) < len(bodies) - 1, "it stopped reading before taking everything"
    listener.gate.set()
    assert await answers(reader, len(bodies)) == list(enumerate(bodies))
    assert not connection._reading_paused and connection.transport.is_reading()
    writer.close()


# -- TLS ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    directory = tmp_path_factory.mktemp("tls")
    cert, key = directory / "cert.pem", directory / "key.pem"
    options = ["-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)]
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", *options],
        check=True,
        capture_output=True,
    )
    return cert, key


async def test_a_tls_listener_receives_small_and_large_requests(certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(cert, key)
    client_context = ssl.create_default_context(cafile=cert)
    client_context.check_hostname = False
    served = EchoListener(server_context)
    await served.start()
    await served.start_serving()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", served.port, ssl=client_context)
        big = random.Random(5).randbytes(2 * 1024 * 1024 + 7)
        small = [b"tls %d" % i for i in range(100)]
        writer.write(b"".join(request(i, body) for i, body in enumerate(small)) + request(100, big))
        writer.write(request(101, b"after"))
        expected = [*enumerate(small), (100, big), (101, b"after")]
        assert await answers(reader, len(expected)) == expected
        writer.write(struct.pack(">i", -1))
        assert await closed_by_peer(reader)
        writer.close()
    finally:
        await served.stop()
