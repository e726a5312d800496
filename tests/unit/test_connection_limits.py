"""Connection hygiene on a real listener: max.connections, max.connections.per.ip (+ overrides), and
connections.max.idle.ms closing idle and trickling (slowloris) connections while busy ones stay."""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import AsyncIterator

import pytest

from backbone.broker import network
from backbone.broker.config import Endpoint
from backbone.broker.connection_limits import ConnectionLimits, parse_overrides
from backbone.broker.network import Listener, RegionSender, RequestContext
from backbone.properties import ConfigError
from backbone.protocol.api import ApiKey, ApiTable
from backbone.protocol.framing import ConnectionClosed, encode_frame, read_frame
from backbone.protocol.headers import encode_request_header

pytestmark = pytest.mark.unit


async def echo(context: RequestContext) -> list[bytes]:
    return [bytes(context.frame[context.body_offset :])]


def limits(**values: object) -> ConnectionLimits:
    settings = {
        "max.connections": 2**31 - 1,
        "max.connections.per.ip": 2**31 - 1,
        "max.connections.per.ip.overrides": "",
        "connections.max.idle.ms": 600000,
    }
    settings.update(values)
    return ConnectionLimits(settings)


@contextlib.asynccontextmanager
async def serving(connection_limits: ConnectionLimits) -> AsyncIterator[Listener]:
    table: ApiTable[network.Handler] = ApiTable()
    table.register(ApiKey.PRODUCE, echo)
    listener = Listener(
        Endpoint("TEST", "127.0.0.1", 0, "PLAINTEXT"), table, RegionSender(), max_request_bytes=1 << 20
    )
    listener.limits = connection_limits
    await listener.start()
    await listener.start_serving()
    try:
        yield listener
    finally:
        await listener.stop()


async def answered(listener: Listener, reader_writer: tuple, body: bytes = b"ping") -> bool:
    """Whether a request on this connection is answered (False: the broker closed it)."""
    reader, writer = reader_writer
    writer.write(encode_frame(encode_request_header(ApiKey.PRODUCE, 3, 7, "t") + body))
    try:
        frame = await asyncio.wait_for(read_frame(reader, 1 << 20), 10)
    except (ConnectionClosed, ConnectionError):
        return False
    return struct.unpack_from(">i", frame)[0] == 7 and frame[4:] == body


async def closed_by_peer(reader: asyncio.StreamReader, timeout: float = 10) -> bool:
    try:
        return await asyncio.wait_for(reader.read(), timeout) == b""
    except (ConnectionResetError, BrokenPipeError):  # the close seen first by a write (the trickling one)
        return True


async def test_connections_beyond_the_limits_are_closed_at_once() -> None:
    connection_limits = limits(**{"max.connections.per.ip": 2})
    async with serving(connection_limits) as listener:
        first = await asyncio.open_connection("127.0.0.1", listener.port)
        second = await asyncio.open_connection("127.0.0.1", listener.port)
        third = await asyncio.open_connection("127.0.0.1", listener.port)
        assert await answered(listener, first) and await answered(listener, second)
        assert not await answered(listener, third)
        first[1].close()
        assert await closed_by_peer(first[0])
        # The broker counts the closed one out once it has noticed; then a new connection is taken.
        for _ in range(200):
            if connection_limits.by_ip["127.0.0.1"] < 2:
                break
            await asyncio.sleep(0.01)
        fourth = await asyncio.open_connection("127.0.0.1", listener.port)
        assert await answered(listener, fourth)
        for _, writer in (second, third, fourth):
            writer.close()


async def test_the_broker_wide_limit_and_per_address_overrides() -> None:
    connection_limits = limits(
        **{
            "max.connections": 3,
            "max.connections.per.ip": 1,
            "max.connections.per.ip.overrides": "127.0.0.1:5",
        }
    )
    async with serving(connection_limits) as listener:
        opened = [await asyncio.open_connection("127.0.0.1", listener.port) for _ in range(4)]
        results = [await answered(listener, pair) for pair in opened]
        assert results == [True, True, True, False]  # the override lifts the per-address 1; the total is 3
        for _, writer in opened:
            writer.close()
    with pytest.raises(ConfigError, match="address:count"):
        parse_overrides("127.0.0.1=5")


async def test_idle_and_trickling_connections_are_closed_while_busy_ones_stay() -> None:
    connection_limits = limits(**{"connections.max.idle.ms": 300})
    async with serving(connection_limits) as listener:

        async def reap() -> None:
            while True:
                connection_limits.close_idle([listener])
                await asyncio.sleep(0.05)

        reaper = asyncio.get_running_loop().create_task(reap())
        try:
            idle_reader, _ = await asyncio.open_connection("127.0.0.1", listener.port)
            trickle_reader, trickle_writer = await asyncio.open_connection("127.0.0.1", listener.port)
            busy = await asyncio.open_connection("127.0.0.1", listener.port)
            trickle_writer.write(struct.pack(">i", 1000) + b"x")  # a size prefix, then a byte now and then

            async def trickle() -> None:
                for _ in range(100):
                    await asyncio.sleep(0.05)
                    trickle_writer.write(b"x")

            trickling = asyncio.get_running_loop().create_task(trickle())
            # The busy connection asks every 50 ms for three times the idle bound and is always answered.
            for _ in range(18):
                assert await answered(listener, busy)
                await asyncio.sleep(0.05)
            assert await closed_by_peer(idle_reader)
            assert await closed_by_peer(trickle_reader)
            trickling.cancel()
            busy[1].close()
        finally:
            reaper.cancel()
