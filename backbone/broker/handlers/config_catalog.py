"""The topic-level and broker-level config keys the admin APIs accept and describe, as Kafka names them.

A topic accepts three kinds of keys:
- the storage engine's (`backbone.log.config.topic_property_names()`: retention, segments, flushing...),
  checked by `LogConfig` and applied to the topic's open logs through the config change notifications;
- broker settings a topic may override: `min.insync.replicas` (enforced on produce) and
  `unclean.leader.election.enable` (stored only: the controller follows the broker's own setting);
- the rest of Kafka's topic keys, which tools such as Kafka Streams and Connect set when they create
  topics. They are checked and stored as Kafka does, so those tools work, but this broker does not act
  on them yet; their documentation says so. Tiered-storage keys are refused: accepting them would
  promise remote storage that does not exist.

A topic key's default is the value of its broker-level synonym (`retention.ms` <- `log.retention.ms`):
DescribeConfigs reports it as DYNAMIC_BROKER_CONFIG or DYNAMIC_DEFAULT_BROKER_CONFIG when a dynamic broker
config sets it (broker_configs.py), else STATIC_BROKER_CONFIG when the broker's file sets it and
DEFAULT_CONFIG otherwise. The broker keeps only resolved values, so "set in the file" is read as "differs
from the built-in default".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from backbone.broker.config import BROKER_PROPERTIES, BrokerConfig
from backbone.log.config import LogConfig, topic_property_names
from backbone.properties import ConfigError, Property
from backbone.protocol.errors import InvalidConfigError

__all__ = [
    "BROKER_SYNONYMS",
    "ConfigEntry",
    "ConfigSource",
    "ConfigType",
    "check_value",
    "describe_topic",
    "dynamic_synonyms",
    "inherited_value",
    "log_default_keys",
    "render",
    "static_broker_value",
    "stored_only_broker_keys",
    "topic_doc",
    "topic_key_type",
    "type_of",
    "validate_topic_overrides",
]

LONG_MAX = 2**63 - 1


class ConfigSource(IntEnum):
    """DescribeConfigs' config_source values."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class ConfigType(IntEnum):
    """DescribeConfigs' config_type values (v3+)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str | None
    source: ConfigSource
    read_only: bool
    config_type: ConfigType
    documentation: str
    # (name, value, source), most specific first, as Kafka lists synonyms.
    synonyms: tuple[tuple[str, str | None, ConfigSource], ...] = field(default_factory=tuple)

    def wire_fields(self) -> dict[str, Any]:
        """The fields CreateTopics' and DescribeConfigs' config entries share (no secrets here)."""
        return {
            "name": self.name,
            "value": self.value,
            "read_only": self.read_only,
            "config_source": int(self.source),
            "is_sensitive": False,
            "config_type": int(self.config_type),
        }


# -- the storage engine's keys: type, broker-level synonym, documentation -------------------------------

_LOG_KEYS: dict[str, tuple[ConfigType, str, str]] = {
    "segment.bytes": (ConfigType.INT, "log.segment.bytes", "size of one log segment file"),
    "segment.ms": (ConfigType.LONG, "log.roll.ms", "time after which a segment is rolled even if not full"),
    "segment.index.bytes": (ConfigType.INT, "log.index.size.max.bytes", "maximum size of a segment's index"),
    "index.interval.bytes": (
        ConfigType.INT,
        "log.index.interval.bytes",
        "bytes between offset index entries",
    ),
    "retention.ms": (ConfigType.LONG, "log.retention.ms", "how long a segment is kept (-1: forever)"),
    "retention.bytes": (ConfigType.LONG, "log.retention.bytes", "partition size above which old segments go"),
    "flush.messages": (ConfigType.LONG, "log.flush.interval.messages", "messages between forced fsyncs"),
    "flush.ms": (ConfigType.LONG, "log.flush.interval.ms", "time between forced fsyncs"),
    "max.message.bytes": (ConfigType.INT, "message.max.bytes", "largest record batch the log accepts"),
    "message.timestamp.type": (
        ConfigType.STRING,
        "log.message.timestamp.type",
        "CreateTime (the producer's) or LogAppendTime (the broker's)",
    ),
    "cleanup.policy": (ConfigType.LIST, "log.cleanup.policy", "delete and/or compact"),
    "delete.retention.ms": (
        ConfigType.LONG,
        "log.cleaner.delete.retention.ms",
        "how long a tombstone outlives the clean that first saw it",
    ),
    "min.compaction.lag.ms": (
        ConfigType.LONG,
        "log.cleaner.min.compaction.lag.ms",
        "records younger than this are not compacted",
    ),
    "max.compaction.lag.ms": (
        ConfigType.LONG,
        "log.cleaner.max.compaction.lag.ms",
        "a log with dirty records older than this is compacted whatever its dirty ratio",
    ),
    "min.cleanable.dirty.ratio": (
        ConfigType.DOUBLE,
        "log.cleaner.min.cleanable.ratio",
        "share of dirty bytes above which a log is compacted",
    ),
}

# -- broker settings a topic overrides ------------------------------------------------------------------

_BROKER_OVERRIDES = ("min.insync.replicas", "unclean.leader.election.enable")
# The controller elects leaders by the broker's own setting only, so this override is stored, not used.
_OVERRIDE_NOT_USED = frozenset({"unclean.leader.election.enable"})

# -- Kafka's other topic keys: checked and stored, not acted on yet --------------------------------------

_NOT_YET = " (stored for Kafka tools; this broker does not act on it yet)"
_P = Property
_STORED_ONLY: dict[str, tuple[Property, str]] = {
    p.name: (p, broker_name)
    for p, broker_name in (
        (
            _P(
                "compression.type",
                str,
                "producer",
                "compression of stored batches",
                choices=("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
            ),
            "compression.type",
        ),
        (
            _P("file.delete.delay.ms", int, 60000, "delay before deleting a file", 0, LONG_MAX),
            "log.segment.delete.delay.ms",
        ),
        (_P("preallocate", bool, False, "preallocate segment files"), "log.preallocate"),
        (
            _P("segment.jitter.ms", int, 0, "random jitter of segment rolls", 0, LONG_MAX),
            "log.roll.jitter.ms",
        ),
        (
            _P("message.timestamp.before.max.ms", int, LONG_MAX, "largest age of a timestamp", 0, LONG_MAX),
            "log.message.timestamp.before.max.ms",
        ),
        (
            _P("message.timestamp.after.max.ms", int, LONG_MAX, "largest future timestamp", 0, LONG_MAX),
            "log.message.timestamp.after.max.ms",
        ),
        (_P("leader.replication.throttled.replicas", list, [], "throttled leader replicas"), ""),
        (_P("follower.replication.throttled.replicas", list, [], "throttled follower replicas"), ""),
    )
}

_PYTHON_TYPES: dict[type, ConfigType] = {
    bool: ConfigType.BOOLEAN,
    int: ConfigType.INT,
    float: ConfigType.DOUBLE,
    list: ConfigType.LIST,
    str: ConfigType.STRING,
}


# Each topic key's broker-level synonym, whose value is its default (`retention.ms` <- `log.retention.ms`).
BROKER_SYNONYMS: dict[str, str] = (
    {name: spec[1] for name, spec in _LOG_KEYS.items()}
    | {name: name for name in _BROKER_OVERRIDES}
    | {name: spec[1] for name, spec in _STORED_ONLY.items()}
)
_TOPIC_OF_LOG_DEFAULT = {spec[1]: name for name, spec in _LOG_KEYS.items()}


def stored_only_broker_keys() -> dict[str, Property]:
    """The broker-level synonyms of the topic keys stored without being acted on, typed by their topic key."""
    return {
        broker_name: dataclasses.replace(prop, name=broker_name)
        for prop, broker_name in _STORED_ONLY.values()
        if broker_name
    }


def log_default_keys() -> frozenset[str]:
    """The broker-level names of the storage engine's topic keys (`log.retention.ms`, `message.max.bytes`)."""
    return frozenset(_TOPIC_OF_LOG_DEFAULT)


