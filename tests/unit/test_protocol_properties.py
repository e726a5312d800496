"""Property tests over Kafka's own message schemas (kio's generated classes), for every API and version the
broker advertises: any valid request decodes to exactly what was encoded and encodes back to the same
bytes; bytes after the last field are ignored, unknown tagged fields skipped, and every truncation is
refused with INVALID_REQUEST (MalformedMessage), never another exception. Responses round-trip too, and the
Produce fast path reads every Produce request as kio does.

Hypothesis builds the entities from the schema classes themselves (kio's primitive types carry their own
strategies: bounded integers, nullable strings and arrays, topic ids, durations), so null arrays and
strings, empty arrays, tagged fields and the lowest and highest versions all come up.
"""

from __future__ import annotations

import datetime
from dataclasses import fields

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.serial._introspect import get_field_tag
from kio.static.primitive import Records, i64Timedelta

from backbone.protocol.api import SUPPORTED_VERSIONS, ApiKey
from backbone.protocol.codec import decode_request, decode_response, encode, request_type, response_type
from backbone.protocol.errors import ErrorCode
from backbone.protocol.headers import MalformedMessage, encode_uvarint
from backbone.wire.produce import decode_produce_request

pytestmark = pytest.mark.unit

# Record sets are opaque bytes to the codec (the batch format has its own tests).
st.register_type_strategy(Records, st.binary(max_size=64))
# kio reads an int64 duration as microseconds (±2^63 µs, 292,000 years, of the int64 ms Kafka allows)
# and writes it through a float (exact to 2^51 ms); a duration beyond what it reads is refused as
# INVALID_REQUEST (test below). Draw within what round-trips exactly.
LONGEST_MS = 2**51


def exact_duration(ms: int) -> datetime.timedelta:
    return datetime.timedelta(seconds=ms // 1000, microseconds=ms % 1000 * 1000)  # no float on the way


st.register_type_strategy(
    i64Timedelta,
    st.integers(-LONGEST_MS, LONGEST_MS).map(
        lambda ms: i64Timedelta.parse(datetime.timedelta(milliseconds=ms))
    ),
)

ADVERTISED = [(key, version) for key, versions in SUPPORTED_VERSIONS.items() for version in versions]
PROPERTY = settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


def ids(case: tuple[ApiKey, int]) -> str:
    return f"{case[0].name}-v{case[1]}"


def has_top_level_tags(entity_type: type) -> bool:
    return any(get_field_tag(field) is not None for field in fields(entity_type))


@pytest.mark.parametrize("case", ADVERTISED, ids=ids)
@PROPERTY
@given(data=st.data())
def test_requests_round_trip(case: tuple[ApiKey, int], data: st.DataObject) -> None:
    api_key, version = case
    entity_type = request_type(api_key, version)
    entity = data.draw(st.from_type(entity_type), label="request")
    wire = encode(entity)

    decoded = decode_request(api_key, version, wire)
    assert decoded == entity
    assert encode(decoded) == wire
    # Bytes after the last field are ignored, as Kafka ignores them.
    assert decode_request(api_key, version, wire + data.draw(st.binary(min_size=1, max_size=4))) == entity
    if wire:  # (ListGroups v0 has no fields at all)
        # Every cut short message is refused as INVALID_REQUEST, whatever is missing.
        end = data.draw(st.integers(0, len(wire) - 1), label="cut at")
        with pytest.raises(MalformedMessage) as refused:
            decode_request(api_key, version, wire[:end])
        assert refused.value.code is ErrorCode.invalid_request
    if entity_type.__flexible__ and not has_top_level_tags(entity_type):
        # The message ends with its empty tag section; a tag this schema does not know is skipped.
        value = data.draw(st.binary(max_size=8), label="unknown tag value")
        tagged = wire[:-1] + encode_uvarint(1) + encode_uvarint(10_000) + encode_uvarint(len(value)) + value
        assert decode_request(api_key, version, tagged) == entity


@pytest.mark.parametrize("case", ADVERTISED, ids=ids)
@settings(PROPERTY, max_examples=2)  # responses nest deeply and are slow to draw; the broker writes them
@given(data=st.data())
def test_responses_round_trip(case: tuple[ApiKey, int], data: st.DataObject) -> None:
    api_key, version = case
    entity = data.draw(st.from_type(response_type(api_key, version)), label="response")
    wire = encode(entity)
    assert decode_response(api_key, version, wire) == entity


@pytest.mark.parametrize("version", list(SUPPORTED_VERSIONS[ApiKey.PRODUCE]))
@PROPERTY
@given(data=st.data())
def test_the_produce_fast_path_reads_what_kio_reads(version: int, data: st.DataObject) -> None:
    entity = data.draw(st.from_type(request_type(ApiKey.PRODUCE, version)), label="request")
    fast = decode_produce_request(encode(entity), version)
    assert (fast.transactional_id, fast.acks) == (entity.transactional_id, entity.acks)
    assert [
        (topic.name, [(p.index, None if p.records is None else bytes(p.records)) for p in topic.partitions])
        for topic in fast.topics
    ] == [(topic.name, [(p.index, p.records) for p in topic.partition_data]) for topic in entity.topic_data]


def test_a_duration_beyond_what_kio_holds_is_refused_as_invalid_request() -> None:
    entity_type = request_type(ApiKey.OFFSET_COMMIT, 3)
    retention = i64Timedelta.parse(exact_duration(LONGEST_MS))
    longest = entity_type(
        group_id="g", generation_id_or_member_epoch=1, member_id="m", retention_time=retention, topics=()
    )
    wire = encode(longest)
    assert decode_request(ApiKey.OFFSET_COMMIT, 3, wire) == longest
    beyond = wire.replace((LONGEST_MS).to_bytes(8, "big"), (2**63 - 1).to_bytes(8, "big"))
    with pytest.raises(MalformedMessage) as refused:
        decode_request(ApiKey.OFFSET_COMMIT, 3, beyond)
    assert refused.value.code is ErrorCode.invalid_request
