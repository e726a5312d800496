"""Sending log file regions to a client: `sendfile` (zero copy) or a read into memory, by size.

On this machine's virtual disk and loopback, a `sendfile` call has been seen slower than reading the
bytes and writing them (every sendfile first waits for the transport's buffer to empty), so small regions
are read with one `pread` and written through the transport, and only regions of at least
`sendfile_threshold` bytes go out with `loop.sendfile`. Which path is faster at which size depends on
the machine: `ops/bench/machine_bench.py` measures both and recommends a value for the broker's
`fetch.sendfile.threshold.bytes` (0: always sendfile; larger than any fetch: never).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from backbone.broker.network import Connection, RegionSender
from backbone.log.files import FileRegion

DEFAULT_SENDFILE_THRESHOLD = 1 << 20


@dataclass(frozen=True, slots=True)
class Regions:
    """Several file regions sent as one records field (a read that crossed segments)."""

    parts: tuple[FileRegion, ...]

    @property
    def length(self) -> int:
        return sum(part.length for part in self.parts)


class FileRegionSender(RegionSender):
    def __init__(self, sendfile_threshold: int = DEFAULT_SENDFILE_THRESHOLD) -> None:
        self.sendfile_threshold = sendfile_threshold

    async def send(self, connection: Connection, region: object) -> None:
        parts = region.parts if isinstance(region, Regions) else (region,)
        for part in parts:
            assert isinstance(part, FileRegion)
            await self._send_one(connection, part)

    async def _send_one(self, connection: Connection, region: FileRegion) -> None:
        transport = connection.transport
        if transport is None or connection.closed:
            return
        if region.length < self.sendfile_threshold:
            transport.write(region.read())
            return
        loop = asyncio.get_running_loop()
        # The segment file is opened O_APPEND, so sendfile moving its file position cannot misplace appends.
        await loop.sendfile(transport, region.file, region.position, region.length)
