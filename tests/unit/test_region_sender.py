"""The broker's two ways of sending a log region over a real loopback connection: read into memory (a slice
at a time for a large region, waiting for the transport to drain in between) and `sendfile`."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from backbone.broker.region_sender import READ_SLICE, FileRegionSender, Regions
from backbone.log.files import FileRegion, SegmentFile

pytestmark = pytest.mark.unit

HIGH_WATER = 64 * 1024


class Peer(asyncio.Protocol):
    """The sending side as FileRegionSender sees a broker connection, noting the buffer at each wait."""

    def __init__(self) -> None:
        self.transport: asyncio.WriteTransport | None = None
        self.closed = False
        self.writable = asyncio.Event()
        self.writable.set()
        self.buffered_at_waits: list[int] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        transport.set_write_buffer_limits(high=HIGH_WATER)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.writable.set()

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    async def drained(self) -> None:
        assert self.transport is not None
        self.buffered_at_waits.append(self.transport.get_write_buffer_size())
        await self.writable.wait()


@pytest.fixture
def segment(tmp_path: Path):
    path = tmp_path / "00000000000000000000.log"
    data = os.urandom(3 * READ_SLICE + 12345)
    path.write_bytes(data)
    file = SegmentFile.open(path)
    yield file, data
    file.close()


async def send_and_receive(sender: FileRegionSender, region: FileRegion | Regions, expected: int):
    """What a loopback reader receives while `sender` sends `region` from a fresh connection."""
    received = bytearray()
    done = asyncio.Event()

    async def read(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while len(received) < expected:
            chunk = await reader.read(65536)
            if not chunk:
                break
            received.extend(chunk)
        done.set()
        writer.close()

    server = await asyncio.start_server(read, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    loop = asyncio.get_running_loop()
    transport, peer = await loop.create_connection(Peer, "127.0.0.1", port)
    try:
        await sender.send(peer, region)
        await asyncio.wait_for(done.wait(), 30)
    finally:
        transport.close()
        server.close()
        await server.wait_closed()
    return bytes(received), peer


async def test_a_large_region_is_read_a_slice_at_a_time(segment) -> None:
    file, data = segment
    sender = FileRegionSender(sendfile_threshold=1 << 30)
    received, peer = await send_and_receive(sender, FileRegion(file, 100, len(data) - 100), len(data) - 100)
    assert received == data[100:]
    slices = -(-(len(data) - 100) // READ_SLICE)
    assert len(peer.buffered_at_waits) == slices  # it waited for the transport before every slice
    # Never more than one slice beyond the high-water mark waiting in memory.
    assert max(peer.buffered_at_waits) <= HIGH_WATER + READ_SLICE


async def test_a_small_region_is_read_in_one_piece(segment) -> None:
    file, data = segment
    sender = FileRegionSender(sendfile_threshold=1 << 30)
    received, peer = await send_and_receive(sender, FileRegion(file, 7, 5000), 5000)
    assert received == data[7:5007]
    assert peer.buffered_at_waits == []


async def test_sendfile_at_the_threshold_sends_the_same_bytes(segment) -> None:
    file, data = segment
    sender = FileRegionSender(sendfile_threshold=READ_SLICE)
    parts = (FileRegion(file, 0, READ_SLICE - 1), FileRegion(file, READ_SLICE, 2 * READ_SLICE))
    received, _ = await send_and_receive(sender, Regions(parts), 3 * READ_SLICE - 1)
    assert received == data[: READ_SLICE - 1] + data[READ_SLICE : 3 * READ_SLICE]


def test_a_part_of_a_region_stops_at_its_end(segment) -> None:
    file, _ = segment
    region = FileRegion(file, 10, 100)
    assert region.part(40, 50) == FileRegion(file, 50, 50)
    assert region.part(90, 50) == FileRegion(file, 100, 10)
