"""The client's hand-written codecs agree with the broker's fast paths and with kio, version by version."""

from __future__ import annotations

import pytest

from backbone.protocol.api import ApiKey
from backbone.protocol.codec import decode_request, decode_response, encode
from backbone.protocol.errors import UnsupportedVersionError
from backbone.protocol.headers import MalformedMessage
from backbone.protocol.records import RecordBatchBuilder
from backbone.wire.fetch import (
    FETCH_VERSIONS,
    FetchPartitionResult,
    FetchRequestPartition,
    decode_fetch_response,
    encode_fetch_request,
    encode_fetch_response,
)
from backbone.wire.messages import build_response, encode_request
from backbone.wire.produce import (
    PRODUCE_VERSIONS,
    ProducePartitionResult,
    decode_produce_request,
    decode_produce_response,
    encode_produce_request,
    encode_produce_response,
)

pytestmark = pytest.mark.unit


def batch(*values: bytes) -> bytes:
    builder = RecordBatchBuilder()
    for value in values:
        builder.append(None, value, timestamp=1_700_000_000_000)
    return builder.build()


TOPICS = [("alpha", [(0, batch(b"a0")), (2, batch(b"a2", b"a2b"))]), ("beta", [(1, batch(b"b1"))])]


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
def test_produce_request_reads_back_through_the_brokers_decoder_and_kio(version: int) -> None:
    body = b"".join(encode_produce_request(version, -1, 1500, TOPICS, transactional_id=None))
    decoded = decode_produce_request(body, version)
    assert decoded.acks == -1
    assert decoded.timeout_ms == 1500
    assert decoded.transactional_id is None
    assert [(t.name, [(p.index, bytes(p.records)) for p in t.partitions]) for t in decoded.topics] == TOPICS
    via_kio = decode_request(0, version, body)
    assert [t.name for t in via_kio.topic_data] == ["alpha", "beta"]


def test_produce_request_keeps_record_batches_as_separate_chunks() -> None:
    records = batch(b"x" * 1000)
    chunks = encode_produce_request(9, 1, 100, [("t", [(0, records)])])
    assert any(chunk is records for chunk in chunks), "the batch must be passed through, not copied"


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
def test_produce_response_matches_the_brokers_encoder(version: int) -> None:
    results = [
        ("alpha", [ProducePartitionResult(0, 0, 42, -1, 7), ProducePartitionResult(2, 6, -1, -1, 7)]),
        ("beta", [ProducePartitionResult(1, 0, 5, 1_700_000_000_123, 0, [(0, "bad record")], "broken")]),
    ]
    decoded = decode_produce_response(version, encode_produce_response(version, results))
    assert [(p.topic, p.partition, p.error_code, p.base_offset) for p in decoded] == [
        ("alpha", 0, 0, 42),
        ("alpha", 2, 6, -1),
        ("beta", 1, 0, 5),
    ]
    assert decoded[2].log_append_time_ms == 1_700_000_000_123
    assert decoded[0].log_start_offset == (7 if version >= 5 else -1)
    if version >= 8:
        assert decoded[2].record_errors == [(0, "bad record")]
        assert decoded[2].error_message == "broken"


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
def test_produce_response_reads_kios_encoding_with_and_without_the_plain_tail(version: int) -> None:
    # The decoder skips "no record errors, no message, no tags" in one step; everything else (errors, a
    # message, a tagged CurrentLeader from v10 on) is read field by field, and partitions stay aligned.
    plain = {"index": 0, "error_code": 0, "base_offset": 42, "log_append_time": None, "log_start_offset": 7}
    failed = {
        "index": 1,
        "error_code": 87,
        "base_offset": -1,
        "log_append_time": None,
        "log_start_offset": 7,
        "record_errors": [{"batch_index": 3, "batch_index_error_message": "bad"}],
        "error_message": "broken",
    }
    moved = {"index": 2, "error_code": 6, "base_offset": -1, "log_append_time": None, "log_start_offset": -1}
    moved["current_leader"] = {"leader_id": 2, "leader_epoch": 5}
    after = dict(plain, index=3, base_offset=43)
    responses = [
        {"name": "alpha", "partition_responses": [plain, failed, moved, after]},
        {"name": "beta", "partition_responses": [dict(plain, base_offset=9)]},
    ]
    body = encode(build_response(ApiKey.PRODUCE, version, responses=responses, throttle_time=0))
    decoded = decode_produce_response(version, body)
    assert [(p.topic, p.partition, p.error_code, p.base_offset) for p in decoded] == [
        ("alpha", 0, 0, 42),
        ("alpha", 1, 87, -1),
        ("alpha", 2, 6, -1),
        ("alpha", 3, 0, 43),
        ("beta", 0, 0, 9),
    ]
    assert [p.log_start_offset for p in decoded] == ([7, 7, -1, 7, 7] if version >= 5 else [-1] * 5)
    with_errors = version >= 8
    assert decoded[1].record_errors == ([(3, "bad")] if with_errors else [])
    assert decoded[1].error_message == ("broken" if with_errors else None)
    assert all(p.record_errors == [] and p.error_message is None for p in decoded if p.partition != 1)


