"""A response as chunks: bytes for the message's own fields and, in place of records, whatever the caller
holds (bytes, a memoryview, or a file region: any object with a `length` attribute), so the broker can write
the frame prefix and header, the byte chunks, and `sendfile` the regions without holding the records.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeAlias, runtime_checkable

from backbone.protocol.framing import frame_prefix
from backbone.protocol.headers import encode_response_header
from backbone.wire.fields import Buffer

__all__ = ["Chunk", "Records", "RecordsRegion", "chunk_length", "frame_chunks"]


@runtime_checkable
class RecordsRegion(Protocol):
    """Records that stay where they are (a file region); only their length is needed here."""

    @property
    def length(self) -> int: ...


Records: TypeAlias = bytes | bytearray | memoryview | RecordsRegion
Chunk: TypeAlias = bytes | bytearray | memoryview | RecordsRegion


def chunk_length(chunk: Chunk) -> int:
    if isinstance(chunk, bytes | bytearray):
        return len(chunk)
    if isinstance(chunk, memoryview):
        return chunk.nbytes
    return chunk.length


# Byte chunks are joined while the result stays this small: a small response goes out in one write (one
# system call, one wake-up of the reader) rather than one per chunk; larger ones are not copied.
_JOIN_LIMIT = 64 * 1024


def frame_chunks(correlation_id: int, header_version: int, body: Sequence[Chunk]) -> list[Chunk]:
    """Size prefix + response header + `body`; each byte chunk joined to the one before it while that
    stays within 64 KiB (a whole Produce response is one chunk), regions left as they are."""
    header = encode_response_header(correlation_id, header_version)
    if len(body) == 1:
        (only,) = body
        if type(only) is bytes and len(only) <= _JOIN_LIMIT:  # every small answer but Fetch's: one join
            return [frame_prefix(len(header) + len(only)) + header + only]
    size = len(header) + sum(chunk_length(chunk) for chunk in body)
    chunks: list[Chunk] = [frame_prefix(size) + header]
    for chunk in body:
        last = chunks[-1]
        if (
            isinstance(chunk, Buffer)
            and isinstance(last, bytes)
            and len(last) + chunk_length(chunk) <= _JOIN_LIMIT
        ):
            chunks[-1] = last + chunk
        else:
            chunks.append(chunk)
    return chunks
