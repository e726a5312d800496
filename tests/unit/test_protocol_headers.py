"""Request/response headers, header-version selection and the varint primitives."""

from __future__ import annotations

import pytest
from kafka.protocol.consumer import FetchRequest as KpFetchRequest
from kafka.protocol.metadata import ApiVersionsRequest as KpApiVersionsRequest
from kafka.protocol.metadata import ApiVersionsResponse as KpApiVersionsResponse
from kafka.protocol.metadata import MetadataRequest as KpMetadataRequest
from kafka.protocol.metadata import MetadataResponse as KpMetadataResponse
from kio.index import load_request_schema, load_response_schema
from kio.schema.index import api_key_map, schema_name_map

from backbone.protocol.errors import InvalidRequestError
from backbone.protocol.headers import (
    MalformedMessage,
    decode_request_header,
    decode_response_header,
    encode_request_header,
    encode_response_header,
    encode_uvarint,
    first_flexible_version,
    is_flexible,
    read_uvarint,
    request_header_version,
    response_header_version,
    skip_tagged_fields,
)

pytestmark = pytest.mark.unit

ALL_KIO_VERSIONS = [
    (key, version)
    for key, name in sorted(api_key_map.items())
    for version in sorted(schema_name_map[name])
    if {"request", "response"} <= {kind.name for kind in schema_name_map[name][version]}
]


@pytest.mark.parametrize(("api_key", "version"), ALL_KIO_VERSIONS)
def test_header_versions_agree_with_kafkas_schemas(api_key: int, version: int) -> None:
    # kio attaches the header class Kafka's generator picks for each message version.
    assert (
        request_header_version(api_key, version)
        == load_request_schema(api_key, version).__header_schema__.__version__
    )
    assert (
        response_header_version(api_key, version)
        == load_response_schema(api_key, version).__header_schema__.__version__
    )


@pytest.mark.parametrize(
    ("api_key", "version", "request_header", "response_header"),
    [
        (0, 8, 1, 0),  # Produce: flexible from 9
        (0, 9, 2, 1),
        (1, 11, 1, 0),  # Fetch: flexible from 12
        (1, 12, 2, 1),
        (3, 8, 1, 0),  # Metadata: flexible from 9
        (3, 9, 2, 1),
        (18, 2, 1, 0),  # ApiVersions: flexible request from 3 ...
        (18, 3, 2, 0),  # ... but its response header is always v0
        (18, 9, 2, 0),  # a version newer than kio knows is still flexible ("3+")
        (7, 0, 0, 0),  # ControlledShutdown v0: the only header without client id
        (999, 5, 1, 0),  # unknown API: parse the common fields
    ],
)
def test_header_version_special_cases(
    api_key: int, version: int, request_header: int, response_header: int
) -> None:
    assert request_header_version(api_key, version) == request_header
    assert response_header_version(api_key, version) == response_header


@pytest.mark.parametrize(("api_key", "version"), [*ALL_KIO_VERSIONS, (18, 9), (7, 0), (999, 5), (0, 99)])
def test_a_decoded_header_knows_its_answers_header_version(api_key: int, version: int) -> None:
    header, _ = decode_request_header(encode_request_header(api_key, version, 7, "client"))
    assert header.response_header_version == response_header_version(api_key, version)


def test_first_flexible_versions() -> None:
    assert first_flexible_version(0) == 9
    assert first_flexible_version(18) == 3
    assert first_flexible_version(47) is None  # OffsetDelete was never made flexible
    assert first_flexible_version(12345) is None
    assert not is_flexible(47, 0)
    assert is_flexible(60, 0)  # DescribeCluster was born flexible


@pytest.mark.parametrize(
    "request_",
    [
        KpMetadataRequest(version=1, topics=[]),
        KpMetadataRequest(version=12, topics=[]),
        KpApiVersionsRequest(version=0),
        KpApiVersionsRequest(version=3, client_software_name="kp", client_software_version="3"),
        KpFetchRequest(version=12, max_wait_ms=500, min_bytes=1, topics=[], forgotten_topics_data=[]),
    ],
    ids=["metadata-v1", "metadata-v12", "apiversions-v0", "apiversions-v3", "fetch-v12"],
)
@pytest.mark.parametrize("client_id", ["client-é", "", None])
def test_decodes_headers_kafka_python_writes(request_: object, client_id: str | None) -> None:
    request_.with_header(correlation_id=123456, client_id=client_id)  # type: ignore[attr-defined]
    data = bytes(request_.encode(header=True))  # type: ignore[attr-defined]
    header, pos = decode_request_header(data)
    assert header.api_key == request_.API_KEY  # type: ignore[attr-defined]
    assert header.api_version == request_.API_VERSION  # type: ignore[attr-defined]
    assert header.correlation_id == 123456
    assert header.client_id == client_id
    assert data[pos:] == bytes(request_.encode())  # type: ignore[attr-defined]
    encoded = encode_request_header(header.api_key, header.api_version, 123456, client_id)
    assert encoded == data[:pos]


