"""Interop with kafka-python's protocol classes: what a real client writes, we read, and back.

For every API and version the broker advertises: kafka-python encodes a request (or response),
we decode it with kio and encode it again, and the bytes must be identical. Then the version
negotiation kafka-python performs against our ApiVersions answer must land on versions we accept.
"""

from __future__ import annotations

import dataclasses
import datetime
import random
from typing import Any

import pytest
from kafka.protocol.admin import CreateTopicsRequest as KpCreateTopicsRequest
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.broker_version_data import BrokerVersionData, infer_broker_version_from_api_versions
from kafka.protocol.consumer import FetchRequest as KpFetchRequest
from kafka.protocol.consumer import JoinGroupRequest as KpJoinGroupRequest
from kafka.protocol.metadata import MetadataResponse as KpMetadataResponse
from kafka.protocol.producer import ProduceRequest  # noqa: F401  (defines the Produce classes)
from kio.index import load_payload_module
from kio.static.constants import EntityType
from kio.static.primitive import i32Timedelta

from backbone.protocol.api import SUPPORTED_VERSIONS, ApiKey, ApiTable
from backbone.protocol.codec import decode_request, decode_response, encode
from backbone.protocol.errors import ErrorCode
from backbone.protocol.headers import MalformedMessage

pytestmark = pytest.mark.unit


def _kafka_python_classes() -> tuple[dict[int, type], dict[int, type]]:
    requests: dict[int, type] = {}
    responses: dict[int, type] = {}
    pending = list(ApiMessage.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls._class_version is None:  # the primary class, not a per-version wrapper
            (requests if cls.is_request() else responses)[cls.API_KEY] = cls
    return requests, responses


KP_REQUESTS, KP_RESPONSES = _kafka_python_classes()
ADVERTISED = [(key, version) for key, versions in SUPPORTED_VERSIONS.items() for version in versions]


@pytest.mark.parametrize(("api_key", "version"), ADVERTISED)
def test_requests_from_kafka_python_round_trip(api_key: ApiKey, version: int) -> None:
    data = bytes(KP_REQUESTS[api_key](version=version).encode())
    assert encode(decode_request(api_key, version, data)) == data


@pytest.mark.parametrize(("api_key", "version"), ADVERTISED)
def test_responses_round_trip_with_kafka_python(api_key: ApiKey, version: int) -> None:
    data = bytes(KP_RESPONSES[api_key](version=version).encode())
    assert encode(decode_response(api_key, version, data)) == data


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS[ApiKey.FETCH])
def test_fetch_request_fields_from_kafka_python(version: int) -> None:
    topic = KpFetchRequest.FetchTopic
    part = topic.FetchPartition
    request = KpFetchRequest(
        version=version,
        replica_id=-1,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=52_428_800,
        isolation_level=1,
        session_id=0,
        session_epoch=-1,
        topics=[
            topic(topic="a", partitions=[part(partition=0, fetch_offset=42, partition_max_bytes=1_048_576)]),
            topic(topic="b", partitions=[part(partition=3, fetch_offset=0, partition_max_bytes=100)]),
        ],
        forgotten_topics_data=[],
        rack_id="rack-1",
    )
    decoded = decode_request(ApiKey.FETCH, version, bytes(request.encode()))
    assert decoded.max_wait.total_seconds() == 0.5
    assert decoded.isolation_level == 1
    assert [(t.topic, p.partition, p.fetch_offset) for t in decoded.topics for p in t.partitions] == [
        ("a", 0, 42),
        ("b", 3, 0),
    ]
    if version >= 11:
        assert decoded.rack_id == "rack-1"