@pytest.mark.parametrize("version", FETCH_VERSIONS)
@pytest.mark.parametrize(("replica_id", "leader_epoch", "log_start"), [(-1, -1, -1), (3, 7, 12)])
def test_fetch_request_matches_kio_byte_for_byte(
    version: int, replica_id: int, leader_epoch: int, log_start: int
) -> None:
    asked = {
        ("alpha", 0): FetchRequestPartition(0, 100, 1 << 20, leader_epoch, log_start),
        ("béta", 1): FetchRequestPartition(1, 0, 77, leader_epoch, log_start),
        ("alpha", 2): FetchRequestPartition(2, 5, 4096, leader_epoch, log_start),
    }
    fields = {
        "replica_id": replica_id,
        "min_bytes": 1,
        "max_bytes": 52_428_800,
        "isolation_level": 1,
        "session_id": 9,
        "session_epoch": 4,
        "rack_id": "rack-1",
    }
    ours = encode_fetch_request(
        version, max_wait_ms=500, partitions=asked, forgotten=[("gone", 3), ("gone", 4)], **fields
    )
    by_kio = encode_request(
        ApiKey.FETCH,
        version,
        max_wait=500,
        topics=[
            {"topic": "alpha", "partitions": [asked["alpha", 0]._asdict(), asked["alpha", 2]._asdict()]},
            {"topic": "béta", "partitions": [asked["béta", 1]._asdict()]},
        ],
        forgotten_topics_data=[{"topic": "gone", "partitions": [3, 4]}],
        **fields,
    )
    assert ours == by_kio
    read_back = decode_request(ApiKey.FETCH, version, ours)
    assert [(t.topic, [int(p.fetch_offset) for p in t.partitions]) for t in read_back.topics] == [
        ("alpha", [100, 5]),
        ("béta", [0]),
    ]


@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_fetch_response_matches_the_brokers_encoder_and_kio(version: int) -> None:
    records = batch(b"one", b"two")
    topics = [
        (
            "alpha",
            [
                FetchPartitionResult(0, 0, 10, 9, 3, [(77, 4)], -1, records),
                FetchPartitionResult(1, 1, -1, -1, -1, None, -1, None, current_leader=(2, 5)),
            ],
        ),
        ("beta", [FetchPartitionResult(3, 0, 0, 0, 0, None, -1, b"")]),
    ]
    body = b"".join(bytes(chunk) for chunk in encode_fetch_response(version, topics, session_id=0))
    decoded = decode_fetch_response(version, body)
    alpha, beta = decoded.topics
    assert alpha[0] == "alpha" and beta[0] == "beta"
    first, second = alpha[1]
    assert (first.partition, first.error_code, first.high_watermark, first.last_stable_offset) == (
        0,
        0,
        10,
        9,
    )
    assert first.log_start_offset == (3 if version >= 5 else -1)
    assert first.aborted_transactions == [(77, 4)]
    assert first.records == records
    assert (second.error_code, second.records, second.aborted_transactions) == (1, None, None)
    assert second.current_leader == ((2, 5) if version >= 12 else None)
    assert beta[1][0].records == b""
    via_kio = decode_response(1, version, body)
    assert via_kio.responses[0].partitions[0].records == records


def test_fetch_response_skips_unknown_tags() -> None:
    # A v12 partition with an unknown tag 9 (4 bytes) ahead of CurrentLeader (tag 1).
    body = b"".join(
        bytes(c) for c in encode_fetch_response(12, [("t", [FetchPartitionResult(0, records=b"")])])
    )
    plain_tags = b"\x00\x00\x00"  # partition tags, topic tags, response tags
    assert body.endswith(plain_tags)
    tagged = (
        body[: -len(plain_tags)]
        + b"\x02\x09\x04abcd\x01\x09\x00\x00\x00\x07\x00\x00\x00\x03\x00"
        + b"\x00\x00"
    )
    decoded = decode_fetch_response(12, tagged)
    assert decoded.topics[0][1][0].current_leader == (7, 3)


@pytest.mark.parametrize("cut", [3, 10, 25])
def test_truncated_fetch_responses_are_malformed(cut: int) -> None:
    body = b"".join(
        bytes(c) for c in encode_fetch_response(11, [("t", [FetchPartitionResult(0, records=batch(b"v"))])])
    )
    with pytest.raises(MalformedMessage):
        decode_fetch_response(11, body[:cut])


def test_records_running_past_the_end_are_malformed() -> None:
    body = b"".join(
        bytes(c) for c in encode_fetch_response(11, [("t", [FetchPartitionResult(0, records=batch(b"v"))])])
    )
    with pytest.raises(MalformedMessage, match="records run past the end"):
        decode_fetch_response(11, body[:-5])


def test_versions_outside_the_codecs_are_refused() -> None:
    with pytest.raises(UnsupportedVersionError):
        encode_produce_request(2, 1, 1, [])
    with pytest.raises(UnsupportedVersionError):
        decode_fetch_response(13, b"")
    with pytest.raises(UnsupportedVersionError):
        encode_fetch_request(
            3, replica_id=-1, max_wait_ms=1, min_bytes=1, max_bytes=1, isolation_level=0, partitions={}
        )
