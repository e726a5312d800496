"""Building kio request entities for whatever version was negotiated, and picking that version.

The client speaks many versions of each API, and kio has one dataclass per version whose fields come and
go between versions. `build_request(api_key, version, **fields)` takes one version-independent description
(nested lists of dicts for nested structs) and fills the dataclass of `version`: fields that version lacks
are left out, fields the caller did not give take the schema default or, without one, the zero value of
their type, which is what Kafka's own generated code does for fields without a default. Times given as
plain integers (milliseconds) become the `timedelta` kio wants.

The version chosen for each API is the highest both sides speak: the client's range (`CLIENT_VERSIONS`, the
protocol room's table, which every code path here handles) against the broker's ApiVersions answer.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, dataclass, fields
from functools import cache
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    classify_field,
    get_schema_field_type,
    is_optional,
)

from backbone.protocol.api import SUPPORTED_VERSIONS, ApiKey, VersionRange
from backbone.protocol.codec import encode, request_type, response_type
from backbone.protocol.errors import ErrorCode, UnsupportedVersionError

__all__ = [
    "CLIENT_VERSIONS",
    "build_request",
    "build_response",
    "encode_request",
    "negotiate",
    "pick_version",
]

CLIENT_VERSIONS: Mapping[int, VersionRange] = {
    **SUPPORTED_VERSIONS,
    # Metadata v0 reads an empty topic list as "all topics"; v1+ uses null for that. One meaning is enough.
    ApiKey.METADATA: VersionRange(1, SUPPORTED_VERSIONS[ApiKey.METADATA].max),
}
"""The versions of each API this client can send and read (see the protocol room's `api` module)."""

_ZERO_UUID = uuid.UUID(int=0)
_ZEROS: dict[str, Any] = {
    "bool": False,
    "string": "",
    "bytes": b"",
    "records": None,
    "uuid": _ZERO_UUID,
    "timedelta_i32": datetime.timedelta(0),
    "timedelta_i64": datetime.timedelta(0),
    "float64": 0.0,
    "error_code": ErrorCode.none,
}


@dataclass(frozen=True, slots=True)
class _FieldInfo:
    name: str
    nested: type | None  # the struct type of a nested field or array of structs
    is_array: bool
    kafka_type: str | None
    optional: bool
    has_default: bool


@cache
def _field_infos(entity_type: type) -> tuple[_FieldInfo, ...]:
    infos = []
    for field in fields(entity_type):
        kind = classify_field(field)
        nested = kind.type_ if isinstance(kind, EntityField | EntityTupleField) else None
        infos.append(
            _FieldInfo(
                name=field.name,
                nested=nested,
                is_array=kind.is_array,
                kafka_type=None if nested else get_schema_field_type(field),
                optional=is_optional(field),
                has_default=field.default is not MISSING or field.default_factory is not MISSING,
            )
        )
    return tuple(infos)


def _convert(info: _FieldInfo, value: Any) -> Any:
    if value is None:
        return None
    if info.nested is not None:
        if info.is_array:
            return tuple(_make(info.nested, item) for item in value)
        return _make(info.nested, value)
    if info.is_array:
        return tuple(value)
    if info.kafka_type in ("timedelta_i32", "timedelta_i64") and not isinstance(value, datetime.timedelta):
        return datetime.timedelta(milliseconds=value)
    if info.kafka_type == "error_code":
        return ErrorCode(value)
    return value


def _zero(info: _FieldInfo) -> Any:
    if info.is_array:
        return ()
    if info.optional:
        return None
    return _ZEROS.get(info.kafka_type or "", 0)


def _make(entity_type: type, values: Mapping[str, Any]) -> Any:
    kwargs = {}
    for info in _field_infos(entity_type):
        if info.name in values:
            kwargs[info.name] = _convert(info, values[info.name])
        elif not info.has_default:
            kwargs[info.name] = _zero(info)
    return entity_type(**kwargs)


def build_request(api_key: int, version: int, /, **values: Any) -> Any:
    """The kio request entity of `version`; fields the version does not have are ignored."""
    return _make(request_type(api_key, version), values)


def build_response(api_key: int, version: int, /, **values: Any) -> Any:
    """The kio response entity of `version` (for brokers written in tests and tools)."""
    return _make(response_type(api_key, version), values)


def encode_request(api_key: int, version: int, /, **values: Any) -> bytes:
    """The request body bytes (no header) of `build_request`."""
    return encode(build_request(api_key, version, **values))


def group_by_topic(
    rows: Iterable[tuple[Any, Any]], name_field: str = "name", partitions_field: str = "partitions"
) -> list[dict[str, Any]]:
    """(topic-partition, row) pairs as the topics -> partitions nesting per-partition requests use; a row is
    a partition's fields, or its bare index where the request lists only indexes."""
    topics: dict[str, list[Any]] = {}
    for (topic, _), row in rows:
        topics.setdefault(topic, []).append(row)
    return [{name_field: topic, partitions_field: partitions} for topic, partitions in topics.items()]


def indexes_by_topic(
    partitions: Iterable[tuple[str, int]], name_field: str = "name", indexes_field: str = "partition_indexes"
) -> list[dict[str, Any]]:
    """Topic-partitions as the topics -> partition indexes nesting of requests that only name partitions."""
    return group_by_topic(((tp, tp[1]) for tp in partitions), name_field, indexes_field)


def pick_version(api_key: int, client: VersionRange, broker_min: int, broker_max: int) -> int | None:
    """The highest version in both ranges, or None when they do not overlap."""
    high = min(client.max, broker_max)
    return high if high >= max(client.min, broker_min) else None


def negotiate(
    advertised: Mapping[int, tuple[int, int]], client: Mapping[int, VersionRange] = CLIENT_VERSIONS
) -> dict[int, int]:
    """API key -> the version to use, for every API both sides speak, from the broker's (min, max) table."""
    chosen = {}
    for api_key, (low, high) in advertised.items():
        ours = client.get(api_key)
        if ours is None:
            continue
        version = pick_version(api_key, ours, low, high)
        if version is not None:
            chosen[api_key] = version
    return chosen


def require_version(versions: Mapping[int, int], api_key: int, broker: str) -> int:
    """The negotiated version of `api_key`, or UnsupportedVersionError saying what is missing."""
    version = versions.get(api_key)
    if version is None:
        name = ApiKey(api_key).name if api_key in ApiKey._value2member_map_ else str(api_key)
        ours = CLIENT_VERSIONS.get(api_key)
        raise UnsupportedVersionError(
            f"broker {broker} does not support {name} in versions {ours} this client speaks "
            "(upgrade the broker, or use a client matching its version)"
        )
    return version
