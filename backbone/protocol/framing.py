"""The size-prefixed frame every Kafka request and response travels in.

A frame is a big-endian int32 length followed by exactly that many bytes. The length is checked
against `socket.request.max.bytes` the moment its four bytes arrive, before any of the body is
buffered: a peer that announces a 2 GiB frame is refused without the broker reserving 2 GiB.
Negative lengths are refused too (Kafka's `InvalidReceiveException`). A zero length is a valid
frame; whatever parses the body decides that it is malformed.

Two ways in:

- `FrameDecoder`: incremental, for code that receives arbitrary chunks (an asyncio `Protocol`).
- `read_frame`: one frame from an `asyncio.StreamReader`.

After a `FrameError` the byte stream is no longer in step with frame boundaries, so the only
safe reaction is to close the connection; the decoder refuses further input to enforce that.
"""

from __future__ import annotations

import asyncio
import struct

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
    """Splits a byte stream into frame bodies, fed one received chunk at a time.

    Each frame body grows in its own buffer as its bytes arrive. The buffer is never sized from the
    prefix up front: a peer that announces a 100 MB frame and sends five bytes must cost five bytes,
    not 100 MB (many such connections would otherwise exhaust memory). The returned memoryviews own
    their buffers; callers may keep them.
    """

    def __init__(self, max_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must not be negative, got {max_bytes}")
        self.max_bytes = max_bytes
        self._prefix = bytearray()
        self._body: bytearray | None = None
        self._expected = 0
        self._error: FrameError | None = None

    @property
    def buffered_bytes(self) -> int:
        """Bytes of the unfinished frame received so far (prefix included)."""
        if self._body is None:
            return len(self._prefix)
        return PREFIX_BYTES + len(self._body)

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
        end = len(view)
        while pos < end:
            if self._body is None:
                take = min(PREFIX_BYTES - len(self._prefix), end - pos)
                self._prefix += view[pos : pos + take]
                pos += take
                if len(self._prefix) < PREFIX_BYTES:
                    break
                (size,) = _SIZE.unpack(self._prefix)
                try:
                    _check_size(size, self.max_bytes)
                except FrameError as error:
                    self._error = error
                    raise
                self._prefix.clear()
                self._body = bytearray()
                self._expected = size
            body = self._body
            take = min(self._expected - len(body), end - pos)
            body += view[pos : pos + take]
            pos += take
            if len(body) == self._expected:
                frames.append(memoryview(body))
                self._body = None
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
