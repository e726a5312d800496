"""Connections: version negotiation (with its fallbacks), pipelining, timeouts, broken streams, metadata."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from backbone.client.cluster import ClusterClient, backoff_ms
from backbone.client.config import ADMIN_OPTIONS, resolve
from backbone.client.structs import TopicPartition
from backbone.protocol.api import ApiKey, VersionRange
from backbone.protocol.codec import decode_response, encode
from backbone.protocol.errors import UnsupportedVersionError
from backbone.protocol.framing import read_frame
from backbone.wire.connection import BrokerConnection, decode_kio, encode_kio
from backbone.wire.errors import KafkaConnectionError, KafkaTimeoutError, NoBrokersAvailable
from backbone.wire.messages import (
    CLIENT_VERSIONS,
    build_request,
    build_response,
    indexes_by_topic,
    negotiate,
    pick_version,
)
from tests.helpers.fake_cluster import FakeCluster

pytestmark = pytest.mark.unit

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def serve(handler: Handler) -> tuple[asyncio.AbstractServer, int]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def connection(port: int, **options: int) -> BrokerConnection:
    return BrokerConnection("127.0.0.1", port, 0, client_id="test", **options)


# -- negotiation, pure ------------------------------------------------------------------------------


def test_pick_version_takes_the_highest_common_one() -> None:
    assert pick_version(0, VersionRange(3, 9), 0, 12) == 9
    assert pick_version(0, VersionRange(3, 9), 0, 5) == 5
    assert pick_version(0, VersionRange(3, 9), 0, 2) is None
    assert pick_version(0, VersionRange(3, 9), 10, 12) is None


def test_negotiate_reads_a_kio_api_versions_answer() -> None:
    rows = [
        {"api_key": ApiKey.PRODUCE, "min_version": 0, "max_version": 11},
        {"api_key": ApiKey.FETCH, "min_version": 4, "max_version": 7},
        {"api_key": ApiKey.METADATA, "min_version": 0, "max_version": 0},  # below what we speak
        {"api_key": 999, "min_version": 0, "max_version": 3},  # unknown to us
    ]
    response = decode_response(18, 3, encode(build_response(18, 3, error_code=0, api_keys=rows)))
    advertised = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}
    chosen = negotiate(advertised)
    assert chosen == {ApiKey.PRODUCE: CLIENT_VERSIONS[ApiKey.PRODUCE].max, ApiKey.FETCH: 7}


def test_build_request_drops_fields_a_version_lacks_and_fills_the_rest() -> None:
    old = build_request(ApiKey.FETCH, 4, max_wait=500, min_bytes=1, topics=[], rack_id="r1", session_id=3)
    assert not hasattr(old, "rack_id") and not hasattr(old, "session_id")
    assert old.max_wait.total_seconds() == 0.5  # milliseconds became the timedelta kio wants
    new = build_request(ApiKey.FETCH, 12, max_wait=500, min_bytes=1, topics=[])
    assert new.rack_id == "" and new.session_epoch == -1  # schema default and zero value
    assert build_request(ApiKey.METADATA, 12, topics=None).topics is None


# -- negotiation against brokers --------------------------------------------------------------------


async def test_connect_negotiates_the_highest_common_versions() -> None:
    advertised = {int(k): (v.min, v.max) for k, v in CLIENT_VERSIONS.items()}
    advertised[ApiKey.FETCH] = (0, 8)
    async with FakeCluster(1, advertised=advertised) as fake:
        conn = connection(fake.ports[0])
        await conn.connect()
        assert conn.version(ApiKey.FETCH) == 8
        assert conn.version(ApiKey.PRODUCE) == CLIENT_VERSIONS[ApiKey.PRODUCE].max
        await conn.close()


@pytest.mark.parametrize(("broker_max", "expected"), [(2, [4, 2]), (0, [4, 0])])
async def test_api_versions_falls_back_when_the_broker_refuses_our_version(
    broker_max: int, expected: list[int]
) -> None:
    async with FakeCluster(1, api_versions_max=broker_max) as fake:
        conn = connection(fake.ports[0])
        await conn.connect()
        assert [v for _, key, v in fake.requests if key == ApiKey.API_VERSIONS] == expected
        assert conn.is_ready
        await conn.close()


async def test_a_missing_api_is_reported_by_name() -> None:
    advertised = {int(k): (v.min, v.max) for k, v in CLIENT_VERSIONS.items() if k != ApiKey.DESCRIBE_CLUSTER}
    async with FakeCluster(1, advertised=advertised) as fake:
        conn = connection(fake.ports[0])
        await conn.connect()
        with pytest.raises(UnsupportedVersionError, match="does not support DESCRIBE_CLUSTER"):
            conn.version(ApiKey.DESCRIBE_CLUSTER)
        await conn.close()


# -- pipelining, timeouts, failures -------------------------------------------------------------------


async def test_requests_are_pipelined_up_to_the_in_flight_limit(fake: FakeCluster) -> None:
    fake.create_topic("t", 1)
    conn = connection(fake.ports[0], max_in_flight=3)
    await conn.connect()
    seen: list[int] = []
    original = conn._write

    async def spy(*args: object, **kwargs: object) -> object:
        seen.append(conn.in_flight)
        return await original(*args, **kwargs)  # type: ignore[arg-type]

    conn._write = spy  # type: ignore[method-assign]
    encode_meta = encode_kio(ApiKey.METADATA, topics=[{"name": "t"}])
    results = await asyncio.gather(
        *(conn.request(ApiKey.METADATA, encode_meta, decode_kio(ApiKey.METADATA)) for _ in range(10))
    )
    assert all(r.topics[0].name == "t" for r in results)
    assert max(seen) == 2, "a request is written while up to two others wait, never more than three in flight"
    await conn.close()


async def connecting_fails_and_closes(
    handler: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
    error: type[Exception],
    match: str,
    **options: Any,
) -> None:
    """Connecting to a server run by `handler` raises `error` (matching `match`) and closes the connection."""
    server, port = await serve(handler)
    conn = connection(port, **options)
    try:
        with pytest.raises(error, match=match):
            await conn.connect()
        assert conn.is_closed
    finally:
        server.close()


async def test_a_request_without_answer_times_out_and_closes_the_connection() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # read everything, answer nothing
        writer.close()

    error = r"API_VERSIONS request to broker 0 .* within 200 ms"
    await connecting_fails_and_closes(silent, KafkaTimeoutError, error, request_timeout_ms=200)


async def test_an_answer_with_the_wrong_correlation_id_closes_the_connection() -> None:
    async def confused(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        frame = await read_frame(reader)
        (correlation_id,) = struct.unpack_from(">i", frame, 4)
        body = encode(build_response(18, 0, error_code=0, api_keys=[]))
        payload = struct.pack(">i", correlation_id + 1) + body
        writer.write(struct.pack(">i", len(payload)) + payload)
        await writer.drain()
        await reader.read()

    server, port = await serve(confused)
    conn = connection(port)
    with pytest.raises(KafkaConnectionError, match="answered correlation id"):
        await conn.connect()
    server.close()


async def answer_api_versions(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answer the connection's ApiVersions request: Metadata up to v8 (a response header without tags)."""
    frame = await read_frame(reader)
    version, correlation_id = struct.unpack_from(">hi", frame, 2)
    rows = [
        {"api_key": ApiKey.API_VERSIONS, "min_version": 0, "max_version": version},
        {"api_key": ApiKey.METADATA, "min_version": 0, "max_version": 8},
    ]
    payload = struct.pack(">i", correlation_id) + encode(
        build_response(18, version, error_code=0, api_keys=rows)
    )
    writer.write(struct.pack(">i", len(payload)) + payload)


