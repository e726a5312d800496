"""Record formats of `__consumer_offsets` (Kafka's key and value schemas) and the group-to-partition hash."""

from __future__ import annotations

import struct

import pytest

from backbone.consumer_groups.group_types import GroupSnapshot, MemberSnapshot
from backbone.consumer_groups.offsets_topic import (
    CommittedOffset,
    GroupKey,
    OffsetKey,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
    java_string_hashcode,
    partition_for,
)
from backbone.protocol.errors import CorruptMessageError

pytestmark = pytest.mark.unit


def kafka_string(text: str | None) -> bytes:
    if text is None:
        return struct.pack(">h", -1)
    data = text.encode()
    return struct.pack(">h", len(data)) + data


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("Aa", 2112),  # "Aa" and "BB" collide in Java too
        ("BB", 2112),
        ("é", 233),
        ("😀", 1772899),  # outside the BMP: two UTF-16 code units, as Java counts them
        ("polygenelubricants", -(2**31)),
    ],
)
def test_java_string_hashcode(text: str, expected: int) -> None:
    assert java_string_hashcode(text) == expected


def test_partition_for_is_kafkas_abs_hash_modulo() -> None:
    assert partition_for("hello", 50) == 99162322 % 50
    # A hash code that is negative: Kafka takes its absolute value.
    negative = next(g for g in (f"group-{i}" for i in range(1000)) if java_string_hashcode(g) < 0)
    assert partition_for(negative, 50) == abs(java_string_hashcode(negative)) % 50
    # Kafka's Utils.abs maps Integer.MIN_VALUE to 0 (Math.abs would leave it negative).
    assert partition_for("polygenelubricants", 50) == 0
    assert all(0 <= partition_for(f"g{i}", 7) < 7 for i in range(500))


def test_offset_key_is_kafkas_layout() -> None:
    encoded = encode_offset_key("my-group", "events", 3)
    assert encoded == struct.pack(">h", 1) + kafka_string("my-group") + kafka_string("events") + struct.pack(
        ">i", 3
    )
    assert decode_key(encoded) == OffsetKey("my-group", "events", 3)


def test_group_key_is_kafkas_layout() -> None:
    encoded = encode_group_key("my-group")
    assert encoded == struct.pack(">h", 2) + kafka_string("my-group")
    assert decode_key(encoded) == GroupKey("my-group")


def test_offset_key_version_0_reads_too() -> None:
    old = struct.pack(">h", 0) + kafka_string("g") + kafka_string("t") + struct.pack(">i", 9)
    assert decode_key(old) == OffsetKey("g", "t", 9)


def test_offset_value_v3_round_trip_and_layout() -> None:
    committed = CommittedOffset(
        offset=12345, leader_epoch=7, metadata="checkpoint ä", commit_timestamp_ms=1_700_000_000_000
    )
    encoded = encode_offset_value(committed)
    assert encoded == (
        struct.pack(">hqi", 3, 12345, 7) + kafka_string("checkpoint ä") + struct.pack(">q", 1_700_000_000_000)
    )
    assert decode_offset_value(encoded) == committed


@pytest.mark.parametrize(
    ("version", "body"),
    [
        (0, struct.pack(">q", 42) + kafka_string("m") + struct.pack(">q", 1000)),
        (1, struct.pack(">q", 42) + kafka_string("m") + struct.pack(">qq", 1000, 99999)),
        (2, struct.pack(">q", 42) + kafka_string("m") + struct.pack(">q", 1000)),
    ],
)
def test_older_offset_values_read(version: int, body: bytes) -> None:
    decoded = decode_offset_value(struct.pack(">h", version) + body)
    assert decoded == CommittedOffset(offset=42, leader_epoch=-1, metadata="m", commit_timestamp_ms=1000)


def snapshot(members: int = 2) -> GroupSnapshot:
    return GroupSnapshot(
        protocol_type="consumer",
        generation_id=5,
        protocol_name="range",
        leader_id="member-0" if members else None,
        state_timestamp_ms=1_700_000_000_123,
        members=[
            MemberSnapshot(
                member_id=f"member-{i}",
                group_instance_id=None if i % 2 else f"instance-{i}",
                client_id="app",
                client_host="/127.0.0.1",
                rebalance_timeout_ms=300_000,
                session_timeout_ms=45_000,
                subscription=b"\x00\x01sub",
                assignment=b"\x00\x01assigned" * i,
            )
            for i in range(members)
        ],
    )


@pytest.mark.parametrize("members", [0, 1, 3])
def test_group_value_v3_round_trip(members: int) -> None:
    original = snapshot(members)
    assert decode_group_value(encode_group_value(original)) == original


def test_group_value_v3_layout() -> None:
    encoded = encode_group_value(snapshot(1))
    expected = (
        struct.pack(">h", 3)
        + kafka_string("consumer")
        + struct.pack(">i", 5)
        + kafka_string("range")
        + kafka_string("member-0")
        + struct.pack(">q", 1_700_000_000_123)
        + struct.pack(">i", 1)
        + kafka_string("member-0")
        + kafka_string("instance-0")
        + kafka_string("app")
        + kafka_string("/127.0.0.1")
        + struct.pack(">ii", 300_000, 45_000)
        + struct.pack(">i", 5)
        + b"\x00\x01sub"
        + struct.pack(">i", 0)
    )
    assert encoded == expected


def test_group_value_version_1_reads_without_instance_ids_and_state_time() -> None:
    member = (
        kafka_string("m1")
        + kafka_string("client")
        + kafka_string("/10.0.0.1")
        + struct.pack(">ii", 60_000, 10_000)  # rebalance timeout, then session timeout
        + struct.pack(">i", 1)
        + b"s"
        + struct.pack(">i", 1)
        + b"a"
    )
    old = (
        struct.pack(">h", 1)
        + kafka_string("consumer")
        + struct.pack(">i", 2)
        + kafka_string("roundrobin")
        + kafka_string("m1")
        + struct.pack(">i", 1)
        + member
    )
    decoded = decode_group_value(old)
    assert decoded.state_timestamp_ms == -1
    assert decoded.generation_id == 2
    assert decoded.members == [MemberSnapshot("m1", None, "client", "/10.0.0.1", 60_000, 10_000, b"s", b"a")]


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00",
        struct.pack(">h", 9) + kafka_string("g"),  # unknown key version
        struct.pack(">h", 1) + kafka_string("g") + kafka_string("t"),  # partition missing
        struct.pack(">h", 1) + struct.pack(">h", 50) + b"short",  # string longer than the record
        struct.pack(">h", 2) + struct.pack(">h", -1),  # null group id
        struct.pack(">h", 2) + struct.pack(">h", 2) + b"\xff\xfe",  # not UTF-8
    ],
)
def test_damaged_keys_raise_corrupt_message(data: bytes) -> None:
    with pytest.raises(CorruptMessageError):
        decode_key(data)


def test_damaged_values_raise_corrupt_message() -> None:
    value = encode_offset_value(CommittedOffset(1, 1, "m", 1))
    with pytest.raises(CorruptMessageError):
        decode_offset_value(value[:-3])
    group = encode_group_value(snapshot(2))
    with pytest.raises(CorruptMessageError):
        decode_group_value(group[:-1])
