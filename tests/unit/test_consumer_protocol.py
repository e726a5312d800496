"""The consumer protocol's member metadata: ConsumerProtocolSubscription and ConsumerProtocolAssignment.

Round trips through every version, bytes written by kafka-python (its current classes and the old
ConsumerProtocolMemberMetadata/ConsumerProtocolMemberAssignment structs) read by us and ours by it,
forward compatibility with newer versions, and malformed input refused with MalformedMessage.
"""

from __future__ import annotations

import dataclasses
import struct

import pytest
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment as KpAssignment
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription as KpSubscription
from kafka.protocol.old.consumer_protocol import (
    ConsumerProtocolMemberAssignment_v0,
    ConsumerProtocolMemberMetadata_v0,
)
from kafka.structs import TopicPartition as KpTopicPartition

from backbone.protocol.headers import MalformedMessage
from backbone.wire.groups.consumer_protocol import (
    Assignment,
    Subscription,
    TopicPartition,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)

pytestmark = pytest.mark.unit


def tps(*names: str) -> tuple[TopicPartition, ...]:
    """tps("t-0", "u-2") -> (("t", 0), ("u", 2))"""
    return tuple((name.rsplit("-", 1)[0], int(name.rsplit("-", 1)[1])) for name in names)


FULL_SUBSCRIPTION = Subscription(
    topics=("orders", "clicks"),
    user_data=b"\x00\x01opaque",
    owned_partitions=tps("clicks-0", "orders-2", "orders-0"),
    generation=12,
    rack_id="rack-a",
)


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_subscription_round_trip_keeps_the_fields_of_its_version(version: int) -> None:
    decoded = decode_subscription(encode_subscription(FULL_SUBSCRIPTION, version), group_instance_id="i-1")
    assert decoded.topics == ("orders", "clicks")
    assert decoded.user_data == b"\x00\x01opaque"
    assert decoded.group_instance_id == "i-1"
    # Owned partitions go out grouped by topic, topics and partitions sorted.
    assert decoded.owned_partitions == (tps("clicks-0", "orders-0", "orders-2") if version >= 1 else ())
    assert decoded.generation == (12 if version >= 2 else -1)
    assert decoded.rack_id == ("rack-a" if version >= 3 else None)


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_assignment_round_trip(version: int) -> None:
    assignment = Assignment(partitions=tps("b-1", "a-0", "b-0"), user_data=b"x")
    decoded = decode_assignment(encode_assignment(assignment, version))
    assert decoded == Assignment(partitions=tps("a-0", "b-0", "b-1"), user_data=b"x")


def test_kafka_python_subscriptions_are_read() -> None:
    old = ConsumerProtocolMemberMetadata_v0(0, ["orders", "clicks"], b"ud").encode()
    assert decode_subscription(old) == Subscription(topics=("orders", "clicks"), user_data=b"ud")
    for version in range(4):
        data = KpSubscription(
            version=version,
            topics=["orders"],
            user_data=b"",
            owned_partitions=[KpSubscription.TopicPartition(topic="orders", partitions=[1, 3])],
            generation_id=4,
            rack_id="r1",
        ).encode()
        decoded = decode_subscription(data)
        assert decoded.topics == ("orders",)
        assert decoded.user_data == b""
        assert decoded.owned_partitions == (tps("orders-1", "orders-3") if version >= 1 else ())
        assert decoded.generation == (4 if version >= 2 else -1)
        assert decoded.rack_id == ("r1" if version >= 3 else None)


def test_kafka_python_reads_our_subscriptions() -> None:
    for version in range(4):
        theirs = KpSubscription.decode(encode_subscription(FULL_SUBSCRIPTION, version))
        assert theirs.version == version
        assert theirs.topics == ["orders", "clicks"]
        assert theirs.user_data == b"\x00\x01opaque"
        if version >= 1:
            assert [(tp.topic, tp.partitions) for tp in theirs.owned_partitions] == [
                ("clicks", [0]),
                ("orders", [0, 2]),
            ]
        if version >= 2:
            assert theirs.generation_id == 12
    old = ConsumerProtocolMemberMetadata_v0.decode(encode_subscription(FULL_SUBSCRIPTION, 0))
    assert (old.version, old.topics, old.user_data) == (0, ["orders", "clicks"], b"\x00\x01opaque")


def test_assignments_interoperate_with_kafka_python() -> None:
    old = ConsumerProtocolMemberAssignment_v0(0, [("t", [0, 2]), ("u", [1])], b"").encode()
    assert decode_assignment(old) == Assignment(partitions=tps("t-0", "t-2", "u-1"), user_data=b"")
    new = KpAssignment(version=3, assigned_partitions=[("t", [4])], user_data=None).encode()
    assert decode_assignment(new) == Assignment(partitions=tps("t-4"))
    ours = encode_assignment(Assignment(partitions=tps("u-1", "t-2", "t-0")))
    assert sorted(KpAssignment.decode(ours).partitions()) == [
        KpTopicPartition("t", 0),
        KpTopicPartition("t", 2),
        KpTopicPartition("u", 1),
    ]
    assert ConsumerProtocolMemberAssignment_v0.decode(
        encode_assignment(Assignment(tps("t-1")), 0)
    ).partitions() == [KpTopicPartition("t", 1)]


def test_newer_versions_are_read_as_the_newest_known() -> None:
    # A future v4 is v3's fields followed by more; Kafka reads it as v3 and ignores the rest.
    v3 = encode_subscription(FULL_SUBSCRIPTION, 3)
    future = struct.pack(">h", 4) + v3[2:] + b"\x00\x00\x00\x07new-field"
    assert decode_subscription(future) == dataclasses.replace(
        FULL_SUBSCRIPTION, owned_partitions=tps("clicks-0", "orders-0", "orders-2")
    )
    assignment = encode_assignment(Assignment(tps("t-0")), 3)
    assert decode_assignment(struct.pack(">h", 9) + assignment[2:]) == Assignment(tps("t-0"))


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00",
        b"\xff\xff\x00\x00\x00\x00",  # negative version
        b"\x00\x00\x00\x00\x00\x02\x00\x01a",  # two topics announced, one present
        b"\x00\x00\x00\x00\x00\x01\x00\x09ab",  # topic name longer than the data
        b"\x00\x00\x7f\xff\xff\xff",  # absurd array length
        b"\x00\x00\x00\x00\x00\x01\x00\x02\xff\xfe\xff\xff\xff\xff",  # topic name not UTF-8
    ],
)
def test_malformed_subscriptions_raise_malformed_message(data: bytes) -> None:
    with pytest.raises(MalformedMessage):
        decode_subscription(data)


def test_malformed_assignments_raise_malformed_message_and_empty_means_nothing() -> None:
    assert decode_assignment(b"") == Assignment(partitions=())
    for data in (b"\x00", b"\x00\x00\x00\x00\x00\x05", b"\x80\x00"):
        with pytest.raises(MalformedMessage):
            decode_assignment(data)


def test_values_outside_the_wire_types_are_refused_when_encoding() -> None:
    with pytest.raises(ValueError, match="cannot encode"):
        encode_assignment(Assignment(partitions=(("t", 2**31),)))
    with pytest.raises(ValueError, match="version"):
        encode_subscription(FULL_SUBSCRIPTION, 4)
