"""What the hand-written codecs share: struct formats, the version check, length and string writers, and a
reader of legacy or compact fields that turns any overrun into MalformedMessage.

Flexible versions use compact lengths (uvarint of n + 1; 0 is null) and end every struct with a tagged-field
section; older versions use fixed-size lengths (-1 is null).
"""

from __future__ import annotations

import struct
from typing import TypeAlias

from backbone.protocol.errors import UnsupportedVersionError
from backbone.protocol.headers import MalformedMessage, encode_uvarint, read_uvarint, skip_tagged_fields

Buffer: TypeAlias = bytes | bytearray | memoryview

I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")
I16_I32 = struct.Struct(">hi")
I16_I32_I32 = struct.Struct(">hii")
I32_I16_I64 = struct.Struct(">ihq")
I64_I64 = struct.Struct(">qq")
I32_I64 = struct.Struct(">iq")
I32_I32 = struct.Struct(">ii")
EMPTY_TAGS = b"\x00"


def check_version(version: int, accepted: range, what: str) -> None:
    if version not in accepted:
        raise UnsupportedVersionError(
            f"{what} fast path handles versions {accepted.start}-{accepted.stop - 1}, not {version}"
        )


def write_length(flexible: bool, size: int, legacy: struct.Struct) -> bytes:
    """A length prefix (-1 for null): compact uvarint(n + 1) or `legacy`."""
    return encode_uvarint(size + 1) if flexible else legacy.pack(size)


def write_string(flexible: bool, value: str | None) -> bytes:
    if value is None:
        return write_length(flexible, -1, I16)
    raw = value.encode("utf-8")
    return write_length(flexible, len(raw), I16) + raw


class Reader:
    """Reads legacy or compact fields from a response body; any overrun raises MalformedMessage."""

    __slots__ = ("buf", "flexible", "pos")

    def __init__(self, buf: Buffer, pos: int, flexible: bool) -> None:
        self.buf = buf
        self.pos = pos
        self.flexible = flexible

    def unpack(self, fmt: struct.Struct) -> tuple[int, ...]:
        values = fmt.unpack_from(self.buf, self.pos)
        self.pos += fmt.size
        return values

    def length(self, legacy: struct.Struct) -> int:
        """An array, string or bytes length; -1 is null."""
        if self.flexible:
            raw, self.pos = read_uvarint(self.buf, self.pos)
            return raw - 1
        (size,) = legacy.unpack_from(self.buf, self.pos)
        self.pos += legacy.size
        return size

    def array_length(self) -> int:
        size = self.length(I32)
        if size > len(self.buf) - self.pos:
            raise MalformedMessage(f"array of {size} elements in {len(self.buf) - self.pos} bytes")
        return size

    def string(self) -> str | None:
        size = self.length(I16)
        if size < 0:
            return None
        end = self.pos + size
        if end > len(self.buf):
            raise MalformedMessage("string runs past the end of the response")
        value = str(self.buf[self.pos : end], "utf-8")
        self.pos = end
        return value

    def tags(self) -> None:
        if self.flexible:
            self.pos = skip_tagged_fields(self.buf, self.pos)
