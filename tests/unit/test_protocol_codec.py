"""The general codec: kio readers/writers by (key, version), frames, unknown tags, bad input."""

from __future__ import annotations

import datetime
import struct

import pytest
from kafka.protocol.metadata import ApiVersionsResponse as KpApiVersionsResponse
from kafka.protocol.metadata import MetadataRequest as KpMetadataRequest
from kafka.protocol.metadata import MetadataResponse as KpMetadataResponse
from kio.schema.fetch.v12.request import FetchRequest as FetchRequestV12
from kio.schema.metadata.v1.response import MetadataResponse as MetadataResponseV1
from kio.schema.metadata.v12.request import MetadataRequest as MetadataRequestV12
from kio.schema.metadata.v12.request import MetadataRequestTopic
from kio.schema.metadata.v12.response import MetadataResponse as MetadataResponseV12
from kio.static.primitive import i32Timedelta

from backbone.protocol import codec
from backbone.protocol.codec import (
    decode_request,
    decode_response,
    encode,
    encode_request_frame,
    encode_response_frame,
    request_type,
    response_type,
)
from backbone.protocol.errors import ErrorCode, UnsupportedVersionError
from backbone.protocol.headers import MalformedMessage, decode_request_header, encode_uvarint
from backbone.wire.fetch import FetchPartitionResult, encode_fetch_response

pytestmark = pytest.mark.unit


def tags(*entries: tuple[int, bytes]) -> bytes:
    out = encode_uvarint(len(entries))
    for tag, value in entries:
        out += encode_uvarint(tag) + encode_uvarint(len(value)) + value
    return out


def metadata_request(names: tuple[str, ...] | None) -> MetadataRequestV12:
    topics = None if names is None else tuple(MetadataRequestTopic(topic_id=None, name=n) for n in names)
    return MetadataRequestV12(
        topics=topics, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )


def test_types_are_looked_up_by_key_and_version() -> None:
    assert request_type(3, 12) is MetadataRequestV12
    assert response_type(3, 1) is MetadataResponseV1
    with pytest.raises(UnsupportedVersionError):
        request_type(0, 2)  # Produce v0-2: gone from Kafka 4's schemas
    with pytest.raises(UnsupportedVersionError):
        response_type(12345, 0)


def test_readers_and_writers_are_cached() -> None:
    data = encode(metadata_request(("a",)))
    decode_request(3, 12, data)
    before = codec._reader.cache_info().hits
    decode_request(3, 12, data)
    assert codec._reader.cache_info().hits == before + 1


def test_decode_at_an_offset_after_the_header() -> None:
    request = KpMetadataRequest(version=4, topics=[KpMetadataRequest.MetadataRequestTopic(name="x")])
    request.with_header(correlation_id=3, client_id="c")
    data = bytes(request.encode(header=True))
    header, pos = decode_request_header(data)
    decoded = decode_request(header.api_key, header.api_version, data, pos)
    assert [t.name for t in decoded.topics] == ["x"]


def test_trailing_bytes_after_a_request_are_ignored() -> None:
    # librdkafka's Metadata v12 for all topics (a null array) leaves three spare bytes; Kafka reads on.
    data = encode(metadata_request(None))
    assert decode_request(3, 12, data + b"\x00\x00\x00") == decode_request(3, 12, data)


def test_trailing_bytes_after_a_response_are_malformed() -> None:
    response = MetadataResponseV12(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)), brokers=(), cluster_id="c", topics=()
    )
    data = encode(response)
    with pytest.raises(MalformedMessage, match="trailing"):
        decode_response(3, 12, data + b"\x00")


def test_every_truncation_is_malformed() -> None:
    data = encode(metadata_request(("abc",)))
    for end in range(len(data)):
        with pytest.raises(MalformedMessage) as raised:
            decode_request(3, 12, data[:end])
        assert raised.value.code is ErrorCode.invalid_request


def test_invalid_utf8_is_malformed() -> None:
    # Metadata v1: an array of one topic name, two bytes that are not UTF-8.
    with pytest.raises(MalformedMessage):
        decode_request(3, 1, b"\x00\x00\x00\x01\x00\x02\xff\xfe")


def test_known_tags_survive_next_to_unknown_ones() -> None:
    request = FetchRequestV12(
        cluster_id="cluster-x",
        max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=100)),
        min_bytes=1,
        topics=(),
        forgotten_topics_data=(),
    )
    data = encode(request)
    assert data.endswith(tags((0, b"\x0acluster-x")))
    with_unknown = data[: -len(tags((0, b"\x0acluster-x")))] + tags((0, b"\x0acluster-x"), (5, b"zz"))
    assert decode_request(1, 12, with_unknown) == request


