"""Sending log file regions to a client: read into memory and written, or `sendfile` (zero copy), by size.

Which path is faster depends on the machine. On both machines the project has measured (Intel and AMD
virtual cores, virtual disk, loopback), reading a region with `pread` and writing it through the transport
was as fast or faster than asyncio's `loop.sendfile` at every region size from 16 KiB to 8 MiB (every
`loop.sendfile` first waits for the transport's buffer to empty). So regions are read and written, a slice
of at most READ_SLICE bytes at a time with a wait for the transport to drain between slices, which keeps
the memory a large fetch holds bounded; only regions of at least `sendfile_threshold` bytes (the broker's
`fetch.sendfile.threshold.bytes`, 0: always) go out with `loop.sendfile`, and never over TLS.
`ops/bench/machine_bench.py` measures both paths per size on a machine and recommends a value.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from backbone.broker.network import Connection, RegionSender
from backbone.log.files import FileRegion

DEFAULT_SENDFILE_THRESHOLD = 16 << 20  # twice the largest region measured: effectively never, as measured
READ_SLICE = 1 << 20
# Regions up to this size are read into the answer's single write (Connection.write_chunks) instead of a
# write of their own between the answer's other bytes: one segment, one wake-up of the client, not three.
INLINE_MAX_BYTES = 256 << 10


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

    def inline(self, connection: Connection, region: object) -> bytes | None:
        assert isinstance(region, (Regions, FileRegion))
        if region.length > INLINE_MAX_BYTES or region.length >= self.sendfile_threshold:
            return None
        if isinstance(region, Regions):
            return b"".join(part.read() for part in region.parts)
        return region.read()

    async def send(self, connection: Connection, region: object) -> None:
        parts = region.parts if isinstance(region, Regions) else (region,)
        for part in parts:
            assert isinstance(part, FileRegion)
            await self._send_one(connection, part)

    async def _send_one(self, connection: Connection, region: FileRegion) -> None:
        transport = connection.transport
        if transport is None or connection.closed:
            return
        # Zero copy cannot go through TLS (the kernel would send the file's plaintext), so TLS connections
        # always read and write.
        if region.length >= self.sendfile_threshold and transport.get_extra_info("sslcontext") is None:
            loop = asyncio.get_running_loop()
            # The segment file is opened O_APPEND, so sendfile moving its file position cannot misplace
            # appends. asyncio's native sendfile uses only the file's fileno(), which SegmentFile has;
            # typeshed asks for a whole IO[bytes].
            await loop.sendfile(
                transport,
                region.file,  # type: ignore[arg-type]
                region.position,
                region.length,
            )
            return
        if region.length <= READ_SLICE:
            transport.write(region.read())
            return
        for start in range(0, region.length, READ_SLICE):
            await connection.drained()
            if connection.closed:
                return
            transport.write(region.part(start, READ_SLICE).read())
