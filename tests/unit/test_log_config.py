"""LogConfig: Kafka's property names, defaults, precedence and validation."""

from __future__ import annotations

import pytest

from backbone.log import LogConfig, broker_property_names, topic_property_names
from backbone.log.config import LONG_MAX
from backbone.protocol.errors import InvalidConfigError

pytestmark = pytest.mark.unit


def test_defaults_are_kafkas() -> None:
    config = LogConfig()
    assert config.segment_bytes == 1024**3
    assert config.segment_ms == 7 * 24 * 3600 * 1000
    assert config.index_interval_bytes == 4096
    assert config.retention_ms == 7 * 24 * 3600 * 1000
    assert config.retention_bytes == -1
    assert config.max_message_bytes == 1048588
    assert config.flush_messages == LONG_MAX and config.flush_ms == LONG_MAX
    assert config.message_timestamp_type == "CreateTime" and not config.uses_log_append_time
    assert config.deletes


def test_topic_and_broker_names_are_both_read() -> None:
    topic = LogConfig.from_properties({"segment.bytes": "1000", "retention.ms": 5})
    broker = LogConfig.from_properties({"log.segment.bytes": "2000", "log.retention.ms": "6"})
    assert (topic.segment_bytes, topic.retention_ms) == (1000, 5)
    assert (broker.segment_bytes, broker.retention_ms) == (2000, 6)


def test_topic_name_wins_over_broker_name() -> None:
    config = LogConfig.from_properties({"log.retention.ms": "1", "retention.ms": "2"})
    assert config.retention_ms == 2


def test_hours_and_minutes_are_converted_and_ms_wins() -> None:
    assert LogConfig.from_properties({"log.retention.hours": "2"}).retention_ms == 2 * 3600 * 1000
    assert LogConfig.from_properties({"log.retention.minutes": "3"}).retention_ms == 3 * 60 * 1000
    both = {"log.retention.hours": "2", "log.retention.minutes": "3", "log.retention.ms": "4"}
    assert LogConfig.from_properties(both).retention_ms == 4
    assert LogConfig.from_properties({"log.roll.hours": "1"}).segment_ms == 3600 * 1000


def test_message_max_bytes_is_the_broker_name_of_max_message_bytes() -> None:
    assert LogConfig.from_properties({"message.max.bytes": "500"}).max_message_bytes == 500


def test_base_config_supplies_unnamed_fields() -> None:
    broker = LogConfig.from_properties({"log.segment.bytes": "4096", "log.retention.bytes": "100"})
    topic = LogConfig.from_properties({"retention.bytes": "50"}, base=broker)
    assert topic.segment_bytes == 4096 and topic.retention_bytes == 50


def test_unknown_keys_are_ignored() -> None:
    assert LogConfig.from_properties({"broker.id": "1", "listeners": "PLAINTEXT://:9092"}) == LogConfig()


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("segment.bytes", "abc", "must be an integer"),
        ("segment.bytes", "10", "at least 14"),
        ("log.segment.bytes", str(2**31), "at most"),
        ("retention.ms", "-2", "at least -1"),
        ("flush.messages", "0", "at least 1"),
        ("index.interval.bytes", True, "boolean"),
        ("max.message.bytes", 1.5, "must be an integer"),
        ("message.timestamp.type", "WallClock", "must be one of"),
        ("cleanup.policy", "shred", "must be one of"),
    ],
)
def test_bad_values_raise_invalid_config_naming_the_key(key: str, value: object, fragment: str) -> None:
    with pytest.raises(InvalidConfigError) as raised:
        LogConfig.from_properties({key: value})
    assert key in str(raised.value) and fragment in str(raised.value)


def test_direct_construction_is_validated_too() -> None:
    with pytest.raises(InvalidConfigError, match=r"segment\.bytes"):
        LogConfig(segment_bytes=0)


def test_cleanup_policy_forms() -> None:
    assert LogConfig.from_properties({"cleanup.policy": "delete, compact"}).cleanup_policy == "compact,delete"
    compact = LogConfig.from_properties({"cleanup.policy": "compact"})
    assert not compact.deletes
    assert LogConfig.from_properties({"log.cleanup.policy": "compact,delete"}).deletes


def test_log_append_time_flag() -> None:
    config = LogConfig.from_properties({"log.message.timestamp.type": "LogAppendTime"})
    assert config.uses_log_append_time


def test_to_properties_round_trips() -> None:
    config = LogConfig(segment_bytes=5000, retention_ms=77, message_timestamp_type="LogAppendTime")
    properties = config.to_properties()
    assert set(properties) == topic_property_names()
    assert LogConfig.from_properties(properties) == config


def test_index_entry_limits_follow_segment_index_bytes() -> None:
    config = LogConfig(segment_index_bytes=120)
    assert config.max_offset_index_entries == 15 and config.max_time_index_entries == 10


def test_broker_property_names_cover_every_broker_spelling() -> None:
    names = broker_property_names()
    assert {"log.segment.bytes", "log.retention.hours", "log.roll.hours", "message.max.bytes"} <= names
    assert not names & topic_property_names()
    numeric = {
        name: "1000" for name in names if not any(x in name for x in ("timestamp", "cleanup", "ratio"))
    }
    assert LogConfig.from_properties(numeric).max_message_bytes == 1000
