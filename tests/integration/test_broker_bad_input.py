"""Bad input gets a Kafka error code or a closed connection; the broker stays up, other connections are
unaffected, and nothing stored changes."""

from __future__ import annotations

import os
import struct

import pytest
from kio.schema.errors import ErrorCode

from backbone.protocol.headers import encode_request_header
from backbone.protocol.records import RecordBatchBuilder
from tests.helpers.requests import latest_offset_request, metadata_request, produce_request
from tests.helpers.wire import RawConnection

pytestmark = pytest.mark.integration

TOPIC = "guarded"
MAX_REQUEST_BYTES = 1 << 20


def records(count: int = 5) -> bytes:
    builder = RecordBatchBuilder()
    for i in range(count):
        builder.append(b"k", b"value %d" % i)
    return builder.build()


def frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def request_bytes(api_key: int, version: int, body: bytes = b"") -> bytes:
    return frame(encode_request_header(api_key, version, 7, "bad-client") + body)


@pytest.fixture
def guarded(broker_factory, wait_for):
    broker = broker_factory(1, socket_request_max_bytes=MAX_REQUEST_BYTES)
    with RawConnection(broker.bootstrap) as connection:

        def ready() -> bool:
            topic = connection.request(metadata_request(TOPIC)).topics[0]
            return topic.error_code == ErrorCode.none and topic.partitions[0].leader_id >= 0

        wait_for(ready, timeout=20, what="the topic's leader")
        answer = connection.request(produce_request(TOPIC, 0, records())).responses[0].partition_responses[0]
        assert answer.error_code == ErrorCode.none
    return broker


def stored_end(bootstrap: str) -> int:
    with RawConnection(bootstrap) as connection:
        return connection.request(latest_offset_request(TOPIC, 0)).topics[0].partitions[0].offset


BAD_STREAMS = {
    "garbage": frame(os.urandom(64)),
    "size past the limit": struct.pack(">i", MAX_REQUEST_BYTES + 1) + b"x" * 100,
    "negative size": struct.pack(">i", -5),
    "header cut short": frame(b"\x00\x03\x00"),
    "unknown api key": request_bytes(999, 0),
    "unsupported metadata version": request_bytes(3, 99),
    # Produce v0-v2 (message format v0/v1) are listed by ApiVersions for librdkafka but refused, as Kafka 4.0
    # refuses them (KIP-896, KAFKA-18659): the connection closes.
    "produce v1 (message format v1)": request_bytes(0, 1, b"\x00" * 10),
    "produce v2 (before record batch v2)": request_bytes(0, 2, b"\x00" * 10),
    "truncated produce body": request_bytes(0, 9, b"\x00\x00\x01"),
    "absurd array length": request_bytes(3, 12, b"\x7f\xff\xff\xff\x01\x00\x00"),
}


@pytest.mark.parametrize("stream", BAD_STREAMS.values(), ids=BAD_STREAMS.keys())
def test_bad_requests_close_only_their_connection(guarded, stream: bytes) -> None:
    before = stored_end(guarded.bootstrap)
    with RawConnection(guarded.bootstrap) as bystander, RawConnection(guarded.bootstrap) as attacker:
        attacker.send_bytes(stream)
        assert attacker.closed_by_peer(timeout=10)
        # Another connection, open the whole time, still works.
        assert bystander.request(metadata_request(TOPIC)).topics[0].error_code == ErrorCode.none
    assert guarded.is_running()
    assert stored_end(guarded.bootstrap) == before


def test_a_frame_that_stops_half_way_does_not_hang_the_broker(guarded) -> None:
    with RawConnection(guarded.bootstrap) as attacker:
        attacker.send_bytes(struct.pack(">i", 1000) + b"only a little")
    assert stored_end(guarded.bootstrap) == 5


def test_unsupported_api_versions_version_gets_a_v0_answer(guarded) -> None:
    with RawConnection(guarded.bootstrap) as connection:
        connection.send_bytes(request_bytes(18, 99))
        body = connection.read_frame()
    correlation_id, error_code = struct.unpack_from(">ih", body)
    assert correlation_id == 7
    assert error_code == ErrorCode.unsupported_version


def test_corrupt_batches_are_refused_and_nothing_is_written(guarded) -> None:
    good = bytearray(records())
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 0xFF
    bad_magic = bytearray(good)
    bad_magic[16] = 1
    bad_length = bytearray(good)
    bad_length[8:12] = struct.pack(">i", len(good))
    cases = {
        bytes(bad_crc): ErrorCode.corrupt_message,
        bytes(bad_magic): ErrorCode.invalid_record,
        bytes(bad_length): ErrorCode.corrupt_message,
        bytes(good[:40]): ErrorCode.corrupt_message,
    }
    with RawConnection(guarded.bootstrap) as connection:
        for data, expected in cases.items():
            answer = connection.request(produce_request(TOPIC, 0, data)).responses[0].partition_responses[0]
            assert answer.error_code == expected
    assert stored_end(guarded.bootstrap) == 5


def test_unknown_topics_and_partitions_get_their_error(guarded) -> None:
    with RawConnection(guarded.bootstrap) as connection:
        for topic, partition in ((TOPIC, 7), ("no-such-topic", 0)):
            answer = connection.request(produce_request(topic, partition, records())).responses[0]
            assert answer.partition_responses[0].error_code == ErrorCode.unknown_topic_or_partition
            listed = connection.request(latest_offset_request(topic, partition)).topics[0].partitions[0]
            assert listed.error_code == ErrorCode.unknown_topic_or_partition
        invalid = connection.request(metadata_request("bad/name")).topics[0]
        assert invalid.error_code == ErrorCode.invalid_topic_exception
    assert stored_end(guarded.bootstrap) == 5
