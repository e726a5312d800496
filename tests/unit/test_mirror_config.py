"""Mirror settings and the provenance header: which topics a mirror copies, what it names them, and how a
record's hops are read."""

from __future__ import annotations

import re

import pytest

from backbone.mirror import provenance
from backbone.mirror.config import MirrorConfig
from backbone.mirror.mirror import matches
from backbone.properties import ConfigError

pytestmark = pytest.mark.unit

BASE = {"source.bootstrap.servers": "a:1", "target.bootstrap.servers": "b:2", "source.alias": "dc1"}


def config(**extra: object) -> MirrorConfig:
    return MirrorConfig.from_properties({**BASE, **{k.replace("_", "."): v for k, v in extra.items()}})


def test_defaults_and_passed_through_families() -> None:
    made = MirrorConfig.from_properties(
        {
            **BASE,
            "topics": "pageviews, clicks",
            "source.consumer.fetch.max.bytes": "1048576",
            "target.producer.compression.type": "lz4",
            "target.topic.config.retention.ms": "86400000",
        }
    )
    assert made.topics == ("pageviews", "clicks")
    assert made.group_id == "mirror-dc1-aggregate" and made.target_alias == "aggregate"
    assert made.consumer == {"fetch.max.bytes": "1048576"}
    assert made.producer == {"compression.type": "lz4"}
    assert made.topic_configs == {"retention.ms": "86400000"}


def test_topic_selection_by_list_or_regex_with_exclusions() -> None:
    listed = config(topics="pageviews,a.b")
    assert matches(listed, "pageviews") and matches(listed, "a.b")
    assert not matches(listed, "axb") and not matches(listed, "pageviews2")
    everything = config(topics_regex=".*")
    assert matches(everything, "clicks") and not matches(everything, "__consumer_offsets")
    assert not matches(everything, "_schemas")  # the schema registry's topic stays in its one cluster
    some = config(topics_regex="logs-.*", topics_exclude="logs-debug|__.*")
    assert matches(some, "logs-web") and not matches(some, "logs-debug") and not matches(some, "metrics")
    assert re.compile(some.subscription_pattern())


def test_target_names_are_the_same_or_prefixed() -> None:
    assert config(topics="t").target_topic("pageviews") == "pageviews"
    assert config(topics="t", topic_naming="prefix").target_topic("pageviews") == "dc1.pageviews"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({}, "exactly one of topics"),
        ({"topics": "a", "topics.regex": "b"}, "exactly one of topics"),
        ({"topics.regex": "("}, "not a valid regular expression"),
        ({"topics": "a", "target.alias": "dc1"}, "must differ"),
        ({"topics": "a", "source.alias": "dc 1"}, "letters, digits"),
        ({"topics": "a", "topic.naming": "rename"}, "must be one of"),
        ({"topics": "a", "bogus": "1"}, "unknown configuration key"),
    ],
)
def test_bad_settings_are_named(extra: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        MirrorConfig.from_properties({**BASE, **extra})


def test_a_missing_required_setting_is_named() -> None:
    with pytest.raises(ConfigError, match=r"source\.alias is required"):
        MirrorConfig.from_properties({"source.bootstrap.servers": "a", "target.bootstrap.servers": "b"})


def test_provenance_hops_round_trip_and_loop_detection() -> None:
    first = provenance.Provenance("dc1", 3, 1842)
    assert provenance.Provenance.decode(first.encode()) == first
    headers = [("trace", b"x"), (provenance.HEADER, first.encode()), (provenance.HEADER, b"aggregate:0:7")]
    assert provenance.origin(headers) == first
    assert provenance.has_been_in(headers, "dc1") and provenance.has_been_in(headers, "aggregate")
    assert not provenance.has_been_in(headers, "dc2")
    assert provenance.hops([(provenance.HEADER, b"garbage"), (provenance.HEADER, None)]) == []
    assert provenance.origin([]) is None
