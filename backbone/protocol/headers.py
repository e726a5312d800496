"""Request and response headers, and which header version each (API key, API version) uses.

Request headers:

- v0: api_key int16, api_version int16, correlation_id int32 (only ControlledShutdown v0).
- v1: v0 + client_id (nullable int16-length string).
- v2: v1 + tagged fields. client_id stays a *legacy* string even here: Kafka special-cases it
  so a broker can always read the header of an ApiVersions request it does not understand.

Response headers: v0 is correlation_id int32; v1 adds tagged fields.

An API version uses the flexible header (request v2, response v1) exactly when that version is a
"flexible version" of the API in Kafka's message schemas. kio generates one class per version
with a `__flexible__` flag; flexible versions are always an open range "N+", so the first
flexible version kio knows for an API decides it for every later version too, including versions
newer than kio knows (a client may send ApiVersions v5 to a broker that speaks up to v4).

The famous exception: the ApiVersions *response* header is always v0, even for flexible
ApiVersions versions, because a client must read it before it knows which versions the broker
speaks.

Header tagged fields are skipped whatever their tags: none are defined today, and the protocol
requires readers to ignore tags they do not know.

This module also holds the wire primitives the fast paths share (unsigned varints, skipping a
tagged-field section). Readers raise `MalformedMessage`, an `InvalidRequestError`: that is what
the broker answers (or closes the connection over) when a request cannot be parsed.
"""

from __future__ import annotations

import struct
from functools import cache
from typing import Final, NamedTuple

from kio.index import load_request_schema
from kio.schema.index import api_key_map, schema_name_map

from backbone.protocol.errors import InvalidRequestError

__all__ = [
    "API_VERSIONS_KEY",
    "MalformedMessage",
    "RequestHeader",
    "decode_request_header",
    "decode_response_header",
    "encode_request_header",
    "encode_response_header",
    "encode_uvarint",
    "first_flexible_version",
    "is_flexible",
    "read_uvarint",
    "request_header_version",
    "response_header_version",
    "skip_tagged_fields",
]

API_VERSIONS_KEY: Final = 18
_CONTROLLED_SHUTDOWN_KEY: Final = 7

_KEY_VERSION_CORRELATION = struct.Struct(">hhi")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_EMPTY_TAGS = b"\x00"

# Buffers the readers accept: anything supporting the buffer protocol with byte items.
Buffer = bytes | bytearray | memoryview


# -- wire primitives -------------------------------------------------------------------------


class MalformedMessage(InvalidRequestError):
    """Bytes that do not parse as the message they claim to be (truncated, bad lengths, ...)."""


