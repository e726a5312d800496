"""Zigzag varints as Kafka's record format (magic 2) writes them.

A record's length, timestamp delta, offset delta, key/value lengths and header fields are protobuf-style
varints over zigzag-encoded signed integers (0 -> 0, -1 -> 1, 1 -> 2, ...). Kafka's int fields take at most
5 bytes and its long fields (the timestamp delta) at most 10; this module accepts the 64-bit range for all
of them, the way the Java client's `ByteUtils.readVarlong` does, and rejects anything longer.

The record codec (`records.py`) inlines the one- and two-byte cases in its loops for speed and calls
`read_varint` only for the rest; the functions here are the reference those fast paths must agree with.
"""

from __future__ import annotations

from backbone.protocol.errors import CorruptMessageError
from backbone.protocol.headers import encode_uvarint

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
MAX_VARLONG_BYTES = 10

# Encodings of the small values every record uses (deltas, lengths of short keys and values, header
# counts), precomputed because building a bytes object per field is the encoder's main cost.
# Indexed by value + SMALL_VARINT_BIAS; the range is exactly the one- and two-byte varints.
SMALL_VARINT_BIAS = 8192


def _encode_slow(value: int) -> bytes:
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"varint {value} is outside the 64-bit range")
    return encode_uvarint(((value << 1) ^ (value >> 63)) & 0xFFFF_FFFF_FFFF_FFFF)


SMALL_VARINTS: tuple[bytes, ...] = tuple(
    _encode_slow(v) for v in range(-SMALL_VARINT_BIAS, SMALL_VARINT_BIAS)
)


def _decode_short(index: int) -> int:
    first = index & 0xFF
    second = index >> 8
    # A one-byte varint is looked up by its byte alone, so only row 0 holds them; the low halves of the
    # other rows are never looked up.
    one_byte = first if second == 0 else 0
    zigzag = one_byte if first < 0x80 else (first & 0x7F) | (second << 7)
    return (zigzag >> 1) ^ -(zigzag & 1)


# Decoded values of one- and two-byte varints, for decoders' inline fast paths: a one-byte varint `b`
# (b < 0x80) is SHORT_VARINTS[b]; a two-byte varint `b, b2` (b >= 0x80 > b2) is SHORT_VARINTS[b2 << 8 | b].
# One subscript instead of five arithmetic steps is worth ~15% of a record decoder's time in CPython.
SHORT_VARINTS: tuple[int, ...] = tuple(_decode_short(index) for index in range(1 << 15))


def encode_varint(value: int) -> bytes:
    """Zigzag varint bytes of a signed 64-bit integer."""
    if -SMALL_VARINT_BIAS <= value < SMALL_VARINT_BIAS:
        return SMALL_VARINTS[value + SMALL_VARINT_BIAS]
    return _encode_slow(value)


def size_of_varint(value: int) -> int:
    """Bytes `encode_varint(value)` takes."""
    if -SMALL_VARINT_BIAS <= value < SMALL_VARINT_BIAS:
        return 1 if -64 <= value < 64 else 2
    return len(_encode_slow(value))


def read_varint(buf: bytes | bytearray, pos: int) -> tuple[int, int]:
    """Decode the zigzag varint at `pos`; return (value, position after it).

    Raises CorruptMessageError when the buffer ends inside the varint or it is longer than 10 bytes.
    """
    result = 0
    shift = 0
    end = len(buf)
    while True:
        if pos >= end:
            raise CorruptMessageError("varint runs past the end of the buffer")
        if shift >= 7 * MAX_VARLONG_BYTES:
            raise CorruptMessageError(f"varint longer than {MAX_VARLONG_BYTES} bytes")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
        shift += 7
    if result > 0xFFFF_FFFF_FFFF_FFFF:
        raise CorruptMessageError("varint exceeds 64 bits")
    return (result >> 1) ^ -(result & 1), pos
