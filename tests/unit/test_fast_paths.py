"""The hand-written Produce/Fetch codecs against kio (byte for byte) and kafka-python."""

from __future__ import annotations

import dataclasses
import datetime
from dataclasses import dataclass
from typing import Any

import pytest
from kafka.protocol.consumer import FetchResponse as KpFetchResponse
from kafka.protocol.producer import ProduceRequest as KpProduceRequest
from kafka.protocol.producer import ProduceResponse as KpProduceResponse
from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType
from kio.static.primitive import i32Timedelta

from backbone.protocol.api import SUPPORTED_VERSIONS, ApiKey
from backbone.protocol.codec import decode_request, encode
from backbone.protocol.errors import UnsupportedVersionError
from backbone.protocol.headers import MalformedMessage, encode_uvarint
from backbone.wire.chunks import chunk_length, frame_chunks
from backbone.wire.fetch import FETCH_VERSIONS, FetchPartitionResult, encode_fetch_response
from backbone.wire.produce import (
    PRODUCE_VERSIONS,
    ProducePartitionResult,
    decode_produce_request,
    encode_produce_response,
)

pytestmark = pytest.mark.unit


def make(cls: type, **values: Any) -> Any:
    """A kio entity of `cls` from the values its version has (others are dropped)."""
    names = {field.name for field in dataclasses.fields(cls)}
    return cls(**{name: value for name, value in values.items() if name in names})


def millis(ms: int) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=ms))


def test_fast_paths_cover_every_advertised_version() -> None:
    assert set(SUPPORTED_VERSIONS[ApiKey.PRODUCE]) <= set(PRODUCE_VERSIONS)
    assert set(SUPPORTED_VERSIONS[ApiKey.FETCH]) <= set(FETCH_VERSIONS)


# -- Produce request --------------------------------------------------------------------------

BATCH_A = bytes(range(61)) * 3
BATCH_B = b"\x00" * 70 + b"batch-b"


def kio_produce_request(version: int, transactional_id: str | None) -> bytes:
    m = load_payload_module(0, version, EntityType.request)
    topics = (
        m.TopicProduceData(
            name="events",
            partition_data=(
                m.PartitionProduceData(index=0, records=BATCH_A),
                m.PartitionProduceData(index=3, records=None),
                m.PartitionProduceData(index=7, records=b""),
            ),
        ),
        m.TopicProduceData(
            name="ünïcode-topic", partition_data=(m.PartitionProduceData(index=1, records=BATCH_B),)
        ),
        m.TopicProduceData(name="empty", partition_data=()),
    )
    request = make(
        m.ProduceRequest,
        transactional_id=transactional_id,
        acks=-1,
        timeout=millis(30_000),
        topic_data=topics,
    )
    return encode(request)


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
@pytest.mark.parametrize("transactional_id", [None, "txn-1"])
def test_produce_request_matches_kio(version: int, transactional_id: str | None) -> None:
    body = kio_produce_request(version, transactional_id)
    request = decode_produce_request(body, version)
    assert request.transactional_id == transactional_id
    assert (request.acks, request.timeout_ms) == (-1, 30_000)
    seen = [
        (topic.name, part.index, None if part.records is None else bytes(part.records))
        for topic in request.topics
        for part in topic.partitions
    ]
    assert seen == [
        ("events", 0, BATCH_A),
        ("events", 3, None),
        ("events", 7, b""),
        ("ünïcode-topic", 1, BATCH_B),
    ]
    assert [topic.name for topic in request.topics] == ["events", "ünïcode-topic", "empty"]


def test_produce_request_records_are_views_not_copies() -> None:
    body = bytearray(kio_produce_request(9, None))
    request = decode_produce_request(body, 9)
    records = request.topics[0].partitions[0].records
    assert isinstance(records, memoryview)
    assert records.obj is body
    start = body.find(BATCH_A)
    body[start] ^= 0xFF  # a write through the buffer shows in the view: same memory
    assert records[0] == body[start]


def test_produce_request_decodes_at_an_offset() -> None:
    body = kio_produce_request(7, None)
    request = decode_produce_request(b"HEADER" + body, 7, pos=6)
    assert request.topics[0].partitions[0].records == BATCH_A


def _tags(*entries: tuple[int, bytes]) -> bytes:
    out = encode_uvarint(len(entries))
    for tag, value in entries:
        out += encode_uvarint(tag) + encode_uvarint(len(value)) + value
    return out


