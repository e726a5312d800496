"""The API table: registration, version checks, and the ApiVersions answer clients negotiate with."""

from __future__ import annotations

import pytest
from kafka.protocol.metadata import ApiVersionsResponse as KpApiVersionsResponse

from backbone.protocol.api import (
    ADVERTISED_MIN_VERSION,
    SUPPORTED_VERSIONS,
    ApiKey,
    ApiTable,
    VersionRange,
    kio_versions,
)
from backbone.protocol.codec import encode, encode_response_frame
from backbone.protocol.errors import ErrorCode, InvalidRequestError, UnsupportedVersionError
from backbone.protocol.headers import decode_response_header

pytestmark = pytest.mark.unit


def full_table() -> ApiTable[str]:
    table: ApiTable[str] = ApiTable()
    for api_key in SUPPORTED_VERSIONS:
        table.register(api_key, f"handle-{api_key.name}")
    return table


def test_brief_lists_every_api_we_implement() -> None:
    assert set(SUPPORTED_VERSIONS) == set(ApiKey)


@pytest.mark.parametrize("api_key", list(SUPPORTED_VERSIONS))
def test_default_ranges_are_decodable_by_kio(api_key: ApiKey) -> None:
    supported, decodable = SUPPORTED_VERSIONS[api_key], kio_versions(api_key)
    assert decodable.min <= supported.min <= supported.max <= decodable.max


def test_key_version_choices() -> None:
    assert SUPPORTED_VERSIONS[ApiKey.PRODUCE] == VersionRange(3, 9)  # 3: first with record batch v2
    assert SUPPORTED_VERSIONS[ApiKey.FETCH].max == 12  # 13+ replace topic names with topic IDs
    assert SUPPORTED_VERSIONS[ApiKey.METADATA] == VersionRange(0, 12)
    assert SUPPORTED_VERSIONS[ApiKey.API_VERSIONS] == VersionRange(0, 4)


def test_handler_lookup_and_version_checks() -> None:
    table = full_table()
    assert table.handler(ApiKey.FETCH, 12) == "handle-FETCH"
    assert table.supports(ApiKey.FETCH, 4)
    assert not table.supports(ApiKey.FETCH, 13)
    with pytest.raises(UnsupportedVersionError, match="FETCH version 13"):
        table.handler(ApiKey.FETCH, 13)
    with pytest.raises(InvalidRequestError, match="unknown API key 57"):
        table.handler(57, 0)
    assert table.versions(57) is None


def test_registration_takes_a_custom_range_and_refuses_bad_ones() -> None:
    table: ApiTable[str] = ApiTable()
    table.register(ApiKey.JOIN_GROUP, "join", VersionRange(0, 4))
    assert table.versions(ApiKey.JOIN_GROUP) == VersionRange(0, 4)
    with pytest.raises(ValueError, match="already registered"):
        table.register(ApiKey.JOIN_GROUP, "again")
    with pytest.raises(ValueError, match="kio"):
        table.register(ApiKey.PRODUCE, "produce", VersionRange(0, 9))  # kio has no Produce v0-2
    with pytest.raises(ValueError):
        VersionRange(5, 4)


def test_only_registered_apis_are_advertised() -> None:
    table: ApiTable[str] = ApiTable()
    table.register(ApiKey.API_VERSIONS, "api-versions")
    table.register(ApiKey.METADATA, "metadata")
    assert table.advertised() == [(3, 0, 12), (18, 0, 4)]


def test_produce_is_advertised_from_zero_but_only_accepted_from_three() -> None:
    # KAFKA-18659: librdkafka enables compression only if Produce v0 is listed.
    table = full_table()
    assert ADVERTISED_MIN_VERSION == {ApiKey.PRODUCE: 0}
    assert (0, 0, 9) in table.advertised()
    assert not table.supports(ApiKey.PRODUCE, 2)
    with pytest.raises(UnsupportedVersionError):
        table.handler(ApiKey.PRODUCE, 0)


@pytest.mark.parametrize("version", range(5))
def test_api_versions_response_lists_the_table(version: int) -> None:
    table = full_table()
    body = encode(table.api_versions_response(version, throttle_time_ms=5))
    decoded = KpApiVersionsResponse.decode(body, version=version)
    assert decoded.error_code == 0
    assert [(k.api_key, k.min_version, k.max_version) for k in decoded.api_keys] == table.advertised()
    if version >= 1:
        assert decoded.throttle_time_ms == 5


def test_unsupported_api_versions_answer_is_v0_with_our_range() -> None:
    table = full_table()
    response = table.unsupported_api_versions_response()
    assert response.__version__ == 0
    frame = encode_response_frame(77, response)
    correlation_id, pos = decode_response_header(frame, 0, pos=4)
    assert correlation_id == 77
    decoded = KpApiVersionsResponse.decode(frame[pos:], version=0)
    assert decoded.error_code == ErrorCode.unsupported_version.value
    assert [(k.api_key, k.min_version, k.max_version) for k in decoded.api_keys] == [(18, 0, 4)]


# The versions librdkafka's feature map (rdkafka_feature.c) requires the broker to list; a
# missing feature silently disables e.g. message format v2, zstd or the group consumer.
LIBRDKAFKA_FEATURES = {
    "MSGVER2": [(ApiKey.PRODUCE, 3, 3), (ApiKey.FETCH, 4, 4)],
    "ZSTD": [(ApiKey.PRODUCE, 7, 7), (ApiKey.FETCH, 10, 10)],
    "BROKER_BALANCED_CONSUMER": [
        (ApiKey.FIND_COORDINATOR, 0, 0),
        (ApiKey.OFFSET_COMMIT, 1, 2),
        (ApiKey.OFFSET_FETCH, 1, 1),
        (ApiKey.JOIN_GROUP, 0, 0),
        (ApiKey.SYNC_GROUP, 0, 0),
        (ApiKey.HEARTBEAT, 0, 0),
        (ApiKey.LEAVE_GROUP, 0, 0),
    ],
    "OFFSET_TIME": [(ApiKey.LIST_OFFSETS, 1, 1)],
    "IDEMPOTENT_PRODUCER": [(ApiKey.INIT_PRODUCER_ID, 0, 0)],
}


@pytest.mark.parametrize("feature", list(LIBRDKAFKA_FEATURES))
def test_librdkafka_features_are_all_enabled(feature: str) -> None:
    advertised = {key: (low, high) for key, low, high in full_table().advertised()}
    for api_key, low, high in LIBRDKAFKA_FEATURES[feature]:
        broker_low, broker_high = advertised[api_key]
        assert broker_low <= high and low <= broker_high, (feature, api_key.name)
