"""Per-log configuration, named after Kafka's properties.

Every field has a topic-level name (`retention.ms`) and a broker-level default name (`log.retention.ms`);
`LogConfig.from_properties` reads both, the topic-level name winning, so one call can take a whole broker
properties file, a topic's overrides, or both merged. A per-partition override is simply a Log opened with a
different LogConfig (`LogConfig.from_properties(topic_props, base=broker_config)`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from backbone.protocol.errors import InvalidConfigError

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"
_HOUR_MS = 3_600_000
_MINUTE_MS = 60_000
_CLEANUP_POLICIES = ("delete", "compact", "compact,delete")


@dataclass(frozen=True, slots=True)
class _Property:
    """How one field is spelled, bounded and parsed."""

    field: str
    topic_name: str
    # Broker-level names in precedence order, each with the factor that turns its unit into the field's.
    broker_names: tuple[tuple[str, int], ...]
    minimum: int | None = None
    maximum: int | None = None
    choices: tuple[str, ...] | None = None
    # int, or float for the one ratio (min.cleanable.dirty.ratio).
    kind: type = int


_PROPERTIES: tuple[_Property, ...] = (
    _Property("segment_bytes", "segment.bytes", (("log.segment.bytes", 1),), 14, INT_MAX),
    _Property("segment_ms", "segment.ms", (("log.roll.ms", 1), ("log.roll.hours", _HOUR_MS)), 1, LONG_MAX),
    _Property("segment_index_bytes", "segment.index.bytes", (("log.index.size.max.bytes", 1),), 12, INT_MAX),
    _Property("index_interval_bytes", "index.interval.bytes", (("log.index.interval.bytes", 1),), 0, INT_MAX),
    _Property(
        "retention_ms",
        "retention.ms",
        (("log.retention.ms", 1), ("log.retention.minutes", _MINUTE_MS), ("log.retention.hours", _HOUR_MS)),
        -1,
        LONG_MAX,
    ),
    _Property("retention_bytes", "retention.bytes", (("log.retention.bytes", 1),), -1, LONG_MAX),
    _Property("flush_messages", "flush.messages", (("log.flush.interval.messages", 1),), 1, LONG_MAX),
    _Property("flush_ms", "flush.ms", (("log.flush.interval.ms", 1),), 0, LONG_MAX),
    _Property("max_message_bytes", "max.message.bytes", (("message.max.bytes", 1),), 0, INT_MAX),
    _Property(
        "message_timestamp_type",
        "message.timestamp.type",
        (("log.message.timestamp.type", 1),),
        choices=(CREATE_TIME, LOG_APPEND_TIME),
    ),
    _Property("cleanup_policy", "cleanup.policy", (("log.cleanup.policy", 1),), choices=_CLEANUP_POLICIES),
    # Compaction (backbone.log.cleaner).
    _Property(
        "delete_retention_ms", "delete.retention.ms", (("log.cleaner.delete.retention.ms", 1),), 0, LONG_MAX
    ),
    _Property(
        "min_compaction_lag_ms",
        "min.compaction.lag.ms",
        (("log.cleaner.min.compaction.lag.ms", 1),),
        0,
        LONG_MAX,
    ),
    _Property(
        "max_compaction_lag_ms",
        "max.compaction.lag.ms",
        (("log.cleaner.max.compaction.lag.ms", 1),),
        1,
        LONG_MAX,
    ),
    _Property(
        "min_cleanable_dirty_ratio",
        "min.cleanable.dirty.ratio",
        (("log.cleaner.min.cleanable.ratio", 1),),
        0,
        1,
        kind=float,
    ),
)


@dataclass(frozen=True, slots=True)
class LogConfig:
    """The settings of one partition's log; defaults are Kafka's.

    `flush_messages` and `flush_ms` default to "never" (Long.MAX_VALUE), as in Kafka: durability comes from
    replication and the OS writes dirty pages back on its own. `retention_ms`/`retention_bytes` of -1 mean
    unlimited. Time and size retention apply only when `cleanup_policy` contains "delete"; when it contains
    "compact" the log cleaner (backbone.log.cleaner) keeps only the latest record of each key, following
    the compaction settings at the end (tombstones live delete.retention.ms after the clean that first saw
    them; records younger than min.compaction.lag.ms are left alone; a log whose oldest dirty segment is
    older than max.compaction.lag.ms is cleaned whatever its dirty ratio).
    """

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 168 * _HOUR_MS
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_ms: int = 168 * _HOUR_MS
    retention_bytes: int = -1
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    max_message_bytes: int = 1_048_588
    message_timestamp_type: str = CREATE_TIME
    cleanup_policy: str = "delete"
    delete_retention_ms: int = 24 * _HOUR_MS
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5

    def __post_init__(self) -> None:
        # Constructed directly (not from properties) the values still get the same checks.
        for prop in _PROPERTIES:
            _check(prop, prop.topic_name, getattr(self, prop.field))

    @classmethod
    def from_properties(cls, props: Mapping[str, Any], base: LogConfig | None = None) -> LogConfig:
        """Build a config from Kafka properties (values as str or int); unknown keys are ignored.

        Topic-level names win over broker-level ones; fields named by neither keep `base`'s value (or the
        default). Raises InvalidConfigError naming the offending key.
        """
        changes: dict[str, Any] = {}
        for prop in _PROPERTIES:
            found = _lookup(prop, props)
            if found is not None:
                key, raw, factor = found
                changes[prop.field] = _parse(prop, key, raw, factor)
        return dataclasses.replace(base or cls(), **changes)

    def to_properties(self) -> dict[str, str]:
        """The topic-level property names and values, as DescribeConfigs reports them."""
        return {prop.topic_name: str(getattr(self, prop.field)) for prop in _PROPERTIES}

    @property
    def uses_log_append_time(self) -> bool:
        return self.message_timestamp_type == LOG_APPEND_TIME

    @property
    def deletes(self) -> bool:
        """Whether time and size retention apply (cleanup.policy contains "delete")."""
        return "delete" in self.cleanup_policy.split(",")

    @property
    def compacts(self) -> bool:
        """Whether the log cleaner compacts this log (cleanup.policy contains "compact")."""
        return "compact" in self.cleanup_policy.split(",")

    @property
    def max_offset_index_entries(self) -> int:
        return self.segment_index_bytes // 8

    @property
    def max_time_index_entries(self) -> int:
        return self.segment_index_bytes // 12


def topic_property_names() -> frozenset[str]:
    """Every topic-level name this module understands (the broker can reject others)."""
    return frozenset(prop.topic_name for prop in _PROPERTIES)


def broker_property_names() -> frozenset[str]:
    """Every broker-level name this module reads (`log.retention.hours`, `message.max.bytes`, ...)."""
    return frozenset(name for prop in _PROPERTIES for name, _ in prop.broker_names)


def _lookup(prop: _Property, props: Mapping[str, Any]) -> tuple[str, Any, int] | None:
    if prop.topic_name in props:
        return prop.topic_name, props[prop.topic_name], 1
    for name, factor in prop.broker_names:
        if name in props:
            return name, props[name], factor
    return None


def _parse(prop: _Property, key: str, raw: Any, factor: int) -> Any:
    if prop.choices is not None:
        value: Any = _parse_choice(prop, key, raw)
    elif prop.kind is float:
        value = _parse_float(key, raw)
    else:
        value = _parse_int(key, raw) * factor
    _check(prop, key, value)
    return value


def _parse_choice(prop: _Property, key: str, raw: Any) -> str:
    if not isinstance(raw, str):
        raise InvalidConfigError(f"{key}={raw!r}: must be one of {', '.join(prop.choices or ())}")
    # Kafka accepts "delete,compact" in either order and with spaces.
    parts = sorted(part.strip() for part in raw.split(",") if part.strip())
    return ",".join(parts) if prop.field == "cleanup_policy" else raw.strip()


def _parse_int(key: str, raw: Any) -> int:
    if isinstance(raw, bool):
        raise InvalidConfigError(f"{key}={raw!r}: must be an integer, not a boolean")
    if isinstance(raw, int):
        return raw
    if isinstance(raw, str):
        try:
            return int(raw.strip())
        except ValueError:
            raise InvalidConfigError(f"{key}={raw!r}: must be an integer") from None
    raise InvalidConfigError(f"{key}={raw!r}: must be an integer, got {type(raw).__name__}")


def _parse_float(key: str, raw: Any) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise InvalidConfigError(f"{key}={raw!r}: must be a number")
    try:
        value = float(raw.strip() if isinstance(raw, str) else raw)
    except ValueError:
        raise InvalidConfigError(f"{key}={raw!r}: must be a number") from None
    if value != value:  # NaN passes every bound check
        raise InvalidConfigError(f"{key}={raw!r}: must be a number")
    return value


def _check(prop: _Property, key: str, value: Any) -> None:
    if prop.choices is not None:
        if value not in prop.choices:
            raise InvalidConfigError(f"{key}={value!r}: must be one of {', '.join(prop.choices)}")
        return
    number_types = (int, float) if prop.kind is float else (int,)
    if isinstance(value, bool) or not isinstance(value, number_types) or value != value:
        kind = "a number" if prop.kind is float else "an integer"
        raise InvalidConfigError(f"{key}={value!r}: must be {kind}")
    if prop.minimum is not None and value < prop.minimum:
        raise InvalidConfigError(f"{key}={value}: must be at least {prop.minimum}")
    if prop.maximum is not None and value > prop.maximum:
        raise InvalidConfigError(f"{key}={value}: must be at most {prop.maximum}")
