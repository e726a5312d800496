"""Zigzag varints: Kafka's encodings, edge values, the fast-path table, and malformed input."""

from __future__ import annotations

import pytest

from backbone.protocol.errors import CorruptMessageError
from backbone.protocol.varint import (
    INT64_MAX,
    INT64_MIN,
    SHORT_VARINTS,
    encode_varint,
    read_varint,
    size_of_varint,
)

pytestmark = pytest.mark.unit

# Values and their encodings as Kafka's ByteUtils.writeVarlong produces them.
KNOWN = [
    (0, b"\x00"),
    (-1, b"\x01"),
    (1, b"\x02"),
    (-64, b"\x7f"),
    (63, b"\x7e"),
    (64, b"\x80\x01"),
    (-65, b"\x81\x01"),
    (200, b"\x90\x03"),
    (8191, b"\xfe\x7f"),
    (-8192, b"\xff\x7f"),
    (8192, b"\x80\x80\x01"),
    (2**31 - 1, b"\xfe\xff\xff\xff\x0f"),
    (-(2**31), b"\xff\xff\xff\xff\x0f"),
    (INT64_MAX, b"\xfe" + b"\xff" * 8 + b"\x01"),
    (INT64_MIN, b"\xff" * 9 + b"\x01"),
]


@pytest.mark.parametrize(("value", "encoded"), KNOWN)
def test_known_encodings(value: int, encoded: bytes) -> None:
    assert encode_varint(value) == encoded
    assert size_of_varint(value) == len(encoded)
    assert read_varint(encoded, 0) == (value, len(encoded))


def test_round_trip_at_an_offset() -> None:
    values = [*range(-70_000, 70_000, 7), 2**40, -(2**40), 1_700_000_000_000, INT64_MAX - 1, INT64_MIN + 1]
    for value in values:
        encoded = encode_varint(value)
        buf = b"\xaa\xbb" + encoded + b"\xcc"
        assert read_varint(buf, 2) == (value, 2 + len(encoded)), value
        assert size_of_varint(value) == len(encoded)


@pytest.mark.parametrize("value", [INT64_MAX + 1, INT64_MIN - 1, 2**70])
def test_encoding_outside_int64_raises(value: int) -> None:
    with pytest.raises(ValueError, match="64-bit"):
        encode_varint(value)


def test_truncated_varint_raises_corrupt_message() -> None:
    with pytest.raises(CorruptMessageError, match="past the end"):
        read_varint(b"\x80\x80", 0)
    with pytest.raises(CorruptMessageError, match="past the end"):
        read_varint(b"", 0)


def test_varint_longer_than_ten_bytes_raises_corrupt_message() -> None:
    with pytest.raises(CorruptMessageError, match="longer than 10"):
        read_varint(b"\x80" * 10 + b"\x00", 0)


def test_ten_byte_varint_beyond_64_bits_raises_corrupt_message() -> None:
    with pytest.raises(CorruptMessageError, match="64 bits"):
        read_varint(b"\xff" * 9 + b"\x7f", 0)


def test_short_table_matches_the_general_decoder() -> None:
    # The decoders' fast paths index SHORT_VARINTS by b (one byte) or b2 << 8 | b (two bytes).
    for b in range(0x80):
        assert SHORT_VARINTS[b] == read_varint(bytes([b]), 0)[0]
    for b in range(0x80, 0x100):
        for b2 in range(0x80):
            assert SHORT_VARINTS[b2 << 8 | b] == read_varint(bytes([b, b2]), 0)[0]
