"""Client configuration by Kafka's property names, with validation that names the bad key.

Every client takes its settings as a dict of Kafka property names (`{"batch.size": 65536}`, values may be
strings as read from a properties file), as Python keyword arguments (`batch_size=65536`), or both. Names
and defaults follow the Java client (Kafka 4.0 defaults, e.g. `linger.ms` 5); a few Python-only settings
(serializers, a partitioner function) follow kafka-python. Unknown names, values of the wrong type and
values out of range raise `ConfigError` naming the property, so a typo never silently falls back to a
default.
"""

from __future__ import annotations

import difflib
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from backbone.protocol.compression import codec_from_name
from backbone.protocol.errors import UnsupportedCompressionTypeError
from backbone.wire.errors import ConfigError

__all__ = [
    "ADMIN_OPTIONS",
    "CONSUMER_OPTIONS",
    "PRODUCER_OPTIONS",
    "Option",
    "parse_bootstrap",
    "resolve",
    "security_settings",
]

_client_ids = itertools.count(1)
Check = Callable[[Any], str | None]


@dataclass(frozen=True, slots=True)
class Option:
    """One property: its type (int, bool, str, list or callable), default and an extra check."""

    name: str
    kind: str
    default: Any
    check: Check | None = None


def _at_least(low: int) -> Check:
    return lambda value: None if value >= low else f"must be at least {low}, got {value}"


def _between(low: int, high: int) -> Check:
    return lambda value: None if low <= value <= high else f"must be between {low} and {high}, got {value}"


def _one_of(*choices: str) -> Check:
    return lambda value: None if value in choices else f"must be one of {', '.join(choices)}, got {value!r}"


def _check_codec(value: str) -> str | None:
    try:
        codec_from_name(value)
    except UnsupportedCompressionTypeError:
        return f"must be one of none, gzip, snappy, lz4, zstd, got {value!r}"
    return None


def _check_acks(value: int) -> str | None:
    return None if value in (-1, 0, 1) else f"must be all, -1, 0 or 1, got {value!r}"