def test_produce_request_skips_unknown_tagged_fields() -> None:
    # v9 by hand: null transactional id, acks 1, timeout 1000, one topic "t", one partition 5,
    # with unknown tags on the partition, the topic and the request.
    head = (
        b"\x00"
        + b"\x00\x01\x00\x00\x03\xe8"
        + b"\x02"
        + b"\x02t"
        + b"\x02"
        + b"\x00\x00\x00\x05"
        + b"\x04abc"
    )
    clean = head + b"\x00" + b"\x00" + b"\x00"
    tagged = (
        head
        + _tags((9, b"partition-level"))
        + _tags((4, b""), (200, b"topic-level"))
        + _tags((77, b"x" * 200))
    )
    request = decode_produce_request(tagged, 9)
    assert request.topics[0].name == "t"
    assert request.topics[0].partitions[0].index == 5
    assert request.topics[0].partitions[0].records == b"abc"
    # The general codec (kio) has to drop unknown tags too, and must see the same request.
    assert decode_request(0, 9, tagged) == decode_request(0, 9, clean)
    assert decode_request(0, 9, tagged).topic_data[0].partition_data[0].records == b"abc"


def test_produce_request_rejects_every_truncation() -> None:
    body = kio_produce_request(9, "txn")
    for end in range(len(body)):
        with pytest.raises(MalformedMessage):
            decode_produce_request(body[:end], 9)


@pytest.mark.parametrize("version", [3, 9])
def test_produce_request_ignores_trailing_bytes(version: int) -> None:
    # Kafka reads a request's fields and ignores whatever follows them.
    body = kio_produce_request(version, None)
    assert decode_produce_request(body + b"\x00\x00\x00", version) == decode_produce_request(body, version)


def test_produce_request_rejects_absurd_lengths_and_bad_utf8() -> None:
    # v3: null txn id, acks, timeout, 1 topic named with a length far beyond the buffer.
    head = b"\xff\xff" + b"\x00\x01\x00\x00\x03\xe8" + b"\x00\x00\x00\x01"
    with pytest.raises(MalformedMessage):
        decode_produce_request(head + b"\x7f\xff" + b"t", 3)
    with pytest.raises(MalformedMessage, match="UTF-8"):
        decode_produce_request(head + b"\x00\x01\xff" + b"\x00\x00\x00\x00", 3)
    with pytest.raises(MalformedMessage, match="null topic array"):
        decode_produce_request(b"\xff\xff" + b"\x00\x01\x00\x00\x03\xe8" + b"\xff\xff\xff\xff", 3)


@pytest.mark.parametrize("version", [2, 13])
def test_produce_request_refuses_versions_outside_its_range(version: int) -> None:
    with pytest.raises(UnsupportedVersionError):
        decode_produce_request(b"", version)


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
def test_produce_request_from_kafka_python(version: int) -> None:
    topic, part = KpProduceRequest.TopicProduceData, KpProduceRequest.TopicProduceData.PartitionProduceData
    request = KpProduceRequest(
        version=version,
        transactional_id=None,
        acks=1,
        timeout_ms=1500,
        topic_data=[
            topic(name="kp", partition_data=[part(index=2, records=BATCH_A), part(index=4, records=None)])
        ],
    )
    decoded = decode_produce_request(bytes(request.encode()), version)
    assert (decoded.acks, decoded.timeout_ms) == (1, 1500)
    assert [(p.index, p.records) for p in decoded.topics[0].partitions] == [(2, BATCH_A), (4, None)]


# -- Produce response -------------------------------------------------------------------------

APPEND_TIME_MS = 1_700_000_000_123
PRODUCE_RESULTS = [
    (
        "events",
        [
            ProducePartitionResult(0, 0, 1000, -1, 12),
            ProducePartitionResult(
                3,
                int(ErrorCode.invalid_record),
                -1,
                -1,
                -1,
                [(0, "bad key"), (4, None)],
                "batch rejected",
            ),
        ],
    ),
    ("log-append-time", [ProducePartitionResult(1, 0, 5, APPEND_TIME_MS, 0)]),
    ("nothing", []),
]


