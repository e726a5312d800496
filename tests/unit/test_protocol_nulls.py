"""Requests with null where the schema allows none are malformed (found by the protocol fuzzer)."""

from __future__ import annotations

import pytest

from backbone.protocol import codec
from backbone.protocol.errors import InvalidRequestError
from backbone.protocol.headers import decode_request_header, encode_request_header
from backbone.protocol.nulls import check_no_illegal_nulls

pytestmark = pytest.mark.unit


def decoded(api_key: int, version: int, body_hex: str) -> object:
    frame = memoryview(encode_request_header(api_key, version, 9, "t") + bytes.fromhex(body_hex))
    _, offset = decode_request_header(frame)
    return codec.decode_request(api_key, version, frame, offset)


def test_a_null_array_the_schema_forbids_is_refused() -> None:
    request = decoded(23, 4, "ffffffff0000")  # OffsetForLeaderEpoch v4: replica_id -1, topics null
    with pytest.raises(InvalidRequestError, match="topics is null"):
        check_no_illegal_nulls(request)


def test_nullable_fields_and_nested_entities_pass() -> None:
    check_no_illegal_nulls(decoded(3, 12, "00000000"))  # Metadata v12: topics null means all topics
    # OffsetForLeaderEpoch v4 with one topic holding one partition: nothing null.
    check_no_illegal_nulls(decoded(23, 4, "ffffffff02026102000000000000000100000001000000"))