_COMMON = (
    Option("bootstrap.servers", "list", ["localhost:9092"]),
    Option("client.id", "str", None),
    Option("request.timeout.ms", "int", 30_000, _at_least(1)),
    Option("retry.backoff.ms", "int", 100, _at_least(0)),
    Option("retry.backoff.max.ms", "int", 1_000, _at_least(0)),
    Option("reconnect.backoff.ms", "int", 50, _at_least(0)),
    Option("reconnect.backoff.max.ms", "int", 1_000, _at_least(0)),
    Option("socket.connection.setup.timeout.ms", "int", 10_000, _at_least(1)),
    Option("metadata.max.age.ms", "int", 300_000, _at_least(0)),
    # Security (security.py): Kafka's protocol names, librdkafka's SASL names, kafka-python's TLS names.
    Option(
        "security.protocol", "str", "PLAINTEXT", _one_of("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
    ),
    Option("sasl.mechanism", "str", "SCRAM-SHA-512", _one_of("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")),
    Option("sasl.username", "str", None),
    Option("sasl.password", "str", None),
    Option("ssl.cafile", "str", None),
    Option("ssl.certfile", "str", None),
    Option("ssl.keyfile", "str", None),
    Option("ssl.password", "str", None),
    Option("ssl.check.hostname", "bool", True),
)

PRODUCER_OPTIONS: dict[str, Option] = {
    option.name: option
    for option in (
        *_COMMON,
        Option("acks", "acks", -1, _check_acks),
        Option("batch.size", "int", 16_384, _at_least(0)),
        Option("linger.ms", "int", 5, _at_least(0)),
        Option("compression.type", "str", "none", _check_codec),
        Option("compression.gzip.level", "int", None, _between(1, 9)),
        Option("compression.lz4.level", "int", None, _between(0, 17)),
        Option("compression.zstd.level", "int", None, _between(-131072, 22)),
        Option("retries", "int", 2_147_483_647, _at_least(0)),
        Option("delivery.timeout.ms", "int", 120_000, _at_least(1)),
        Option("enable.idempotence", "bool", None),  # None: on unless other settings conflict (KIP-679)
        Option("max.in.flight.requests.per.connection", "int", 5, _at_least(1)),
        Option("buffer.memory", "int", 33_554_432, _at_least(1)),
        Option("max.block.ms", "int", 60_000, _at_least(0)),
        Option("max.request.size", "int", 1_048_576, _at_least(1)),
        Option("partitioner", "callable", None),
        Option("key.serializer", "callable", None),
        Option("value.serializer", "callable", None),
        # Completeness audit (client/audit.py): count acknowledged records per topic and time bucket.
        Option("audit.enable", "bool", False),
        Option("audit.bootstrap.servers", "list", None),  # None: this producer's own cluster
        Option("audit.topic", "str", "__audit"),
        Option("audit.tier", "str", "producer"),
        Option("audit.interval.ms", "int", 10_000, _at_least(1)),
        Option("audit.bucket.ms", "int", 600_000, _at_least(1)),
    )
}

CONSUMER_OPTIONS: dict[str, Option] = {
    option.name: option
    for option in (
        *_COMMON,
        # Group membership (subscribe, commits): see group_membership.py and consumer_group.py.
        Option("group.id", "str", None),
        Option("group.instance.id", "str", None),
        Option("session.timeout.ms", "int", 45_000, _at_least(1)),
        Option("heartbeat.interval.ms", "int", 3_000, _at_least(1)),
        Option("max.poll.interval.ms", "int", 300_000, _at_least(1)),
        Option("enable.auto.commit", "bool", True),
        Option("auto.commit.interval.ms", "int", 5_000, _at_least(0)),
        Option("partition.assignment.strategy", "list", ["range", "cooperative-sticky"]),
        Option("exclude.internal.topics", "bool", True),
        Option("default.api.timeout.ms", "int", 60_000, _at_least(1)),
        Option("fetch.min.bytes", "int", 1, _at_least(0)),
        Option("fetch.max.wait.ms", "int", 500, _at_least(0)),
        Option("max.partition.fetch.bytes", "int", 1_048_576, _at_least(1)),
        Option("fetch.max.bytes", "int", 52_428_800, _at_least(1)),
        Option("auto.offset.reset", "str", "latest", _one_of("earliest", "latest", "none")),
        Option("isolation.level", "str", "read_uncommitted", _one_of("read_uncommitted", "read_committed")),
        Option("max.poll.records", "int", 500, _at_least(1)),
        Option("check.crcs", "bool", True),
        # Records that are not uniform runs left undecoded, as RecordRegions in LazyRecords' parts: for
        # readers that decode them a column at a time (the Spark source); not a Kafka option.
        Option("record.regions", "bool", False),
        Option("key.deserializer", "callable", None),
        Option("value.deserializer", "callable", None),
    )
}

ADMIN_OPTIONS: dict[str, Option] = {
    option.name: option
    for option in (*_COMMON, Option("default.api.timeout.ms", "int", 60_000, _at_least(1)))
}

_TRUE = {"true", "yes", "1", "on"}
_FALSE = {"false", "no", "0", "off"}


def _coerce(option: Option, value: Any) -> Any:
    """`value` converted to the option's type; strings (from properties files) are parsed."""
    kind = option.kind
    if value is None:
        return None
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise TypeError(f"expected an integer, got {type(value).__name__}")
        return int(value)
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise TypeError(f"expected true or false, got {value!r}")
    if kind == "str":
        if not isinstance(value, str):
            raise TypeError(f"expected a string, got {type(value).__name__}")
        return value
    if kind == "list":
        items = value.split(",") if isinstance(value, str) else list(value)
        cleaned = [str(item).strip() for item in items if str(item).strip()]
        if not cleaned:
            raise TypeError("expected at least one entry")
        return cleaned
    if kind == "acks":
        if isinstance(value, str) and value.strip().lower() == "all":
            return -1
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise TypeError(f"expected all, -1, 0 or 1, got {value!r}")
        return int(value)
    if kind == "callable":
        if not callable(value):
            raise TypeError(f"expected a callable, got {type(value).__name__}")
        return value
    raise AssertionError(f"unknown option kind {kind}")


def _suggest(name: str, options: Mapping[str, Option]) -> str:
    close = difflib.get_close_matches(name, list(options), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def resolve(
    options: Mapping[str, Option], what: str, config: Mapping[str, Any] | None, kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """Merge `config` (Kafka names) and `kwargs` (Python names) over the defaults, checking each value.

    `what` ("producer", "consumer", "admin") goes into error messages.
    """
    given: dict[str, Any] = {}
    for source in (config or {}), {key.replace("_", "."): value for key, value in kwargs.items()}:
        for name, value in source.items():
            if name not in options:
                raise ConfigError(f"unknown {what} property {name!r}{_suggest(name, options)}")
            if name in given:
                raise ConfigError(f"{what} property {name!r} is given twice (as a dict key and a keyword)")
            given[name] = value
    resolved: dict[str, Any] = {}
    for name, option in options.items():
        value = given.get(name, option.default)
        try:
            value = _coerce(option, value)
        except (TypeError, ValueError) as error:
            raise ConfigError(f"{what} property {name!r}: {error}") from None
        if value is not None and option.check is not None:
            problem = option.check(value)
            if problem:
                raise ConfigError(f"{what} property {name!r} {problem}")
        resolved[name] = value
    if resolved["client.id"] is None:
        resolved["client.id"] = f"backbone-{what}-{next(_client_ids)}"
    resolved["_given"] = frozenset(given)
    _check_together(what, resolved)
    return resolved


def _check_together(what: str, config: dict[str, Any]) -> None:
    """Rules that involve several properties (the Java client's, with its messages' advice)."""
    if config["retry.backoff.max.ms"] < config["retry.backoff.ms"]:
        config["retry.backoff.max.ms"] = config["retry.backoff.ms"]
    if config["reconnect.backoff.max.ms"] < config["reconnect.backoff.ms"]:
        config["reconnect.backoff.max.ms"] = config["reconnect.backoff.ms"]
    for server in config["bootstrap.servers"]:
        try:
            parse_bootstrap(server)
        except ValueError as error:
            raise ConfigError(f"{what} property 'bootstrap.servers': {error}") from None
    if what == "producer":
        _check_producer(config)
    if what == "consumer":
        _check_consumer(config)


def _check_consumer(config: dict[str, Any]) -> None:
    if config["fetch.max.bytes"] < config["fetch.min.bytes"]:
        raise ConfigError("consumer property 'fetch.max.bytes' must not be below 'fetch.min.bytes'")
    if config["heartbeat.interval.ms"] >= config["session.timeout.ms"]:
        raise ConfigError(
            "consumer property 'heartbeat.interval.ms' must be below 'session.timeout.ms' "
            "(a third of it is usual)"
        )
    if config["group.instance.id"] is not None and config["group.id"] is None:
        raise ConfigError("consumer property 'group.instance.id' needs 'group.id' to be set too")
    if config["group.id"] is not None and not config["group.id"]:
        raise ConfigError("consumer property 'group.id' must not be empty (leave it unset for no group)")


def _check_producer(config: dict[str, Any]) -> None:
    floor = config["linger.ms"] + config["request.timeout.ms"]
    if config["delivery.timeout.ms"] < floor:
        raise ConfigError(
            f"producer property 'delivery.timeout.ms' ({config['delivery.timeout.ms']}) must be at least "
            f"linger.ms + request.timeout.ms ({floor})"
        )
    conflicts = []
    if config["acks"] != -1:
        conflicts.append("acks must be all")
    if config["retries"] == 0:
        conflicts.append("retries must be above 0")
    if config["max.in.flight.requests.per.connection"] > 5:
        conflicts.append("max.in.flight.requests.per.connection must be at most 5")
    if config["enable.idempotence"] is None:
        # Not set: on by default, quietly off when other settings rule it out (as the Java client).
        config["enable.idempotence"] = not conflicts
    elif config["enable.idempotence"] and conflicts:
        raise ConfigError(
            "producer property 'enable.idempotence' is true but " + "; ".join(conflicts) + " for it"
            " (set enable.idempotence=false to use these settings)"
        )


SECURITY_PREFIXES = ("security.", "sasl.", "ssl.")


def security_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The TLS and SASL settings among a client's settings (security.protocol, sasl.*, ssl.*): what another
    client needs to reach the same cluster as the one these settings are for."""
    return {k: v for k, v in settings.items() if k.startswith(SECURITY_PREFIXES)}


def parse_bootstrap(server: str) -> tuple[str, int]:
    """'host:port' (or '[v6addr]:port', or 'host' for port 9092) as (host, port)."""
    text = server.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    elif ":" in text:
        raise ValueError(f"{server!r}: write IPv6 addresses as [address]:port")
    else:
        host, port_text = text, ""
    if not host:
        raise ValueError(f"{server!r} has no host")
    if not port_text:
        return host, 9092
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"{server!r} has an invalid port")
    return host, int(port_text)
