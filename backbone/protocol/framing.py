"""The size-prefixed frame every Kafka request and response travels in.

A frame is a big-endian int32 length followed by exactly that many bytes. The length is checked
against `socket.request.max.bytes` the moment its four bytes arrive, before any of the body is
buffered: a peer that announces a 2 GiB frame is refused without the broker reserving 2 GiB.
Negative lengths are refused too (Kafka's `InvalidReceiveException`). A zero length is a valid
frame; whatever parses the body decides that it is malformed.

Two ways in:

- `FrameDecoder`: incremental, as an asyncio `BufferedProtocol`'s buffer (the socket's bytes are
  received in place) or fed arbitrary chunks.
- `read_frame`: one frame from an `asyncio.StreamReader`.

After a `FrameError` the byte stream is no longer in step with frame boundaries, so the only
safe reaction is to close the connection; the decoder refuses further input to enforce that.
"""

from __future__ import annotations

import asyncio
import struct
import threading

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "ConnectionClosed",
    "FrameDecoder",
    "FrameError",
    "FrameTooLarge",
    "InvalidFrameSize",
    "encode_frame",
    "frame_prefix",
    "read_frame",
]

DEFAULT_MAX_FRAME_BYTES = 104_857_600
"""Kafka's default `socket.request.max.bytes` (100 MiB)."""

_SIZE = struct.Struct(">i")
PREFIX_BYTES = _SIZE.size

STREAM_BYTES = 64 * 1024
"""The shared receive buffer's size: frames up to this (prefix included) are split out of it."""
FIRST_BODY_BYTES = 4 * 1024
"""The smallest body buffer a larger frame starts with; it doubles as the frame's bytes arrive."""


class _StreamBuffer(threading.local):
    """One receive buffer per thread, lent to one decoder between `get_buffer` and `buffer_updated`
    (asyncio calls the two back to back), so a connection holds no buffer while it waits."""

    def __init__(self) -> None:
        self.buffer = bytearray(STREAM_BYTES)
        self.view = memoryview(self.buffer)
        self.borrower: FrameDecoder | None = None


_stream = _StreamBuffer()


class FrameError(Exception):
    """The byte stream cannot be read as frames any more; close the connection."""


class FrameTooLarge(FrameError):
    """A frame announced more bytes than the configured maximum."""

    def __init__(self, size: int, max_bytes: int) -> None:
        self.size = size
        self.max_bytes = max_bytes
        super().__init__(
            f"frame of {size} bytes exceeds the maximum of {max_bytes} bytes "
            "(raise socket.request.max.bytes if such requests are legitimate)"
        )


class InvalidFrameSize(FrameError):
    """A frame announced a negative length."""

    def __init__(self, size: int) -> None:
        self.size = size
        super().__init__(f"invalid frame size {size}: frame sizes cannot be negative")


class ConnectionClosed(FrameError):
    """The peer closed the connection.

    `partial_bytes` is 0 when it closed cleanly between frames and the number of bytes of the
    unfinished frame (prefix included) when it closed in the middle of one.
    """

    def __init__(self, partial_bytes: int = 0) -> None:
        self.partial_bytes = partial_bytes
        if partial_bytes:
            message = f"connection closed in the middle of a frame ({partial_bytes} bytes received)"
        else:
            message = "connection closed"
        super().__init__(message)

    @property
    def clean(self) -> bool:
        """Whether the peer closed between frames (a normal disconnect)."""
        return self.partial_bytes == 0


def _check_size(size: int, max_bytes: int) -> None:
    if size < 0:
        raise InvalidFrameSize(size)
    if size > max_bytes:
        raise FrameTooLarge(size, max_bytes)


def frame_prefix(size: int) -> bytes:
    """The four-byte length prefix for a frame whose body has `size` bytes."""
    return _SIZE.pack(size)


def encode_frame(payload: bytes | bytearray | memoryview) -> bytes:
    """`payload` preceded by its length prefix, as one bytes object."""
    return _SIZE.pack(len(payload)) + payload


