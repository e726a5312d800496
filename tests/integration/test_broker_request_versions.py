"""Requests as real clients send them, at every version the broker advertises, are answered."""

from __future__ import annotations

import datetime
import struct
from collections.abc import Iterator
from dataclasses import fields

import pytest
from kio.schema.errors import ErrorCode
from kio.serial._introspect import EntityField, EntityTupleField, classify_field, get_schema_field_type

from backbone.dev.processes import BrokerProcess
from backbone.protocol.api import SUPPORTED_VERSIONS, ApiKey
from backbone.protocol.codec import decode_response, request_type
from backbone.protocol.entities import entity_of
from backbone.protocol.headers import decode_response_header, encode_request_header, response_header_version
from backbone.protocol.records import RecordBatchBuilder
from tests.helpers.requests import latest_offset_request, metadata_request, produce_request
from tests.helpers.wire import RawConnection

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def broker(zookeeper, tmp_path_factory) -> Iterator[BrokerProcess]:
    """One broker for the whole module: these tests only read, or create topics of their own."""
    process = BrokerProcess(
        1, zookeeper.connect_string + "/request-versions", tmp_path_factory.mktemp("broker")
    )
    process.start()
    try:
        yield process
    finally:
        process.stop(timeout=15)


def test_metadata_for_all_topics_with_spare_bytes_is_answered(broker) -> None:
    # librdkafka 2.x sends Metadata v12 with a null topics array and three spare bytes after it.
    request = entity_of(request_type(ApiKey.METADATA, 12), {"topics": None})
    with RawConnection(broker.bootstrap) as connection:
        answer = connection.request(request, spare=b"\x00\x00\x00")
        assert [int(b.node_id) for b in answer.brokers] == [broker.broker_id]
        # The connection stays open for the next request.
        assert connection.request(request).controller_id >= 0


@pytest.mark.parametrize("version", list(SUPPORTED_VERSIONS[ApiKey.CREATE_TOPICS]))
def test_create_topics_is_answered_at_every_version(broker, version: int) -> None:
    name = f"created-v{version}"
    request = entity_of(
        request_type(ApiKey.CREATE_TOPICS, version),
        {
            "topics": [
                {"name": name, "num_partitions": 2, "replication_factor": 1, "assignments": [], "configs": []}
            ],
            "timeout": datetime.timedelta(seconds=10),
        },
    )
    with RawConnection(broker.bootstrap) as connection:
        (result,) = connection.request(request).topics
    assert (result.name, result.error_code) == (name, ErrorCode.none)
    if version >= 5:  # KIP-525: the new topic's partitions and configs come back
        assert result.num_partitions == 2
        assert any(c.name == "cleanup.policy" for c in result.configs)


def raw_request(api_key: int, version: int, body: bytes = b"") -> bytes:
    message = encode_request_header(api_key, version, 7, "probe") + body
    return struct.pack(">i", len(message)) + message


def answer_error(connection: RawConnection, api_key: int, version: int, body: bytes = b"") -> ErrorCode:
    connection.send_bytes(raw_request(api_key, version, body))
    frame = connection.read_frame()
    correlation_id, pos = decode_response_header(frame, response_header_version(api_key, version))
    assert correlation_id == 7
    return decode_response(api_key, version, frame, pos).error_code


REFUSED_WITH_AN_ANSWER = {
    # An API version above ours whose response can carry the error.
    "ListGroups v5": (ApiKey.LIST_GROUPS, 5, b"", ErrorCode.unsupported_version),
    "DescribeCluster v2": (ApiKey.DESCRIBE_CLUSTER, 2, b"", ErrorCode.unsupported_version),
    # APIs we leave out: absent from ApiVersions, and answered so if sent anyway.
    "DescribeAcls v3": (29, 3, b"", ErrorCode.unsupported_version),
    "SaslHandshake v1 without its body": (17, 1, b"", ErrorCode.invalid_request),
    "CreateDelegationToken v1": (38, 1, b"", ErrorCode.unsupported_version),
    "ConsumerGroupHeartbeat v0": (68, 0, b"", ErrorCode.unsupported_version),
    "AddOffsetsToTxn v4": (25, 4, b"", ErrorCode.unsupported_version),
    # A body cut short, of an API whose response has a top-level error.
    "JoinGroup v5 cut short": (ApiKey.JOIN_GROUP, 5, b"\x00\x05gro", ErrorCode.invalid_request),
}