def test_unknown_tags_inside_a_known_tagged_struct() -> None:
    # Fetch response v12: DivergingEpoch (tag 0) is a struct with its own tagged fields.
    part = FetchPartitionResult(0, 0, 10, 10, 0, None, -1, None, diverging_epoch=(6, 880))
    data = b"".join(bytes(c) for c in encode_fetch_response(12, [("t", [part])]))
    value = struct.pack(">iq", 6, 880)
    plain_tag = b"\x01" + b"\x00" + encode_uvarint(len(value) + 1) + value + b"\x00"
    assert plain_tag in data
    inner = value + tags((3, b"new"))
    nested = b"\x01" + b"\x00" + encode_uvarint(len(inner)) + inner
    decoded = decode_response(1, 12, data.replace(plain_tag, nested))
    assert decoded == decode_response(1, 12, data)
    assert decoded.responses[0].partitions[0].diverging_epoch.end_offset == 880


def test_a_tag_overrunning_the_message_is_malformed() -> None:
    head = b"\x00" + b"\x00\x01\x00\x00\x03\xe8" + b"\x01"
    with pytest.raises(MalformedMessage):
        decode_request(0, 9, head + b"\x01\x09\x7fshort")


def test_api_versions_response_frame_uses_header_v0_even_when_flexible() -> None:
    from backbone.protocol.api import ApiKey, ApiTable

    table: ApiTable[None] = ApiTable()
    table.register(ApiKey.API_VERSIONS, None)
    frame = encode_response_frame(99, table.api_versions_response(3))
    assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
    # header v0: correlation id and straight into the body (error code 0)
    assert frame[4:10] == b"\x00\x00\x00\x63\x00\x00"
    decoded = KpApiVersionsResponse.decode(frame, version=3, header=True, framed=True)
    assert decoded.header.correlation_id == 99
    assert [(k.api_key, k.min_version, k.max_version) for k in decoded.api_keys] == [(18, 0, 4)]


def test_metadata_response_frame_uses_header_v1_when_flexible() -> None:
    response = MetadataResponseV12(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)), brokers=(), cluster_id="c", topics=()
    )
    frame = encode_response_frame(5, response)
    assert frame[4:9] == b"\x00\x00\x00\x05\x00"
    decoded = KpMetadataResponse.decode(frame, version=12, header=True, framed=True)
    assert (decoded.header.correlation_id, decoded.cluster_id) == (5, "c")


def test_request_frame_is_what_a_broker_reads() -> None:
    frame = encode_request_frame(8, "our-client", metadata_request(None))
    assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
    header, pos = decode_request_header(frame, 4)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (
        3,
        12,
        8,
        "our-client",
    )
    assert decode_request(3, 12, frame, pos) == metadata_request(None)
    decoded = KpMetadataRequest.decode(frame, version=12, header=True, framed=True)
    assert decoded.topics is None


@pytest.mark.parametrize(
    ("api_key", "version", "body"),
    [
        # Metadata v9: a compact topics array claiming 2**32 - 2 elements. kio alone would
        # reserve 32 GiB for it and abort the process.
        (3, 9, b"\xff\xff\xff\xff\x0f" + b"\x00\x00\x00"),
        # DeleteGroups v2: a compact array of strings, same forged length.
        (42, 2, b"\xff\xff\xff\xff\x0f\x00"),
        # Metadata v12: a plausible-looking 1000 topics in a 10-byte body.
        (3, 12, encode_uvarint(1001) + b"\x00" * 8),
    ],
)
def test_forged_array_lengths_are_refused_before_kio_reads_them(
    api_key: int, version: int, body: bytes
) -> None:
    with pytest.raises(MalformedMessage, match="array of"):
        decode_request(api_key, version, body)


@pytest.mark.parametrize("assigned", [False, True])
def test_nullable_struct_markers_are_walked(assigned: bool) -> None:
    # ConsumerGroupHeartbeat v0 response: `assignment` is a nullable struct (KIP-893 marker).
    import uuid

    from kio.schema.consumer_group_heartbeat.v0 import response as m

    assignment = None
    if assigned:
        topic = m.TopicPartitions(topic_id=uuid.UUID(int=7), partitions=(0, 1, 2))
        assignment = m.Assignment(topic_partitions=(topic,))
    response = m.ConsumerGroupHeartbeatResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
        error_code=ErrorCode.none,
        error_message=None,
        member_id=None,
        member_epoch=1,
        heartbeat_interval=i32Timedelta.parse(datetime.timedelta(seconds=3)),
        assignment=assignment,
    )
    data = encode(response)
    assert decode_response(68, 0, data) == response
    for end in range(len(data)):
        with pytest.raises(MalformedMessage):
            decode_response(68, 0, data[:end])