class FrameDecoder:
    """Splits a byte stream into frame bodies, either as an asyncio `BufferedProtocol`'s buffer
    (`get_buffer` then `buffer_updated`, so the socket's bytes land where they stay) or fed chunks
    (`feed`, which copies each chunk through the same two steps).

    Frames that fit in the stream buffer (`STREAM_BYTES`, prefix included) are read with whatever
    else arrives into one buffer shared by every decoder of a thread, so idle connections cost
    nothing, and copied out of it. A larger frame gets its own body buffer once its prefix is in, and
    the socket fills it directly. That buffer is never sized from the prefix up front: it starts small
    (a few KiB, or about twice what came with the prefix) and doubles as it fills, so a peer that
    announces a 100 MB frame and sends five bytes costs kilobytes, not 100 MB.

    Returned frames are writable memoryviews that own their buffers; callers may keep them.
    """

    def __init__(self, max_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must not be negative, got {max_bytes}")
        self.max_bytes = max_bytes
        # An unfinished small frame (or prefix), kept here between reads: the stream buffer is shared.
        self._partial: bytes | bytearray = b""
        self._body: bytearray | None = None  # a large frame's body, filled in place
        self._filled = 0
        self._expected = 0
        self._error: FrameError | None = None

    @property
    def buffered_bytes(self) -> int:
        """Bytes of the unfinished frame received so far (prefix included)."""
        if self._body is None:
            return len(self._partial)
        return PREFIX_BYTES + self._filled

    @property
    def unfinished_frame_bytes(self) -> int:
        """The announced size of a frame too large for the stream buffer being received, else 0."""
        return self._expected if self._body is not None else 0

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """A non-empty buffer for the next bytes received; pass how many landed to `buffer_updated`
        before any other decoder of this thread is asked for one."""
        body = self._body
        if body is not None:
            if self._filled == len(body):
                body = self._grow(body)
            return memoryview(body)[self._filled :]
        stream = _stream
        stream.borrower = self
        held = len(self._partial)
        if held:
            stream.view[:held] = self._partial
        return stream.view[held:]

    def buffer_updated(self, nbytes: int) -> list[memoryview]:
        """`nbytes` were written at the start of the last `get_buffer`; return every frame completed.

        Raises `FrameTooLarge` or `InvalidFrameSize` as soon as a bad prefix is complete.
        """
        if self._error is not None:
            raise self._error
        body = self._body
        if body is not None:
            self._filled += nbytes
            if self._filled < self._expected:
                return []
            self._body = None
            return [memoryview(body)]
        stream = _stream
        if stream.borrower is not self:
            raise RuntimeError("buffer_updated() without a matching get_buffer()")
        stream.borrower = None
        return self._split(stream.buffer, len(self._partial) + nbytes)

    def _split(self, buffer: bytearray, end: int) -> list[memoryview]:
        frames: list[memoryview] = []
        pos = 0
        while end - pos >= PREFIX_BYTES:
            (size,) = _SIZE.unpack_from(buffer, pos)
            if size < 0 or size > self.max_bytes:
                try:
                    _check_size(size, self.max_bytes)
                except FrameError as error:
                    self._error = error
                    raise
            start = pos + PREFIX_BYTES
            stop = start + size
            if stop > end:
                if PREFIX_BYTES + size > STREAM_BYTES:
                    self._start_body(memoryview(buffer)[start:end], size)
                    self._partial = b""
                    return frames
                break
            frames.append(memoryview(buffer[start:stop]))
            pos = stop
        self._partial = buffer[pos:end] if pos < end else b""
        return frames

    def _start_body(self, received: memoryview, size: int) -> None:
        # Start at size / 2**k (rounded up), so that doubling ends on the frame's size give or take
        # 2**k bytes: a buffer that overshot would keep its spare capacity for as long as the frame lives.
        least = max(FIRST_BODY_BYTES, 2 * len(received))
        capacity = size
        while (capacity + 1) // 2 >= least:
            capacity = (capacity + 1) // 2
        body = bytearray(capacity)
        body[: len(received)] = received
        self._body, self._filled, self._expected = body, len(received), size

    def _grow(self, body: bytearray) -> bytearray:
        # `*= 2` reallocates (in place where the allocator can) and copies the body into its new half,
        # which the socket then overwrites: far cheaper here than extending with fresh zeroes, whose
        # pages the allocator maps and faults in anew for every frame.
        try:
            body *= 2
        except BufferError:  # someone still holds the last buffer handed out: move to a new one
            body = bytearray(body)
            body *= 2
        del body[self._expected :]  # the rounding up of the first capacity: under size / 4096 bytes
        self._body = body
        return body

    def feed(self, data: bytes | bytearray | memoryview) -> list[memoryview]:
        """Consume `data`; return the bodies of every frame it completes, in order.

        Raises `FrameTooLarge` or `InvalidFrameSize` as soon as a bad prefix is complete, even
        if the rest of `data` is not yet looked at.
        """
        if self._error is not None:
            raise self._error
        view = memoryview(data).cast("B")
        frames: list[memoryview] = []
        pos = 0
        while pos < len(view):
            with self.get_buffer() as buffer:
                taken = min(len(buffer), len(view) - pos)
                buffer[:taken] = view[pos : pos + taken]
            pos += taken
            frames += self.buffer_updated(taken)
        return frames

    def feed_eof(self) -> None:
        """The peer closed the connection: raise `ConnectionClosed` saying whether mid-frame."""
        raise ConnectionClosed(self.buffered_bytes)


async def read_frame(reader: asyncio.StreamReader, max_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> bytes:
    """Read one frame body from `reader`.

    Raises `ConnectionClosed` (check `.clean`) when the stream ends, `FrameTooLarge` or
    `InvalidFrameSize` when the prefix is unacceptable; in that case the body is not read.
    """
    try:
        prefix = await reader.readexactly(PREFIX_BYTES)
    except asyncio.IncompleteReadError as error:
        raise ConnectionClosed(len(error.partial)) from None
    (size,) = _SIZE.unpack(prefix)
    _check_size(size, max_bytes)
    try:
        return await reader.readexactly(size)
    except asyncio.IncompleteReadError as error:
        raise ConnectionClosed(PREFIX_BYTES + len(error.partial)) from None