def kio_produce_response(version: int, throttle_ms: int) -> bytes:
    m = load_payload_module(0, version, EntityType.response)
    topics = []
    for name, parts in PRODUCE_RESULTS:
        partitions = []
        for p in parts:
            append_time = None
            if p.log_append_time_ms != -1:
                append_time = datetime.datetime.fromtimestamp(p.log_append_time_ms / 1000, tz=datetime.UTC)
            errors = ()
            if version >= 8:  # older versions have no per-record errors; they are not sent
                errors = tuple(
                    m.BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=msg)
                    for i, msg in p.record_errors
                )
            partitions.append(
                make(
                    m.PartitionProduceResponse,
                    index=p.index,
                    error_code=ErrorCode(p.error_code),
                    base_offset=p.base_offset,
                    log_append_time=append_time,
                    log_start_offset=p.log_start_offset,
                    record_errors=errors,
                    error_message=p.error_message,
                )
            )
        topics.append(m.TopicProduceResponse(name=name, partition_responses=tuple(partitions)))
    return encode(make(m.ProduceResponse, responses=tuple(topics), throttle_time=millis(throttle_ms)))


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
@pytest.mark.parametrize("throttle_ms", [0, 250])
def test_produce_response_matches_kio(version: int, throttle_ms: int) -> None:
    expected = kio_produce_response(version, throttle_ms)
    assert encode_produce_response(version, PRODUCE_RESULTS, throttle_time_ms=throttle_ms) == expected


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
def test_produce_response_read_by_kafka_python(version: int) -> None:
    body = encode_produce_response(version, PRODUCE_RESULTS, throttle_time_ms=7)
    response = KpProduceResponse.decode(body, version=version)
    assert response.throttle_time_ms == 7
    first, second = response.responses[0].partition_responses
    assert (first.index, first.error_code, first.base_offset) == (0, 0, 1000)
    assert second.error_code == ErrorCode.invalid_record.value
    if version >= 8:
        assert [(e.batch_index, e.batch_index_error_message) for e in second.record_errors] == [
            (0, "bad key"),
            (4, None),
        ]
        assert second.error_message == "batch rejected"


def test_produce_response_refuses_versions_outside_its_range() -> None:
    with pytest.raises(UnsupportedVersionError):
        encode_produce_response(13, [])


# -- Fetch response ---------------------------------------------------------------------------


@dataclass(frozen=True)
class FakeRegion:
    """Stands in for the log's file region: the fast path only reads `length`."""

    data: bytes

    @property
    def length(self) -> int:
        return len(self.data)


REGION_1 = FakeRegion(b"R" * 300)
REGION_2 = FakeRegion(bytes(range(256)) * 5)


def fetch_results(version: int) -> list[tuple[str, list[FetchPartitionResult]]]:
    flexible = version >= 12
    return [
        (
            "events",
            [
                FetchPartitionResult(0, 0, 1500, 1400, 10, None, -1, REGION_1),
                FetchPartitionResult(1, 0, 20, 20, 0, [], -1, b""),
                FetchPartitionResult(
                    2,
                    int(ErrorCode.not_leader_or_follower),
                    -1,
                    -1,
                    -1,
                    None,
                    -1,
                    None,
                    current_leader=(3, 17) if flexible else None,
                ),
                FetchPartitionResult(
                    5,
                    0,
                    900,
                    800,
                    100,
                    [(4000, 850), (4001, 870)],
                    2 if version >= 11 else -1,
                    memoryview(b"inline-records"),
                    diverging_epoch=(6, 880) if flexible else None,
                ),
            ],
        ),
        ("other", [FetchPartitionResult(0, 0, 5, 5, 0, None, -1, REGION_2)]),
        ("quiet", []),
    ]


def resolve(chunks: list[Any]) -> bytes:
    return b"".join(chunk.data if isinstance(chunk, FakeRegion) else bytes(chunk) for chunk in chunks)


def kio_fetch_response(version: int, topics: list[tuple[str, list[FetchPartitionResult]]]) -> bytes:
    m = load_payload_module(1, version, EntityType.response)
    out_topics = []
    for name, parts in topics:
        partitions = []
        for p in parts:
            records = p.records
            if isinstance(records, FakeRegion):
                records = records.data
            elif records is not None:
                records = bytes(records)
            aborted = p.aborted_transactions
            extra: dict[str, Any] = {}
            if p.diverging_epoch is not None:
                extra["diverging_epoch"] = m.EpochEndOffset(
                    epoch=p.diverging_epoch[0], end_offset=p.diverging_epoch[1]
                )
            if p.current_leader is not None:
                extra["current_leader"] = m.LeaderIdAndEpoch(
                    leader_id=p.current_leader[0], leader_epoch=p.current_leader[1]
                )
            partitions.append(
                make(
                    m.PartitionData,
                    partition_index=p.partition_index,
                    error_code=ErrorCode(p.error_code),
                    high_watermark=p.high_watermark,
                    last_stable_offset=p.last_stable_offset,
                    log_start_offset=p.log_start_offset,
                    aborted_transactions=None
                    if aborted is None
                    else tuple(m.AbortedTransaction(producer_id=a, first_offset=b) for a, b in aborted),
                    preferred_read_replica=p.preferred_read_replica,
                    records=records,
                    **extra,
                )
            )
        out_topics.append(m.FetchableTopicResponse(topic=name, partitions=tuple(partitions)))
    response = make(
        m.FetchResponse,
        throttle_time=millis(33),
        error_code=ErrorCode.none,
        session_id=0,
        responses=tuple(out_topics),
    )
    return encode(response)


