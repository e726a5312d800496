"""Broker configuration: Kafka's property names, typed and checked before the broker starts.

Keys of the storage engine (`log.*` retention, segment and flush settings) are checked by the log room's
own configuration; everything else is declared here. A bad or unknown key stops the broker at start with
a message naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from backbone.broker.connection_limits import CONNECTION_PROPERTIES
from backbone.broker.quotas import QUOTA_PROPERTIES
from backbone.broker.request_memory import QUEUED_MAX_REQUEST_BYTES, check_budget
from backbone.broker.security.config import SECURITY_PROPERTIES, check_sasl_mechanisms, jaas_credentials
from backbone.log.config import LogConfig, broker_property_names
from backbone.properties import ConfigError, Property, parse_list, resolve
from backbone.protocol.errors import InvalidConfigError

DEFAULT_SECURITY_PROTOCOL_MAP = "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
SUPPORTED_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")

_P = Property
BROKER_PROPERTIES: dict[str, Property] = {
    p.name: p
    for p in (
        _P("broker.id", int, required=True, minimum=0, doc="a unique non-negative integer per broker"),
        _P("broker.rack", str, None, "rack of this broker, for rack-aware replica placement"),
        _P("listeners", list, ["PLAINTEXT://127.0.0.1:9092"], "NAME://host:port endpoints to listen on"),
        _P("advertised.listeners", list, None, "endpoints clients are told to use (default: listeners)"),
        _P("listener.security.protocol.map", list, parse_list(DEFAULT_SECURITY_PROTOCOL_MAP)),
        _P("inter.broker.listener.name", str, None, "listener brokers use to talk to each other"),
        _P("log.dirs", list, None, "directories that hold the partition logs"),
        _P("log.dir", str, "/tmp/backbone-logs", "the log directory when log.dirs is not set"),
        _P("zookeeper.connect", str, required=True, doc="host:port[,host:port]/chroot of the cluster"),
        _P("zookeeper.session.timeout.ms", int, 18000, minimum=2000),
        _P("zookeeper.connection.timeout.ms", int, 18000, minimum=1000),
        _P("num.partitions", int, 1, minimum=1),
        _P("default.replication.factor", int, 1, minimum=1),
        _P("min.insync.replicas", int, 1, minimum=1),
        _P("auto.create.topics.enable", bool, True),
        _P("delete.topic.enable", bool, True),
        _P("socket.request.max.bytes", int, 104857600, minimum=1024),
        _P(
            "fetch.sendfile.threshold.bytes",
            int,
            16777216,
            "records regions of at least this size go out with sendfile, smaller ones are read and written "
            "a MiB at a time (ops/bench/machine_bench.py measures both paths and says which is faster at "
            "each size)",
            minimum=0,
        ),
        _P("replica.lag.time.max.ms", int, 30000, minimum=1),
        _P(
            "metrics.port",
            int,
            0,
            "serve Prometheus metrics (docs/operations.md) on this port, first listener's host; 0: off",
            minimum=0,
        ),
        _P("replica.fetch.max.bytes", int, 1048576, minimum=1),
        _P("replica.fetch.wait.max.ms", int, 500, minimum=0),
        _P("replica.fetch.min.bytes", int, 1, minimum=1),
        _P("replica.fetch.response.max.bytes", int, 10485760, minimum=1),
        _P("replica.fetch.backoff.ms", int, 1000, minimum=0),
        _P(
            "max.incremental.fetch.session.cache.slots",
            int,
            1000,
            "fetch sessions (KIP-227) the broker keeps; 0 answers every fetch without one",
            minimum=0,
        ),
        _P(
            "min.incremental.fetch.session.eviction.ms",
            int,
            120000,
            "how long a fetch session must be idle before a new one may take its slot",
            minimum=0,
        ),
        _P("replica.socket.timeout.ms", int, 30000, minimum=1),
        _P("unclean.leader.election.enable", bool, False),
        _P("auto.leader.rebalance.enable", bool, True),
        _P("leader.imbalance.check.interval.seconds", int, 300, minimum=1),
        _P("leader.imbalance.per.broker.percentage", int, 10, minimum=0),
        _P("controlled.shutdown.enable", bool, True),
        _P(
            "broker.liveness.probe.interval.ms",
            int,
            500,
            "how often every broker probes every other broker's listener (controller/liveness.py)",
            minimum=50,
        ),
        _P(
            "broker.liveness.timeout.ms",
            int,
            3000,
            "a broker that answers no probe for this long counts as dead until it answers again",
            minimum=100,
        ),
        _P("controlled.shutdown.max.retries", int, 3, minimum=0),
        _P("controlled.shutdown.retry.backoff.ms", int, 5000, minimum=0),
        _P("log.retention.check.interval.ms", int, 300000, minimum=1),
        _P("log.cleaner.enable", bool, True, "compact logs whose cleanup.policy contains compact"),
        _P(
            "log.cleaner.backoff.ms",
            int,
            15000,
            "pause after a log cleaner pass that found nothing to clean",
            minimum=1,
        ),
        _P(
            "log.cleaner.dedupe.buffer.size",
            int,
            134217728,
            "memory for the keys of one compaction's offset map",
            minimum=1024 * 1024,
        ),
        _P("producer.id.expiration.ms", int, 86400000, minimum=1),
        _P("offsets.topic.replication.factor", int, 3, minimum=1),
        _P("offsets.topic.num.partitions", int, 50, minimum=1),
        _P("offsets.retention.minutes", int, 10080, minimum=1),
        _P(
            "offsets.retention.check.interval.ms",
            int,
            600000,
            "how often expired offsets are removed",
            minimum=1,
        ),
        _P(
            "offset.metadata.max.bytes",
            int,
            4096,
            "longest metadata string an offset commit may carry",
            minimum=0,
        ),
        _P(
            "offsets.commit.timeout.ms",
            int,
            5000,
            "how long a commit waits for the offsets topic's ISR",
            minimum=1,
        ),
        _P("offsets.topic.segment.bytes", int, 104857600, "segment size of __consumer_offsets", minimum=14),
        _P("group.initial.rebalance.delay.ms", int, 3000, minimum=0),
        _P("group.min.session.timeout.ms", int, 6000, minimum=0),
        _P("group.max.session.timeout.ms", int, 1800000, minimum=0),
        _P("group.max.size", int, 2**31 - 1, "most members a group may have", minimum=1),
        _P("cluster.name", str, None, "a human name for this cluster (dc1, aggregate, ...)"),
    )
} | SECURITY_PROPERTIES
BROKER_PROPERTIES.update(CONNECTION_PROPERTIES)
BROKER_PROPERTIES[QUEUED_MAX_REQUEST_BYTES.name] = QUEUED_MAX_REQUEST_BYTES
BROKER_PROPERTIES.update(QUOTA_PROPERTIES)


@dataclass(frozen=True)
class Endpoint:
    listener: str
    host: str
    port: int
    security_protocol: str

    def __str__(self) -> str:
        return f"{self.listener}://{self.host}:{self.port}"


def parse_endpoint(text: str, protocol_map: dict[str, str], key: str) -> Endpoint:
    name, sep, address = text.partition("://")
    host, colon, port_text = address.rpartition(":")
    if not sep or not colon or not port_text.isdigit():
        raise ConfigError(f"{key}: {text!r} must look like PLAINTEXT://host:port")
    name = name.upper()
    if name not in protocol_map:
        raise ConfigError(f"{key}: listener {name} is not in listener.security.protocol.map")
    protocol = protocol_map[name]
    if protocol not in SUPPORTED_SECURITY_PROTOCOLS:
        raise ConfigError(
            f"{key}: security protocol {protocol} of listener {name} is not supported yet "
            f"(supported: {', '.join(SUPPORTED_SECURITY_PROTOCOLS)})"
        )
    port = int(port_text)
    if not 0 <= port <= 65535:
        raise ConfigError(f"{key}: port {port} is out of range")
    return Endpoint(name, host.strip("[]") or "0.0.0.0", port, protocol)


class BrokerConfig:
    """The resolved configuration of one broker."""

    def __init__(self, raw: dict[str, Any]) -> None:
        log_keys = broker_property_names()
        self.values = resolve(BROKER_PROPERTIES, raw, allow_unknown=log_keys.__contains__)
        try:
            # The storage engine's own settings (log.retention.ms, log.segment.bytes, ...) are its to check.
            self.log = LogConfig.from_properties({k: v for k, v in raw.items() if k in log_keys})
        except InvalidConfigError as exc:
            raise ConfigError(exc.message) from None
        protocol_map = {}
        for item in self.values["listener.security.protocol.map"]:
            name, sep, protocol = item.partition(":")
            if not sep:
                raise ConfigError(f"listener.security.protocol.map: {item!r} must look like NAME:PROTOCOL")
            protocol_map[name.strip().upper()] = protocol.strip().upper()
        self.listeners = [parse_endpoint(t, protocol_map, "listeners") for t in self.values["listeners"]]
        if not self.listeners:
            raise ConfigError("listeners must name at least one endpoint")
        advertised = self.values["advertised.listeners"]
        self.advertised_listeners = (
            [parse_endpoint(t, protocol_map, "advertised.listeners") for t in advertised]
            if advertised
            else list(self.listeners)
        )
        listener_names = {e.listener for e in self.listeners}
        for endpoint in self.advertised_listeners:
            if endpoint.listener not in listener_names:
                raise ConfigError(f"advertised.listeners: {endpoint.listener} is not one of listeners")
        self.inter_broker_listener = self.values["inter.broker.listener.name"] or self.listeners[0].listener
        if self.inter_broker_listener not in listener_names:
            raise ConfigError(
                f"inter.broker.listener.name: {self.inter_broker_listener} is not one of listeners"
            )
        check_budget(self.values["queued.max.request.bytes"], self.values["socket.request.max.bytes"])
        # Dynamic broker configs (KIP-226), layered on top by handlers/broker_configs.apply_dynamic: the
        # stored strings of the cluster-wide defaults and of this broker, and the typed values of the keys
        # the broker acts on. `values` and `static_log` stay what the properties file says; `log` and
        # `config[key]` give the effective values.
        self.static_log = self.log
        self.dynamic_defaults: dict[str, str] = {}
        self.dynamic_broker: dict[str, str] = {}
        self.dynamic_values: dict[str, Any] = {}
        self.log_dirs: list[str] = self.values["log.dirs"] or [self.values["log.dir"]]
        self.sasl_mechanisms = check_sasl_mechanisms(self.values["sasl.enabled.mechanisms"])
        self.inter_broker_credentials = jaas_credentials(self.values["sasl.jaas.config"])
        protocols = {e.security_protocol for e in self.listeners}
        if protocols & {"SSL", "SASL_SSL"} and not self.values["ssl.keystore.location"]:
            raise ConfigError(
                "SSL and SASL_SSL listeners need ssl.keystore.location (a PEM certificate and key)"
            )
        if self.inter_broker_protocol.startswith("SASL") and self.inter_broker_credentials is None:
            raise ConfigError(
                f"inter.broker.listener.name {self.inter_broker_listener} uses SASL: set sasl.jaas.config "
                'with the brokers\' username="..." password="..."'
            )

    @property
    def inter_broker_protocol(self) -> str:
        return next(e.security_protocol for e in self.listeners if e.listener == self.inter_broker_listener)

    def __getitem__(self, key: str) -> Any:
        """The effective value: a dynamic one where the broker acts on it, else the static one."""
        dynamic = self.dynamic_values
        return dynamic[key] if key in dynamic else self.values[key]

    @property
    def broker_id(self) -> int:
        return self.values["broker.id"]