async def test_a_large_response_arriving_in_pieces_is_received_whole() -> None:
    big = bytes(range(256)) * 12_000 + b"end"

    async def slow_sender(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await answer_api_versions(reader, writer)
        for _ in range(2):
            (correlation_id,) = struct.unpack_from(">i", await read_frame(reader), 4)
            stream = struct.pack(">ii", 4 + len(big), correlation_id) + big
            for start in range(0, len(stream), 30_000):
                writer.write(stream[start : start + 30_000])
                await writer.drain()
        await reader.read()

    server, port = await serve(slow_sender)
    conn = connection(port)
    await conn.connect()
    for _ in range(2):
        raw = await conn.request(
            ApiKey.METADATA, encode_kio(ApiKey.METADATA, topics=[]), lambda v, frame, pos: bytes(frame[pos:])
        )
        assert raw == big
    await conn.close()
    server.close()


async def test_a_response_frame_past_the_limit_closes_the_connection() -> None:
    async def oversized(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_frame(reader)
        writer.write(struct.pack(">i", 5000) + b"x" * 100)
        await reader.read()

    error = r"bad response frame: frame of 5000 bytes exceeds"
    await connecting_fails_and_closes(oversized, KafkaConnectionError, error, max_response_bytes=1000)


async def test_a_refused_connection_is_a_connection_error() -> None:
    server, port = await serve(lambda r, w: asyncio.sleep(0))
    server.close()
    await server.wait_closed()
    with pytest.raises(KafkaConnectionError, match="cannot connect to broker 0"):
        await connection(port).connect()


async def test_requests_in_flight_fail_when_the_broker_goes_away(fake: FakeCluster) -> None:
    fake.create_topic("t", 1)
    conn = connection(fake.ports[0])
    await conn.connect()
    fetch = encode_kio(
        ApiKey.FETCH,
        max_wait=5000,
        min_bytes=1,
        topics=[
            {"topic": "t", "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1000}]}
        ],
    )
    pending = asyncio.ensure_future(conn.request(ApiKey.FETCH, fetch, decode_kio(ApiKey.FETCH)))
    await asyncio.sleep(0.05)
    fake.drop_connections()
    with pytest.raises(KafkaConnectionError):
        await pending
    assert conn.is_closed


# -- the cluster client -----------------------------------------------------------------------------


def cluster_client(bootstrap: str, **overrides: object) -> ClusterClient:
    return ClusterClient(resolve(ADMIN_OPTIONS, "admin", {"bootstrap.servers": bootstrap}, overrides))


async def test_metadata_names_brokers_leaders_and_the_controller(fake: FakeCluster) -> None:
    fake.create_topic("t", 3)
    client = cluster_client(fake.bootstrap)
    client.add_topics(["t"])
    metadata = await client.refresh_metadata()
    assert sorted(metadata.brokers) == [0, 1]
    assert metadata.controller_id == 0
    assert metadata.partitions_for("t") == [0, 1, 2]
    leaders = [metadata.leader_for(TopicPartition("t", p)) for p in range(3)]
    assert leaders == [0, 1, 0]
    assert metadata.available_partitions("t") == [0, 1, 2]
    await client.close()


async def test_concurrent_refreshes_share_one_request(fake: FakeCluster) -> None:
    client = cluster_client(fake.bootstrap)
    await asyncio.gather(*(client.refresh_metadata() for _ in range(5)))
    assert sum(1 for _, key, _ in fake.requests if key == ApiKey.METADATA) == 1
    await client.close()


async def test_a_lost_connection_triggers_a_metadata_refresh(fake: FakeCluster) -> None:
    fake.create_topic("t", 1)
    client = cluster_client(fake.bootstrap, metadata_max_age_ms=3_600_000)
    client.start()
    client.add_topics(["t"])
    await client.wait_for_topic("t", 5000)
    await client.connection(0)
    before = sum(1 for _, key, _ in fake.requests if key == ApiKey.METADATA)
    fake.drop_connections()
    for _ in range(100):  # bounded: up to 5 s
        if sum(1 for _, key, _ in fake.requests if key == ApiKey.METADATA) > before:
            break
        await asyncio.sleep(0.05)
    assert sum(1 for _, key, _ in fake.requests if key == ApiKey.METADATA) > before
    await client.close()


async def test_metadata_is_refreshed_when_it_gets_older_than_max_age(fake: FakeCluster) -> None:
    client = cluster_client(fake.bootstrap, metadata_max_age_ms=50, retry_backoff_ms=10)
    client.start()
    await client.refresh_metadata()
    fake.create_topic("later", 2)
    client.topics.add("later")  # tracked without asking for a refresh: only the age can bring it in
    for _ in range(100):  # bounded: up to 5 s
        if client.metadata.partitions_for("later"):
            break
        await asyncio.sleep(0.05)
    assert client.metadata.partitions_for("later") == [0, 1]
    await client.close()


async def test_unknown_topics_time_out_with_advice(fake: FakeCluster) -> None:
    client = cluster_client(fake.bootstrap)
    client.start()
    with pytest.raises(KafkaTimeoutError, match=r"topic 'nope' not available after 300 ms .*create it first"):
        await client.wait_for_topic("nope", 300)
    await client.close()


async def test_no_reachable_bootstrap_server_is_no_brokers_available() -> None:
    server, port = await serve(lambda r, w: asyncio.sleep(0))
    server.close()
    await server.wait_closed()
    client = cluster_client(f"127.0.0.1:{port}", request_timeout_ms=300)
    with pytest.raises(NoBrokersAvailable, match="no broker reachable within 300 ms"):
        await client.refresh_metadata()
    await client.close()


def test_backoff_grows_exponentially_with_jitter_up_to_the_maximum() -> None:
    assert backoff_ms(100, 1000, 0) == 0
    assert 80 <= backoff_ms(100, 1000, 1) <= 120
    assert 160 <= backoff_ms(100, 1000, 2) <= 240
    assert 800 <= backoff_ms(100, 1000, 10) <= 1200


def test_partitions_nest_under_their_topics_in_the_order_topics_first_appear() -> None:
    partitions = [("b", 1), ("a", 0), ("b", 0)]
    assert indexes_by_topic(partitions) == [
        {"name": "b", "partition_indexes": [1, 0]},
        {"name": "a", "partition_indexes": [0]},
    ]
    # ElectLeaders names its fields differently.
    assert indexes_by_topic(partitions, "topic", "partitions")[1] == {"topic": "a", "partitions": [0]}