def _known_topic_keys() -> frozenset[str]:
    return topic_property_names() | frozenset(_BROKER_OVERRIDES) | frozenset(_STORED_ONLY)


def topic_key_type(name: str) -> ConfigType:
    """The type of a topic key (APPEND and SUBTRACT apply to LIST keys only); UNKNOWN if not a key."""
    if name in _LOG_KEYS:
        return _LOG_KEYS[name][0]
    prop = BROKER_PROPERTIES.get(name) if name in _BROKER_OVERRIDES else None
    if prop is None and name in _STORED_ONLY:
        prop = _STORED_ONLY[name][0]
    return type_of(prop) if prop is not None else ConfigType.UNKNOWN


def type_of(prop: Property) -> ConfigType:
    # Kafka's durations in milliseconds are LONGs; other integers are INTs.
    if prop.type is int and prop.name.endswith(".ms"):
        return ConfigType.LONG
    return _PYTHON_TYPES.get(prop.type, ConfigType.STRING)


def render(value: Any) -> str | None:
    """A typed value as Kafka's config strings write it."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(str(item) for item in value)
    return str(value)


# -- validation ------------------------------------------------------------------------------------------


def validate_topic_overrides(overrides: Mapping[str, str], config: BrokerConfig) -> None:
    """Check a topic's whole override set; InvalidConfigError names the first bad key."""
    known = _known_topic_keys()
    for name in sorted(overrides):
        if name not in known:
            raise InvalidConfigError(f"Unknown topic config name: {name}")
    log_keys = topic_property_names()
    LogConfig.from_properties({k: v for k, v in overrides.items() if k in log_keys}, base=config.log)
    for name, value in sorted(overrides.items()):
        prop = BROKER_PROPERTIES[name] if name in _BROKER_OVERRIDES else _STORED_ONLY.get(name, (None,))[0]
        if prop is not None:
            check_value(prop, value)