def test_request_header_v2_keeps_client_id_a_legacy_string() -> None:
    data = encode_request_header(3, 12, 1, "abc")
    assert data == b"\x00\x03\x00\x0c\x00\x00\x00\x01" + b"\x00\x03abc" + b"\x00"


def test_request_header_skips_unknown_tagged_fields() -> None:
    tags = encode_uvarint(2) + b"\x05\x03xyz" + encode_uvarint(300) + encode_uvarint(0)
    data = b"\x00\x03\x00\x0c\x00\x00\x00\x09" + b"\xff\xff" + tags + b"BODY"
    header, pos = decode_request_header(data)
    assert (header.correlation_id, header.client_id, header.header_version) == (9, None, 2)
    assert data[pos:] == b"BODY"


def test_request_header_v0_has_no_client_id() -> None:
    data = encode_request_header(7, 0, 77, "ignored")
    assert data == b"\x00\x07\x00\x00\x00\x00\x00\x4d"
    header, pos = decode_request_header(data + b"rest")
    assert (header.client_id, header.header_version, pos) == (None, 0, 8)


def test_request_header_client_id_tolerates_bad_utf8_like_kafka() -> None:
    data = b"\x00\x03\x00\x01\x00\x00\x00\x01" + b"\x00\x02\xff\xfe"
    header, _ = decode_request_header(data)
    assert header.client_id == "\ufffd\ufffd"


def test_request_header_decodes_at_an_offset() -> None:
    data = b"junk" + encode_request_header(0, 9, 5, "c") + b"body"
    header, pos = decode_request_header(data, 4)
    assert header.correlation_id == 5
    assert data[pos:] == b"body"


def test_every_truncated_request_header_is_malformed() -> None:
    tags = encode_uvarint(1) + b"\x01\x02ab"
    data = b"\x00\x00\x00\x09\x00\x00\x00\x01" + b"\x00\x03cid" + tags
    decode_request_header(data)
    for end in range(len(data)):
        with pytest.raises(MalformedMessage):
            decode_request_header(data[:end])


def test_malformed_message_is_an_invalid_request() -> None:
    assert issubclass(MalformedMessage, InvalidRequestError)


def test_response_headers() -> None:
    assert encode_response_header(7, 0) == b"\x00\x00\x00\x07"
    assert encode_response_header(7, 1) == b"\x00\x00\x00\x07\x00"
    assert decode_response_header(b"\x00\x00\x00\x07\x00rest", 1) == (7, 5)
    assert decode_response_header(b"\x00\x00\x00\x07\x00rest", 0) == (7, 4)
    tags = encode_uvarint(1) + b"\x02\x01z"
    assert decode_response_header(b"\x00\x00\x00\x08" + tags, 1) == (8, 4 + len(tags))
    with pytest.raises(MalformedMessage):
        decode_response_header(b"\x00\x00", 0)


def test_kafka_python_reads_our_response_headers() -> None:
    # ApiVersions v3 is flexible but its response header is v0; Metadata v9 uses v1.
    api_versions = KpApiVersionsResponse(version=3, error_code=0, api_keys=[], throttle_time_ms=0)
    body = bytes(api_versions.encode())
    data = encode_response_header(11, response_header_version(18, 3)) + body
    assert KpApiVersionsResponse.decode(data, version=3, header=True).header.correlation_id == 11
    metadata = KpMetadataResponse(version=9, throttle_time_ms=0, brokers=[], topics=[])
    data = encode_response_header(12, response_header_version(3, 9)) + bytes(metadata.encode())
    assert KpMetadataResponse.decode(data, version=9, header=True).header.correlation_id == 12


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 16383, 16384, 2**31 - 1, 2**32 - 1])
def test_uvarint_round_trip(value: int) -> None:
    data = encode_uvarint(value)
    assert read_uvarint(b"x" + data, 1) == (value, 1 + len(data))


def test_uvarint_known_encodings_and_limits() -> None:
    assert encode_uvarint(300) == b"\xac\x02"
    with pytest.raises(MalformedMessage, match="5 bytes"):
        read_uvarint(b"\xff\xff\xff\xff\xff\x01", 0)
    with pytest.raises(MalformedMessage, match="truncated"):
        read_uvarint(b"\x80", 0)


def test_skip_tagged_fields_checks_sizes() -> None:
    assert skip_tagged_fields(b"\x00", 0) == 1
    assert skip_tagged_fields(b"\x02\x00\x01a\x05\x00", 0) == 6
    with pytest.raises(MalformedMessage):
        skip_tagged_fields(b"\x01\x00\x09abc", 0)