@pytest.mark.parametrize("case", REFUSED_WITH_AN_ANSWER.values(), ids=REFUSED_WITH_AN_ANSWER.keys())
def test_unservable_requests_are_answered_with_a_readable_error(broker, case) -> None:
    api_key, version, body, expected = case
    with RawConnection(broker.bootstrap) as connection:
        assert answer_error(connection, api_key, version, body) == expected
        # The connection stays usable.
        assert connection.request(entity_of(request_type(ApiKey.METADATA, 12), {"topics": []})).brokers
    line = next(
        line
        for line in broker.output().splitlines()
        if "event=request_rejected" in line and f"api_key={int(api_key)} api_version={version}" in line
    )
    assert f"api_key={int(api_key)} api_version={version}" in line
    assert f"answer={expected.name.upper()}" in line
    assert "head=" + raw_request(api_key, version, body)[4:20].hex() in line


def test_the_advertised_versions_are_the_supported_ones(broker) -> None:
    answer = entity_of(request_type(ApiKey.API_VERSIONS, 3), {"client_software_name": "t"})
    with RawConnection(broker.bootstrap) as connection:
        listed = {
            int(a.api_key): (int(a.min_version), int(a.max_version))
            for a in connection.request(answer).api_keys
        }
    expected = {int(key): (versions.min, versions.max) for key, versions in SUPPORTED_VERSIONS.items()}
    expected[ApiKey.PRODUCE] = (0, SUPPORTED_VERSIONS[ApiKey.PRODUCE].max)  # listed from 0 for librdkafka
    assert listed == expected


SERVED = [
    (key, version)
    for key, versions in SUPPORTED_VERSIONS.items()
    for version in versions
    if key != ApiKey.PRODUCE or version >= 3
]


@pytest.mark.parametrize("case", SERVED, ids=[f"{k.name}-v{v}" for k, v in SERVED])
def test_every_served_version_answers_a_request_of_defaults(broker, case) -> None:
    # Empty arrays, empty or null strings, zeros: every handler must answer it at every version (with
    # whatever errors apply), never drop the connection.
    api_key, version = case
    values = {"acks": 1} if api_key == ApiKey.PRODUCE else {}  # acks=0 is never answered
    with RawConnection(broker.bootstrap) as connection:
        answer = connection.request(entity_of(request_type(api_key, version), values))
    assert int(answer.__version__) == version


def test_max_timestamp_names_the_record_not_its_batch(broker, wait_for) -> None:
    # ListOffsets MAX_TIMESTAMP (-3, KIP-734) answers the offset of the record with the largest timestamp,
    # also inside a batch (KAFKA-16310), not the batch's last offset.
    topic = "max-timestamp"
    builder = RecordBatchBuilder()
    for i, timestamp in enumerate([1_000, 1_010, 9_000, 1_020, 1_030]):
        builder.append(b"k", b"v%d" % i, timestamp=timestamp)
    with RawConnection(broker.bootstrap) as connection:
        connection.request(metadata_request(topic))  # auto-creates it
        wait_for(
            lambda: (
                connection.request(produce_request(topic, 0, builder.build()))
                .responses[0]
                .partition_responses[0]
                .error_code
                == ErrorCode.none
            )
        )
        answer = connection.request(latest_offset_request(topic, 0, timestamp=-3)).topics[0].partitions[0]
    assert (answer.offset, answer.timestamp) == (2, 9_000)


def one_of_each(entity_type: type) -> dict:
    """Values giving every array of structs one element, and every string a name ("sweep")."""
    values: dict = {}
    for field in fields(entity_type):
        kind = classify_field(field)
        if isinstance(kind, EntityTupleField):
            values[field.name] = [one_of_each(kind.type_)]
        elif isinstance(kind, EntityField):
            values[field.name] = one_of_each(kind.type_)
        elif not kind.is_array and get_schema_field_type(field) == "string":
            values[field.name] = "sweep"
    return values


@pytest.mark.parametrize("case", SERVED, ids=[f"{k.name}-v{v}" for k, v in SERVED])
def test_every_served_version_answers_a_request_with_one_of_each_item(broker, case) -> None:
    # Every array of structs holds one element: the per-item paths of each handler run at every version.
    api_key, version = case
    entity_type = request_type(api_key, version)
    values = one_of_each(entity_type)
    if api_key == ApiKey.PRODUCE:
        values["acks"] = 1
    with RawConnection(broker.bootstrap) as connection:
        answer = connection.request(entity_of(entity_type, values))
    assert int(answer.__version__) == version
