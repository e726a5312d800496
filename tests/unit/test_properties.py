"""Configuration files and values: Kafka's names, types, and errors that name the key."""

from __future__ import annotations

import pytest

from backbone.properties import (
    ConfigError,
    Property,
    parse_overrides,
    parse_properties,
    read_properties_file,
    resolve,
)

pytestmark = pytest.mark.unit

SPECS = {
    p.name: p
    for p in (
        Property("broker.id", int, required=True, minimum=0),
        Property("num.partitions", int, 1, minimum=1),
        Property("auto.create.topics.enable", bool, True),
        Property("log.dirs", list, None),
        Property("compression.type", str, "producer", choices=("producer", "gzip", "lz4")),
    )
}


def test_properties_text_with_comments_and_continuations() -> None:
    text = "# comment\n! also\nbroker.id=3\nlog.dirs = /a,\\\n /b\nnum.partitions: 4\n"
    assert parse_properties(text) == {"broker.id": "3", "log.dirs": "/a,/b", "num.partitions": "4"}


def test_resolve_types_and_defaults() -> None:
    values = resolve(SPECS, {"broker.id": "3", "log.dirs": "/a, /b", "auto.create.topics.enable": "false"})
    assert values == {
        "broker.id": 3,
        "log.dirs": ["/a", "/b"],
        "auto.create.topics.enable": False,
        "num.partitions": 1,
        "compression.type": "producer",
    }


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"broker.id": "x"}, "broker.id='x' is not a valid int"),
        ({"broker.id": "-1"}, "broker.id=-1 is below the minimum 0"),
        (
            {"broker.id": "1", "num.partition": "3"},
            "unknown configuration key 'num.partition'; did you mean num.partitions",
        ),
        ({"broker.id": "1", "auto.create.topics.enable": "maybe"}, "expected true or false"),
        ({"broker.id": "1", "compression.type": "zip"}, "must be one of: producer, gzip, lz4"),
        ({}, "broker.id is required"),
    ],
)
def test_bad_values_name_the_key(raw: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("(", r"\(")):
        resolve(SPECS, raw)


def test_toml_files_flatten_to_kafka_names(tmp_path) -> None:
    path = tmp_path / "broker.toml"
    path.write_text('broker.id = 1\n[log]\ndirs = ["/a"]\n')
    assert read_properties_file(path) == {"broker.id": 1, "log.dirs": ["/a"]}
    assert resolve(SPECS, read_properties_file(path))["log.dirs"] == ["/a"]


def test_missing_file_and_bad_lines_are_clear(tmp_path) -> None:
    with pytest.raises(ConfigError, match="cannot read configuration file"):
        read_properties_file(tmp_path / "missing.properties")
    with pytest.raises(ConfigError, match="<properties>:2: expected key=value"):
        parse_properties("a=1\njunk\n")


def test_overrides() -> None:
    assert parse_overrides(["a=1", "b.c = x=y"]) == {"a": "1", "b.c": "x=y"}
    with pytest.raises(ConfigError, match="must look like key=value"):
        parse_overrides(["novalue"])