def check_value(prop: Property, value: str) -> None:
    """A value for `prop`, checked as Kafka checks it; InvalidConfigError names the key."""
    if prop.type is bool and value.strip().lower() not in ("true", "false"):
        # Kafka's booleans are exactly true or false (any case); yes/no/1/0 would confuse Kafka tools.
        raise InvalidConfigError(f"{prop.name}={value!r}: must be true or false")
    try:
        prop.parse(value)
    except ConfigError as exc:
        raise InvalidConfigError(str(exc)) from None
    if prop.name.endswith("throttled.replicas") and not _valid_throttle_list(value):
        raise InvalidConfigError(
            f"{prop.name}={value!r}: must be * or a list of partition:broker pairs, e.g. 0:101,1:102"
        )


def _valid_throttle_list(value: str) -> bool:
    items = [item.strip() for item in value.split(",") if item.strip()]
    if items == ["*"]:
        return True
    for item in items:
        partition, colon, broker_id = item.partition(":")
        if not (colon and partition.isdigit() and broker_id.isdigit()):
            return False
    return True


# -- describing ------------------------------------------------------------------------------------------

Synonym = tuple[str, str | None, ConfigSource]


def dynamic_synonyms(name: str, per_broker: Mapping[str, str], defaults: Mapping[str, str]) -> list[Synonym]:
    """A broker key's dynamic values, most specific first: this broker's, then the cluster-wide default."""
    found: list[Synonym] = []
    if name in per_broker:
        found.append((name, per_broker[name], ConfigSource.DYNAMIC_BROKER_CONFIG))
    if name in defaults:
        found.append((name, defaults[name], ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG))
    return found


def _source(value: Any, default: Any) -> ConfigSource:
    return ConfigSource.STATIC_BROKER_CONFIG if value != default else ConfigSource.DEFAULT_CONFIG


def static_broker_value(config: BrokerConfig, name: str) -> tuple[str | None, ConfigSource] | None:
    """A broker key's value from the properties file (or built in) and its source; None if not a key
    the file may set."""
    if name in BROKER_PROPERTIES:
        value = config.values[name]
        return render(value), _source(value, BROKER_PROPERTIES[name].default)
    topic_name = _TOPIC_OF_LOG_DEFAULT.get(name)
    if topic_name is not None:
        value = config.static_log.to_properties()[topic_name]
        return value, _source(value, LogConfig().to_properties()[topic_name])
    return None


def _inherited(config: BrokerConfig, name: str) -> tuple[str | None, list[Synonym]]:
    """The value a topic without an override of `name` takes, and the broker-level synonyms it comes from,
    most specific first (dynamic ones from this broker's applied dynamic configs)."""
    if name in _STORED_ONLY:
        prop, broker_name = _STORED_ONLY[name]
        static: Synonym = (broker_name, render(prop.default), ConfigSource.DEFAULT_CONFIG)
    else:
        broker_name = BROKER_SYNONYMS[name]
        value, source = static_broker_value(config, broker_name) or (None, ConfigSource.DEFAULT_CONFIG)
        static = (broker_name, value, source)
    if not broker_name:
        return static[1], []
    synonyms = [*dynamic_synonyms(broker_name, config.dynamic_broker, config.dynamic_defaults), static]
    return synonyms[0][1], synonyms


def inherited_value(config: BrokerConfig, name: str) -> str | None:
    """The value of topic key `name` for a topic without an override of it."""
    return _inherited(config, name)[0]


def topic_doc(name: str) -> str:
    if name in _LOG_KEYS:
        return _LOG_KEYS[name][2]
    if name in _BROKER_OVERRIDES:
        doc = BROKER_PROPERTIES[name].doc or f"the topic's {name}"
        return doc + _NOT_YET if name in _OVERRIDE_NOT_USED else doc
    if name in _STORED_ONLY:
        return _STORED_ONLY[name][0].doc + _NOT_YET
    return ""


def describe_topic(config: BrokerConfig, overrides: Mapping[str, str]) -> list[ConfigEntry]:
    """Every topic key with the topic's value, source and synonyms."""
    entries = []
    for name in sorted(_known_topic_keys()):
        default, synonyms = _inherited(config, name)
        if name in overrides:
            synonyms.insert(0, (name, overrides[name], ConfigSource.DYNAMIC_TOPIC_CONFIG))
        value = overrides.get(name, default)
        source = synonyms[0][2] if synonyms else ConfigSource.DEFAULT_CONFIG
        entries.append(
            ConfigEntry(name, value, source, False, topic_key_type(name), topic_doc(name), tuple(synonyms))
        )
    return entries