def encode_uvarint(value: int) -> bytes:
    """`value` (>= 0) as an unsigned varint (7 bits a byte, least significant group first)."""
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_uvarint(buf: Buffer, pos: int) -> tuple[int, int]:
    """The unsigned varint at `pos` and the position after it."""
    result = 0
    shift = 0
    end = len(buf)
    while True:
        if pos >= end:
            raise MalformedMessage("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            # Kafka's unsigned varints are at most 5 bytes (32 bits).
            raise MalformedMessage("varint longer than 5 bytes")


def skip_tagged_fields(buf: Buffer, pos: int) -> int:
    """Skip a tagged-field section (count, then tag/size/bytes each); return the position after."""
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
        if pos > len(buf):
            raise MalformedMessage("tagged field runs past the end of the message")
    return pos


# -- which header version ---------------------------------------------------------------------


@cache
def first_flexible_version(api_key: int) -> int | None:
    """The first flexible version of `api_key` per Kafka's schemas (via kio), None if none."""
    name = api_key_map.get(api_key)
    if name is None:
        return None
    # Once flexible, every later version is too; a binary search imports a few schema modules, not all.
    versions = sorted(schema_name_map[name])
    low, high = 0, len(versions)
    while low < high:
        middle = (low + high) // 2
        if load_request_schema(api_key, versions[middle]).__flexible__:
            high = middle
        else:
            low = middle + 1
    return versions[low] if low < len(versions) else None


def is_flexible(api_key: int, api_version: int) -> bool:
    """Whether this version uses compact encodings and tagged fields."""
    first = first_flexible_version(api_key)
    return first is not None and api_version >= first


def request_header_version(api_key: int, api_version: int) -> int:
    if api_key == _CONTROLLED_SHUTDOWN_KEY and api_version == 0:
        return 0
    return 2 if is_flexible(api_key, api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    if api_key == API_VERSIONS_KEY:
        return 0
    return 1 if is_flexible(api_key, api_version) else 0


# -- request header ---------------------------------------------------------------------------


class RequestHeader(NamedTuple):
    """A decoded request header: a tuple, built once per request (a frozen dataclass costs ~3x to build)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header_version: int

    @property
    def response_header_version(self) -> int:
        """The answer's header version, as `response_header_version` gives it, read off this header: flexible
        (1) exactly when this header is (2), but for ApiVersions (always 0)."""
        return 1 if self.header_version == 2 and self.api_key != API_VERSIONS_KEY else 0


def decode_request_header(buf: Buffer, pos: int = 0) -> tuple[RequestHeader, int]:
    """Parse the request header at `pos`; return it and the position where the body starts.

    Unknown API keys parse as header v1: the fields every client needs echoed (correlation id)
    come first in every version, so the broker can still answer or log the request.
    """
    if len(buf) - pos < _KEY_VERSION_CORRELATION.size:
        raise MalformedMessage("request shorter than its header")
    api_key, api_version, correlation_id = _KEY_VERSION_CORRELATION.unpack_from(buf, pos)
    pos += _KEY_VERSION_CORRELATION.size
    version = request_header_version(api_key, api_version)
    client_id = None
    if version >= 1:
        client_id, pos = _read_client_id(buf, pos)
    if version >= 2:
        pos = skip_tagged_fields(buf, pos)
    header = RequestHeader(api_key, api_version, correlation_id, client_id, version)
    return header, pos


def _read_client_id(buf: Buffer, pos: int) -> tuple[str | None, int]:
    if len(buf) - pos < 2:
        raise MalformedMessage("truncated client id")
    (size,) = _INT16.unpack_from(buf, pos)
    pos += 2
    if size < 0:
        return None, pos
    if len(buf) - pos < size:
        raise MalformedMessage("truncated client id")
    # Java's String(bytes, UTF_8) replaces malformed sequences; a client id is for logs and
    # quotas only, so being as lenient as Kafka beats refusing the connection.
    return str(buf[pos : pos + size], "utf-8", "replace"), pos + size


def encode_request_header(
    api_key: int,
    api_version: int,
    correlation_id: int,
    client_id: str | None,
    header_version: int | None = None,
) -> bytes:
    """The request header bytes; the version follows the API's schema unless given."""
    if header_version is None:
        header_version = request_header_version(api_key, api_version)
    out = _KEY_VERSION_CORRELATION.pack(api_key, api_version, correlation_id)
    if header_version >= 1:
        if client_id is None:
            out += _INT16.pack(-1)
        else:
            raw = client_id.encode("utf-8")
            out += _INT16.pack(len(raw)) + raw
    if header_version >= 2:
        out += _EMPTY_TAGS
    return out


# -- response header --------------------------------------------------------------------------


def encode_response_header(correlation_id: int, header_version: int) -> bytes:
    out = _INT32.pack(correlation_id)
    return out + _EMPTY_TAGS if header_version >= 1 else out


def decode_response_header(buf: Buffer, header_version: int, pos: int = 0) -> tuple[int, int]:
    """The correlation id at `pos` and the position where the response body starts."""
    if len(buf) - pos < 4:
        raise MalformedMessage("response shorter than its header")
    (correlation_id,) = _INT32.unpack_from(buf, pos)
    pos += 4
    if header_version >= 1:
        pos = skip_tagged_fields(buf, pos)
    return correlation_id, pos