@pytest.mark.parametrize("version", [0, 5, 12])
def test_join_group_and_create_topics_fields_from_kafka_python(version: int) -> None:
    join = KpJoinGroupRequest(
        version=min(version, 9),
        group_id="g",
        session_timeout_ms=45_000,
        member_id="",
        protocol_type="consumer",
        protocols=[KpJoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01")],
    )
    decoded = decode_request(ApiKey.JOIN_GROUP, min(version, 9), bytes(join.encode()))
    assert (decoded.group_id, decoded.protocols[0].name, decoded.protocols[0].metadata) == (
        "g",
        "range",
        b"\x00\x01",
    )
    create_version = min(max(version, 2), 7)
    topic = KpCreateTopicsRequest.CreatableTopic
    create = KpCreateTopicsRequest(
        version=create_version,
        topics=[topic(name="new", num_partitions=6, replication_factor=3, assignments=[], configs=[])],
        timeout_ms=1000,
    )
    decoded = decode_request(ApiKey.CREATE_TOPICS, create_version, bytes(create.encode()))
    assert (decoded.topics[0].name, decoded.topics[0].num_partitions) == ("new", 6)


def make(cls: type, **values: Any) -> Any:
    """A kio entity of `cls` from the values its version has (others are dropped)."""
    names = {field.name for field in dataclasses.fields(cls)}
    return cls(**{name: value for name, value in values.items() if name in names})


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS[ApiKey.METADATA])
def test_kafka_python_reads_our_metadata_response(version: int) -> None:
    m = load_payload_module(ApiKey.METADATA, version, EntityType.response)
    partitions = tuple(
        make(
            m.MetadataResponsePartition,
            error_code=ErrorCode.none,
            partition_index=i,
            leader_id=i % 3,
            leader_epoch=4,
            replica_nodes=(0, 1, 2),
            isr_nodes=(0, 1),
            offline_replicas=(),
        )
        for i in range(4)
    )
    topic = make(
        m.MetadataResponseTopic,
        error_code=ErrorCode.none,
        name="events",
        topic_id=None,
        is_internal=False,
        partitions=partitions,
    )
    broker = make(m.MetadataResponseBroker, node_id=0, host="h", port=9092, rack=None)
    response = make(
        m.MetadataResponse,
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
        brokers=(broker,),
        topics=(topic,),
        cluster_id="c",
        controller_id=0,
    )
    body = encode(response)
    decoded = KpMetadataResponse.decode(body, version=version)
    assert decoded.brokers[0].port == 9092
    assert decoded.topics[0].name == "events"
    assert [p.leader_id for p in decoded.topics[0].partitions] == [0, 1, 2, 0]
    if version >= 10:
        # No topic IDs: the zero UUID goes on the wire, which clients read as "none".
        assert b"\x07events" + bytes(16) in body
        assert decoded.topics[0].topic_id is None


def test_kafka_python_negotiates_a_version_we_accept_for_every_api() -> None:
    table: ApiTable[None] = ApiTable()
    for api_key in SUPPORTED_VERSIONS:
        table.register(api_key, None)
    broker = BrokerVersionData(api_versions={key: (low, high) for key, low, high in table.advertised()})
    for api_key in SUPPORTED_VERSIONS:
        chosen = broker.api_version(KP_REQUESTS[api_key])
        assert chosen == SUPPORTED_VERSIONS[api_key].max, api_key.name
    # kafka-python gates features (fetch sessions from 1.1, the 45 s session timeout from 3.0)
    # on the broker release it infers from the table; ours reads as 3.2 (JoinGroup v9).
    assert infer_broker_version_from_api_versions(broker.api_versions) == (3, 2)


def test_mangled_messages_only_ever_raise_malformed_message() -> None:
    # Bad input must end as INVALID_REQUEST, never as another exception or a crashed process.
    rng = random.Random(20240611)
    seeds = [(key, version) for key, version in ADVERTISED if version == SUPPORTED_VERSIONS[key].max]
    outcomes: set[str] = set()
    for _ in range(3000):
        api_key, version = rng.choice(seeds)
        is_request = rng.random() < 0.5
        message = (KP_REQUESTS if is_request else KP_RESPONSES)[api_key](version=version)
        data = bytearray(message.encode())
        choice = rng.randrange(3)
        if choice == 0 and data:
            data[rng.randrange(len(data))] = rng.randrange(256)
        elif choice == 1 and data:
            at = rng.randrange(len(data))
            data[at : at + 5] = b"\xff\xff\xff\xff\x0f"  # a huge compact length or count
        else:
            del data[rng.randrange(len(data) + 1) :]
        decode = decode_request if is_request else decode_response
        try:
            decode(api_key, version, bytes(data))
            outcomes.add("decoded")
        except MalformedMessage:
            outcomes.add("malformed")
    assert "malformed" in outcomes