@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_fetch_response_matches_kio(version: int) -> None:
    topics = fetch_results(version)
    chunks = encode_fetch_response(version, topics, throttle_time_ms=33)
    assert resolve(chunks) == kio_fetch_response(version, topics)


def test_fetch_response_passes_records_through_untouched() -> None:
    topics = fetch_results(12)
    chunks = encode_fetch_response(12, topics)
    assert REGION_1 in chunks and REGION_2 in chunks
    inline = topics[0][1][3].records
    assert any(chunk is inline for chunk in chunks)
    assert all(chunk_length(chunk) > 0 for chunk in chunks)


@pytest.mark.parametrize("version", [7, 12])
def test_fetch_response_top_level_error_and_session(version: int) -> None:
    chunks = encode_fetch_response(
        version, [], throttle_time_ms=1, error_code=int(ErrorCode.fetch_session_id_not_found), session_id=99
    )
    response = KpFetchResponse.decode(resolve(chunks), version=version)
    assert (response.throttle_time_ms, response.error_code, response.session_id) == (
        1,
        ErrorCode.fetch_session_id_not_found.value,
        99,
    )
    assert response.responses == []


def test_fetch_response_writes_default_tags_like_kafka_does_not() -> None:
    # Kafka omits a tagged field holding its default; so must we, or sizes differ from kio's.
    plain = encode_fetch_response(12, [("t", [FetchPartitionResult(0, records=b"")])])
    defaulted = encode_fetch_response(
        12, [("t", [FetchPartitionResult(0, records=b"", diverging_epoch=(-1, -1), current_leader=(-1, -1))])]
    )
    assert resolve(plain) == resolve(defaulted)


@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_fetch_response_read_by_kafka_python(version: int) -> None:
    topics = fetch_results(version)
    response = KpFetchResponse.decode(resolve(encode_fetch_response(version, topics)), version=version)
    assert [t.topic for t in response.responses] == ["events", "other", "quiet"]
    parts = response.responses[0].partitions
    assert bytes(parts[0].records) == REGION_1.data
    assert parts[2].records is None
    assert parts[2].error_code == ErrorCode.not_leader_or_follower.value
    assert [(a.producer_id, a.first_offset) for a in parts[3].aborted_transactions] == [
        (4000, 850),
        (4001, 870),
    ]
    assert parts[0].aborted_transactions is None
    assert parts[1].aborted_transactions == []
    if version >= 12:
        assert (parts[3].diverging_epoch.epoch, parts[3].diverging_epoch.end_offset) == (6, 880)
        assert (parts[2].current_leader.leader_id, parts[2].current_leader.leader_epoch) == (3, 17)


@pytest.mark.parametrize("version", [3, 13])
def test_fetch_response_refuses_versions_outside_its_range(version: int) -> None:
    with pytest.raises(UnsupportedVersionError):
        encode_fetch_response(version, [])


def test_small_byte_chunks_are_framed_as_one_and_large_ones_are_not_copied() -> None:
    body = encode_produce_response(9, [("t", [ProducePartitionResult(0, base_offset=7)])])
    (framed,) = frame_chunks(5, 1, [body[:3], memoryview(body)[3:]])
    assert framed == (4 + 1 + len(body)).to_bytes(4, "big") + (5).to_bytes(4, "big") + b"\x00" + body
    large = b"x" * (64 * 1024)
    chunks = frame_chunks(5, 0, [b"ab", large, b"cd"])
    assert [len(chunk) for chunk in chunks] == [10, len(large), 2]
    assert chunks[1] is large


@pytest.mark.parametrize(("version", "header_version"), [(11, 0), (12, 1)])
def test_frame_chunks_prefix_counts_header_and_regions(version: int, header_version: int) -> None:
    body = encode_fetch_response(version, fetch_results(version))
    framed = frame_chunks(42, header_version, body)
    data = resolve(framed)
    assert int.from_bytes(data[:4], "big", signed=True) == len(data) - 4
    assert data[4:8] == (42).to_bytes(4, "big")
    header_size = 4 + header_version  # v1 adds an empty tagged-field section (one byte)
    assert data[8 : 4 + header_size] == b"\x00" * header_version
    assert data[4 + header_size :] == resolve(body)
    response = KpFetchResponse.decode(data, version=version, header=True, framed=True)
    assert response.header.correlation_id == 42
