"""Client configuration: Kafka names and Python keywords, defaults, and errors that name the bad key."""

from __future__ import annotations

import pytest

from backbone.client.config import (
    ADMIN_OPTIONS,
    CONSUMER_OPTIONS,
    PRODUCER_OPTIONS,
    parse_bootstrap,
    resolve,
)
from backbone.wire.errors import ConfigError

pytestmark = pytest.mark.unit


def producer(config: dict | None = None, **kwargs: object) -> dict:
    return resolve(PRODUCER_OPTIONS, "producer", config, kwargs)


def test_defaults_follow_the_java_client() -> None:
    cfg = producer()
    assert cfg["batch.size"] == 16_384
    assert cfg["linger.ms"] == 5
    assert cfg["acks"] == -1
    assert cfg["enable.idempotence"] is True
    assert cfg["max.in.flight.requests.per.connection"] == 5
    assert cfg["buffer.memory"] == 33_554_432
    assert cfg["client.id"].startswith("backbone-producer-")


def test_dict_names_and_keyword_names_are_the_same_property() -> None:
    assert producer({"batch.size": 1000})["batch.size"] == 1000
    assert producer(batch_size=1000)["batch.size"] == 1000
    assert producer({"linger.ms": "7"}, batch_size="2048")["linger.ms"] == 7  # strings from properties files


def test_a_property_given_twice_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"'batch.size' is given twice"):
        producer({"batch.size": 1}, batch_size=2)


def test_unknown_names_are_refused_with_a_suggestion() -> None:
    with pytest.raises(
        ConfigError, match=r"unknown producer property 'batch.sise'; did you mean 'batch.size'"
    ):
        producer({"batch.sise": 10})
    with pytest.raises(ConfigError, match=r"unknown consumer property 'acks'"):
        resolve(CONSUMER_OPTIONS, "consumer", {"acks": 1}, {})


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"batch.size": -1}, "'batch.size' must be at least 0, got -1"),
        ({"batch.size": "lots"}, "'batch.size': invalid literal"),
        ({"batch.size": 1.5}, "'batch.size': expected an integer, got float"),
        ({"acks": 2}, "'acks' must be all, -1, 0 or 1, got 2"),
        (
            {"compression.type": "brotli"},
            "'compression.type' must be one of none, gzip, snappy, lz4, zstd, got 'brotli'",
        ),
        ({"enable.idempotence": "maybe"}, "'enable.idempotence': expected true or false"),
        ({"key.serializer": "str"}, "'key.serializer': expected a callable"),
        ({"bootstrap.servers": "host:notaport"}, "'bootstrap.servers': 'host:notaport' has an invalid port"),
        (
            {"security.protocol": "TLS"},
            "'security.protocol' must be one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL",
        ),
    ],
)
def test_bad_values_name_the_property(config: dict, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        producer(config)
    assert message in str(caught.value)


def test_acks_accepts_all_and_numbers_as_strings() -> None:
    assert producer(acks="all")["acks"] == -1
    assert producer(acks="1", enable_idempotence=False)["acks"] == 1
    assert producer(acks=0, enable_idempotence=False)["acks"] == 0


def test_idempotence_is_quietly_off_when_other_settings_rule_it_out() -> None:
    assert producer(acks=1)["enable.idempotence"] is False
    assert producer(retries=0)["enable.idempotence"] is False
    assert producer(max_in_flight_requests_per_connection=6)["enable.idempotence"] is False


def test_explicit_idempotence_with_conflicting_settings_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"'enable.idempotence' is true but acks must be all"):
        producer(acks=1, enable_idempotence=True)


def test_delivery_timeout_must_cover_linger_and_request_timeout() -> None:
    with pytest.raises(ConfigError, match=r"'delivery.timeout.ms' \(1000\) must be at least"):
        producer(delivery_timeout_ms=1000)


def test_consumer_and_admin_options() -> None:
    cfg = resolve(CONSUMER_OPTIONS, "consumer", {"auto.offset.reset": "earliest"}, {"max_poll_records": 10})
    assert cfg["auto.offset.reset"] == "earliest"
    assert cfg["max.poll.records"] == 10
    with pytest.raises(ConfigError, match=r"'auto.offset.reset' must be one of earliest, latest, none"):
        resolve(CONSUMER_OPTIONS, "consumer", {"auto.offset.reset": "smallest"}, {})
    with pytest.raises(ConfigError, match=r"'fetch.max.bytes' must not be below 'fetch.min.bytes'"):
        resolve(CONSUMER_OPTIONS, "consumer", {"fetch.min.bytes": 10, "fetch.max.bytes": 5}, {})
    assert resolve(ADMIN_OPTIONS, "admin", None, {})["default.api.timeout.ms"] == 60_000


def test_bootstrap_servers_take_lists_and_comma_separated_strings() -> None:
    cfg = producer(bootstrap_servers="a:1, b:2")
    assert cfg["bootstrap.servers"] == ["a:1", "b:2"]
    assert producer(bootstrap_servers=["c:3"])["bootstrap.servers"] == ["c:3"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [("host:9093", ("host", 9093)), ("host", ("host", 9092)), ("[::1]:9094", ("::1", 9094))],
)
def test_parse_bootstrap(text: str, expected: tuple[str, int]) -> None:
    assert parse_bootstrap(text) == expected


@pytest.mark.parametrize("text", ["::1:9092", ":9092", "host:0", "host:70000"])
def test_parse_bootstrap_refuses_bad_addresses(text: str) -> None:
    with pytest.raises(ValueError):
        parse_bootstrap(text)
