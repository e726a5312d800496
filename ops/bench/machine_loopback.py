"""Loopback TCP from a file in the page cache: `sendfile` against a read into memory, per region size.

Part of `machine_bench.py`. Four ways to send a file region to a socket, each over its own connection kept
for the whole run, into a sink in another process (so the receiving side takes no turn on this one's
interpreter lock):

- `sendfile`: `os.sendfile` on a blocking socket until the region is out;
- `readinto + sendall`: `os.preadv` into one reused buffer, then `sock.sendall` of it;
- the broker's own two paths, through an asyncio transport and `FileRegionSender` from
  `backbone/broker/region_sender.py`, each region after a small response header as in a Fetch answer:
  `pread + write` (the path for regions under the threshold) and `loop.sendfile` (the path at or above it;
  it first waits for the transport's buffer to empty).

A measurement sends regions of one size, one after another through the file, until `total` bytes are out,
and ends when the sink confirms it has them all. The methods take turns size by size, in a rotating order.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import socket
import struct
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from backbone.broker.region_sender import FileRegionSender
from backbone.log.files import FileRegion, SegmentFile

HOST = "127.0.0.1"
LENGTH = struct.Struct(">q")  # what a measurement will send; the sink answers one byte once it has it all
ACK = b"k"
SINK_BUFFER = 4 << 20
RESPONSE_HEADER = bytes(80)  # about what a Fetch answer writes before one partition's records
ALWAYS = 0
NEVER = 1 << 62

PLAIN_SENDFILE = "sendfile"
PLAIN_READINTO = "readinto + sendall"
BROKER_PREAD = "broker: pread + write"
BROKER_SENDFILE = "broker: loop.sendfile"
METHODS = (PLAIN_SENDFILE, PLAIN_READINTO, BROKER_PREAD, BROKER_SENDFILE)

Measure = Callable[[int, int], Awaitable[float]]  # (region size, region count) -> seconds


def _receive_exactly(sock: socket.socket, view: memoryview, length: int) -> None:
    received = 0
    while received < length:
        got = sock.recv_into(view[received:], length - received)
        if not got:
            raise ConnectionError("the sender closed the connection")
        received += got


def _drain(connection: socket.socket) -> None:
    """Serve one sender: for each announced length, read that many bytes and answer ACK."""
    buffer = memoryview(bytearray(SINK_BUFFER))
    prefix = memoryview(bytearray(LENGTH.size))
    with connection:
        while True:
            try:
                _receive_exactly(connection, prefix, LENGTH.size)
            except ConnectionError:
                return
            remaining = LENGTH.unpack(prefix)[0]
            while remaining:
                got = connection.recv_into(buffer, min(remaining, SINK_BUFFER))
                if not got:
                    return
                remaining -= got
            connection.sendall(ACK)


def _sink(listener: socket.socket) -> None:
    """The sink process: a thread per connection until the parent closes them."""
    while True:
        connection, _ = listener.accept()
        threading.Thread(target=_drain, args=(connection,), daemon=True).start()


class _Peer(asyncio.Protocol):
    """The client side as the broker's `Connection` looks to `FileRegionSender`: a transport, `closed`,
    and writing paused while the transport's buffer is over its high-water mark."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.writable = asyncio.Event()
        self.writable.set()
        self.acks: asyncio.Queue[None] = asyncio.Queue()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        for _ in range(data.count(ACK)):
            self.acks.put_nowait(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.writable.set()

    async def drained(self) -> None:
        await self.writable.wait()

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()


class Regions:
    """Successive regions of one size through a file whose size is a multiple of every region size."""

    def __init__(self, file_size: int) -> None:
        self.file_size = file_size
        self.position = 0

    def next(self, size: int) -> int:
        position = self.position
        self.position = (position + size) % self.file_size
        return position


def _plain(sock: socket.socket, fd: int, regions: Regions, use_sendfile: bool, buffer: memoryview) -> Measure:
    async def measure(size: int, count: int) -> float:
        started = time.perf_counter()
        sock.sendall(LENGTH.pack(size * count))
        for _ in range(count):
            position = regions.next(size)
            if use_sendfile:
                sent = 0
                while sent < size:
                    sent += os.sendfile(sock.fileno(), fd, position + sent, size - sent)
            else:
                view = buffer[:size]
                os.preadv(fd, [view], position)
                sock.sendall(view)
        if sock.recv(1) != ACK:
            raise ConnectionError("the sink did not confirm")
        return time.perf_counter() - started

    return measure


def _broker_path(peer: _Peer, file: SegmentFile, regions: Regions, threshold: int) -> Measure:
    sender = FileRegionSender(sendfile_threshold=threshold)

    async def measure(size: int, count: int) -> float:
        transport = peer.transport
        assert transport is not None
        started = time.perf_counter()
        transport.write(LENGTH.pack((size + len(RESPONSE_HEADER)) * count))
        for _ in range(count):  # as Connection.write_chunks writes one Fetch answer
            transport.write(RESPONSE_HEADER)
            await sender.send(peer, FileRegion(file, regions.next(size), size))
            await peer.drained()
        await asyncio.wait_for(peer.acks.get(), 120)
        return time.perf_counter() - started

    return measure


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection((HOST, port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as asyncio sets on its transports
    return sock


async def _measure_all(
    port: int, path: Path, sizes: list[int], total: int, rounds: int, progress: Callable[[str], None]
) -> dict[str, dict[int, list[float]]]:
    loop = asyncio.get_running_loop()
    regions = Regions(path.stat().st_size)
    file = SegmentFile.open(path)
    buffer = memoryview(bytearray(max(sizes)))
    plain = {name: _connect(port) for name in (PLAIN_SENDFILE, PLAIN_READINTO)}
    peers: dict[str, _Peer] = {}
    for name in (BROKER_PREAD, BROKER_SENDFILE):
        _, peers[name] = await loop.create_connection(_Peer, HOST, port)
    fd = file.fileno()
    measures = {
        PLAIN_SENDFILE: _plain(plain[PLAIN_SENDFILE], fd, regions, True, buffer),
        PLAIN_READINTO: _plain(plain[PLAIN_READINTO], fd, regions, False, buffer),
        BROKER_PREAD: _broker_path(peers[BROKER_PREAD], file, regions, NEVER),
        BROKER_SENDFILE: _broker_path(peers[BROKER_SENDFILE], file, regions, ALWAYS),
    }
    rates: dict[str, dict[int, list[float]]] = {name: {size: [] for size in sizes} for name in METHODS}
    try:
        for round_number in range(rounds):
            for size in sizes:
                count = max(1, total // size)
                turn = round_number % len(METHODS)
                for name in METHODS[turn:] + METHODS[:turn]:
                    seconds = await measures[name](size, count)
                    rates[name][size].append(size * count / seconds / 1e9)
            progress(f"loopback round {round_number + 1} of {rounds} done")
    finally:
        for sock in plain.values():
            sock.close()
        for peer in peers.values():
            if peer.transport is not None:
                peer.transport.close()
        file.close()
    return rates


def measure_loopback(
    directory: Path,
    sizes: list[int],
    total: int,
    rounds: int,
    progress: Callable[[str], None],
) -> dict[str, dict[int, list[float]]]:
    """GB/s of each method at each region size, one figure per round: {method: {size: [GB/s, ...]}}.

    Regions come from a file of 64 MiB (or the largest region, if larger) written just before, so in the
    page cache as recently produced records are when consumers read them.
    """
    file_size = max(64 << 20, max(sizes))
    file_size -= file_size % max(sizes)
    path = directory / "regions.bin"
    chunk = os.urandom(1 << 20)
    with path.open("wb") as out:
        for _ in range(file_size // len(chunk)):
            out.write(chunk)
        out.write(chunk[: file_size % len(chunk)])
    listener = socket.create_server((HOST, 0))
    # fork: the sink needs only the listening socket; this process has no other threads at this point.
    sink = multiprocessing.get_context("fork").Process(target=_sink, args=(listener,), daemon=True)
    sink.start()
    try:
        port = listener.getsockname()[1]
        return asyncio.run(_measure_all(port, path, sizes, total, rounds, progress))
    finally:
        sink.terminate()
        sink.join(10)
        listener.close()
        path.unlink(missing_ok=True)
