"""Dynamic broker configs (KIP-226): which broker keys change at run time, their checks, and how they layer.

As in Kafka in ZooKeeper mode, they are stored in `/config/brokers/<id>` (one broker's) and
`/config/brokers/<default>` (cluster-wide), each write announced by a config change notification that
every broker follows; a broker reads both when it starts and on each notification naming them
(`Broker._load_broker_configs`). Precedence, most specific first: this broker's dynamic value, the
cluster-wide dynamic default, the properties file, the built-in default.

The keys are Kafka 3.x's dynamically updatable broker configs (DynamicBrokerConfig.AllDynamicConfigs):
- acted on: the log defaults every topic without its own override takes (`log.retention.ms`,
  `log.retention.bytes`, `log.segment.bytes`, `log.roll.ms`, `log.index.size.max.bytes`,
  `log.index.interval.bytes`, `log.flush.interval.messages`, `log.flush.interval.ms`, `message.max.bytes`,
  `log.message.timestamp.type`, `log.cleanup.policy`, `log.cleaner.delete.retention.ms`,
  `log.cleaner.min.compaction.lag.ms`, `log.cleaner.max.compaction.lag.ms`,
  `log.cleaner.min.cleanable.ratio`), applied to the open logs at once; `min.insync.replicas` (read on
  each acks=all produce), `unclean.leader.election.enable` (read by the controller at each election pass)
  and `log.cleaner.backoff.ms` (read before each pause of the cleaner);
- stored, checked and described without being acted on (their documentation says so): the other log
  defaults (`compression.type`, `log.preallocate`, `log.roll.jitter.ms`, `log.segment.delete.delay.ms`,
  `log.message.timestamp.*`, `log.message.downconversion.enable`), thread counts (`background.threads`,
  `num.io.threads`, `num.network.threads`, `num.replica.fetchers`, `num.recovery.threads.per.data.dir`,
  `log.cleaner.threads`), the cleaner's buffers, connection limits, `producer.id.expiration.ms`,
  `metric.reporters`, and the listener security settings (`ssl.*`, `sasl.*`, `sasl.kerberos.*`,
  `principal.builder.class`): those are read once when the broker starts, from its properties file.

Refused as in Kafka: keys outside that set ("Cannot update these configs dynamically"), the keystore and
truststore settings without a listener prefix, and per-broker keys (listener security) at the cluster-wide
level. Unlike Kafka, listener-prefixed keys (`listener.name.<l>.…`), `listeners`,
`listener.security.protocol.map` and password keys (`sasl.jaas.config`: Kafka encrypts them with a secret
this broker does not have) are refused too: a broker that would only store them could not honour them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from backbone.broker.config import BROKER_PROPERTIES, BrokerConfig
from backbone.broker.handlers.config_catalog import (
    BROKER_SYNONYMS,
    ConfigEntry,
    ConfigSource,
    ConfigType,
    check_value,
    dynamic_synonyms,
    log_default_keys,
    render,
    static_broker_value,
    stored_only_broker_keys,
    topic_doc,
    topic_key_type,
    type_of,
)
from backbone.log.config import LogConfig
from backbone.properties import Property
from backbone.protocol.errors import InvalidConfigError, InvalidRequestError

__all__ = [
    "ACTED_ON",
    "DYNAMIC_KEYS",
    "apply_dynamic",
    "broker_key_type",
    "describe_broker",
    "describe_broker_defaults",
    "inherited_broker_value",
    "usable_dynamic",
    "validate_dynamic",
]

log = logging.getLogger(__name__)

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1
_NOT_ACTED_ON = " (a dynamic broker config Backbone stores without acting on it)"

# Dynamic keys the properties file sets too: their type and default are the broker's own.
_FROM_FILE = (
    "min.insync.replicas",
    "unclean.leader.election.enable",
    "log.cleaner.backoff.ms",
    "log.cleaner.dedupe.buffer.size",
    "producer.id.expiration.ms",
    "max.connections",
    "max.connections.per.ip",
    "max.connections.per.ip.overrides",
    "ssl.client.auth",
    "ssl.endpoint.identification.algorithm",
    "sasl.enabled.mechanisms",
    "sasl.mechanism.inter.broker.protocol",
)

# Dynamic keys only stored here, with Kafka's types and defaults.
_P = Property
_STORED_ONLY: dict[str, Property] = {
    p.name: p
    for p in (
        _P("background.threads", int, 10, "threads for background tasks", minimum=1),
        _P("num.io.threads", int, 8, "threads processing requests", minimum=1),
        _P("num.network.threads", int, 3, "threads handling the network", minimum=1),
        _P("num.replica.fetchers", int, 1, "fetcher threads per source broker", minimum=1),
        _P("num.recovery.threads.per.data.dir", int, 1, "log recovery threads per directory", minimum=1),
        _P("log.cleaner.threads", int, 1, "log cleaner threads", minimum=0),
        _P("log.cleaner.io.buffer.load.factor", float, 0.9, "load factor of the cleaner's dedupe buffer"),
        _P("log.cleaner.io.buffer.size", int, 524288, "the cleaner's I/O buffer", minimum=0),
        _P("log.cleaner.io.max.bytes.per.second", float, 1.7976931348623157e308, "the cleaner's I/O limit"),
        _P("log.message.timestamp.difference.max.ms", int, LONG_MAX, "largest timestamp skew", minimum=0),
        _P("log.message.downconversion.enable", bool, True, "down-convert records for old consumers"),
        _P("max.connection.creation.rate", int, INT_MAX, "new connections a second", minimum=0),
        _P("metric.reporters", list, [], "metrics reporter classes"),
        _P("principal.builder.class", str, None, "principal builder class"),
        _P("ssl.protocol", str, "TLSv1.3", "TLS protocol of the SSL context"),
        _P("ssl.provider", str, None, "security provider of the SSL context"),
        _P("ssl.cipher.suites", list, [], "enabled cipher suites"),
        _P("ssl.enabled.protocols", list, ["TLSv1.2", "TLSv1.3"], "enabled TLS protocols"),
        _P("ssl.keymanager.algorithm", str, "SunX509", "key manager algorithm"),
        _P("ssl.trustmanager.algorithm", str, "PKIX", "trust manager algorithm"),
        _P("ssl.secure.random.implementation", str, None, "SecureRandom implementation"),
        _P("ssl.engine.factory.class", str, None, "SSL engine factory class"),
        _P("sasl.kerberos.service.name", str, None, "Kerberos principal name Kafka runs as"),
        _P("sasl.kerberos.kinit.cmd", str, "/usr/bin/kinit", "Kerberos kinit command path"),
        _P("sasl.kerberos.ticket.renew.window.factor", float, 0.8, "ticket renewal point"),
        _P("sasl.kerberos.ticket.renew.jitter", float, 0.05, "jitter added to the renewal time"),
        _P("sasl.kerberos.min.time.before.relogin", int, 60000, "login thread sleep between refreshes"),
        _P("sasl.kerberos.principal.to.local.rules", list, ["DEFAULT"], "principal to short name rules"),
        _P("sasl.login.refresh.window.factor", float, 0.8, "login refresh point", 0.5, 1.0),
        _P("sasl.login.refresh.window.jitter", float, 0.05, "jitter of the refresh point", 0.0, 0.25),
        _P("sasl.login.refresh.min.period.seconds", int, 60, "least time between refreshes", 0, 900),
        _P("sasl.login.refresh.buffer.seconds", int, 300, "time kept before credential expiry", 0, 3600),
    )
}

# Every dynamic key but the LogConfig-checked log defaults, typed.
_TYPED: dict[str, Property] = (
    {name: BROKER_PROPERTIES[name] for name in _FROM_FILE} | stored_only_broker_keys() | _STORED_ONLY
)
_LOG_DEFAULTS = log_default_keys()
DYNAMIC_KEYS: frozenset[str] = _LOG_DEFAULTS | frozenset(_TYPED)
ACTED_ON: frozenset[str] = _LOG_DEFAULTS | {
    "min.insync.replicas",
    "unclean.leader.election.enable",
    "log.cleaner.backoff.ms",
}
# Kafka's per-broker configs: the listener security settings, which only a broker id may set.
PER_BROKER_ONLY = frozenset(
    k for k in DYNAMIC_KEYS if k.startswith(("ssl.", "sasl.")) or k == "principal.builder.class"
)
# Kafka's SslConfigs.RECONFIGURABLE_CONFIGS: dynamic only with a listener prefix.
_LISTENER_PREFIX_ONLY = frozenset(
    {
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.keystore.password",
        "ssl.key.password",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.password",
        "ssl.keystore.key",
        "ssl.keystore.certificate.chain",
        "ssl.truststore.certificates",
    }
)


def broker_key_type(name: str) -> ConfigType:
    """The type of a broker-level key (UNKNOWN for keys this broker does not know)."""
    if name in BROKER_PROPERTIES:
        return type_of(BROKER_PROPERTIES[name])
    if name in _TYPED:
        return type_of(_TYPED[name])
    if name in _LOG_DEFAULTS:
        return topic_key_type(_log_topic_key(name))
    return ConfigType.UNKNOWN


def _log_topic_key(broker_name: str) -> str:
    return next(topic for topic, broker in BROKER_SYNONYMS.items() if broker == broker_name)


# -- checks ----------------------------------------------------------------------------------------------


def _names(keys: set[str] | frozenset[str]) -> str:
    return ", ".join(sorted(keys))


def validate_dynamic(values: Mapping[str, str], *, per_broker: bool) -> None:
    """Check a resource's whole dynamic set, as Kafka does: names first (InvalidRequestError), then
    values by type (InvalidConfigError naming the key)."""
    names = set(values)
    listener_only = names & _LISTENER_PREFIX_ONLY
    not_dynamic = names - DYNAMIC_KEYS - listener_only
    if not_dynamic:
        raise InvalidRequestError(f"Cannot update these configs dynamically: {_names(not_dynamic)}")
    if listener_only:
        raise InvalidRequestError(
            "These security configs can be dynamically updated only per-listener using the listener "
            f"prefix: {_names(listener_only)}"
        )
    if not per_broker and names & PER_BROKER_ONLY:
        raise InvalidRequestError(
            "Cannot update these configs at default cluster level, broker id must be specified: "
            f"{_names(names & PER_BROKER_ONLY)}"
        )
    for name in sorted(names):
        if name in _TYPED:
            check_value(_TYPED[name], values[name])
        else:
            LogConfig.from_properties({name: values[name]})


def usable_dynamic(values: Mapping[str, str], *, per_broker: bool, what: str) -> dict[str, str]:
    """The stored keys a broker can apply: as Kafka, a bad one (written by another tool, or by an older
    broker) is left out with an error in the log instead of keeping the others from applying."""
    usable = {}
    for name, value in values.items():
        try:
            validate_dynamic({name: value}, per_broker=per_broker)
        except (InvalidRequestError, InvalidConfigError) as exc:
            log.error("event=dynamic_broker_config_ignored config=%s key=%s error=%r", what, name, str(exc))
            continue
        usable[name] = value
    return usable


# -- layering --------------------------------------------------------------------------------------------


def apply_dynamic(config: BrokerConfig, defaults: Mapping[str, str], per_broker: Mapping[str, str]) -> None:
    """Layer the dynamic configs over the properties file: `config.log` becomes the log defaults every topic
    without its own override takes, and `config[key]` the effective value of the keys the broker acts on."""
    defaults = usable_dynamic(defaults, per_broker=False, what="<default>")
    per_broker = usable_dynamic(per_broker, per_broker=True, what=str(config.broker_id))
    merged = {**defaults, **per_broker}
    config.log = LogConfig.from_properties(
        {k: v for k, v in merged.items() if k in _LOG_DEFAULTS}, base=config.static_log
    )
    acted_on = ACTED_ON & set(BROKER_PROPERTIES)
    config.dynamic_values = {k: BROKER_PROPERTIES[k].parse(v) for k, v in merged.items() if k in acted_on}
    config.dynamic_defaults = defaults
    config.dynamic_broker = per_broker


# -- describing ------------------------------------------------------------------------------------------


def _documentation(name: str) -> str:
    doc = topic_doc(_log_topic_key(name)) if name in _LOG_DEFAULTS else ""
    if not doc:
        prop = BROKER_PROPERTIES.get(name) or _TYPED.get(name)
        doc = prop.doc if prop is not None else ""
    if name in DYNAMIC_KEYS and name not in ACTED_ON:
        return doc + _NOT_ACTED_ON
    return doc


def _static(config: BrokerConfig, name: str) -> tuple[str | None, ConfigSource]:
    found = static_broker_value(config, name)
    if found is not None:
        return found
    return render(_TYPED[name].default), ConfigSource.DEFAULT_CONFIG


def inherited_broker_value(
    config: BrokerConfig, name: str, defaults: Mapping[str, str], per_broker: Mapping[str, str]
) -> str | None:
    """A broker key's value from the layers below the one being altered (given as its dynamic dicts)."""
    synonyms = dynamic_synonyms(name, per_broker, defaults)
    return synonyms[0][1] if synonyms else _static(config, name)[0]


def describe_broker(
    config: BrokerConfig, defaults: Mapping[str, str], per_broker: Mapping[str, str]
) -> list[ConfigEntry]:
    """Every broker key with its effective value, source and synonyms (most specific first); only the
    dynamic keys are not read-only."""
    entries = []
    for name in sorted(set(BROKER_PROPERTIES) | DYNAMIC_KEYS):
        static_value, static_source = _static(config, name)
        synonyms = [*dynamic_synonyms(name, per_broker, defaults), (name, static_value, static_source)]
        value, source = synonyms[0][1], synonyms[0][2]
        read_only = name not in DYNAMIC_KEYS
        kind = broker_key_type(name)
        entries.append(
            ConfigEntry(name, value, source, read_only, kind, _documentation(name), tuple(synonyms))
        )
    return entries


def describe_broker_defaults(defaults: Mapping[str, str]) -> list[ConfigEntry]:
    """The cluster-wide dynamic defaults (the `<default>` resource, named by an empty string): only the keys
    set there, as Kafka describes it."""
    source = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    return [
        ConfigEntry(
            key, value, source, False, broker_key_type(key), _documentation(key), ((key, value, source),)
        )
        for key, value in sorted(defaults.items())
    ]
