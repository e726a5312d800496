"""A mirror's settings: Kafka-style property names, read from a properties/TOML file and command-line flags.

    source.bootstrap.servers=127.0.0.1:9092     source.alias=dc1
    target.bootstrap.servers=127.0.0.1:9192     target.alias=aggregate
    topics=pageviews,clicks            (or topics.regex=.*, with topics.exclude=__.*|tmp-.*)
    group.id=mirror-dc1-aggregate       topic.naming=identity | prefix
    instance.id=mirror-dc1-1            (static membership: a restart takes its partitions straight back)
    target.topic.config.retention.ms=604800000    target.replication.factor=3
    source.consumer.<key>=...   target.producer.<key>=...   (any client setting, passed through)
    source.consumer.security.protocol=SASL_SSL  target.producer.sasl.username=...   (each side's security)
    metrics.port=9400
    audit.bootstrap.servers=127.0.0.1:9192   (publish counts of what was copied; see backbone/mirror/audit.py)
    audit.producer.<key>=...    (the audit publisher's client settings; default: the target's security ones)

The mirror's own keys are checked (an unknown one is an error naming the closest known key); the
`source.consumer.`, `target.producer.`, `audit.producer.` and `target.topic.config.` families pass through
to the clients and the topic creation.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from backbone.properties import ConfigError, Property, resolve

CONSUMER_PREFIX = "source.consumer."
PRODUCER_PREFIX = "target.producer."
TOPIC_CONFIG_PREFIX = "target.topic.config."
AUDIT_PRODUCER_PREFIX = "audit.producer."
_PASSED_THROUGH = (CONSUMER_PREFIX, PRODUCER_PREFIX, TOPIC_CONFIG_PREFIX, AUDIT_PRODUCER_PREFIX)

SPECS = {
    p.name: p
    for p in (
        Property(
            "source.bootstrap.servers", str, required=True, doc="the cluster to copy from, host:port,..."
        ),
        Property("target.bootstrap.servers", str, required=True, doc="the cluster to copy into"),
        Property("source.alias", str, required=True, doc="the source cluster's name, e.g. dc1"),
        Property("target.alias", str, "aggregate", doc="the target cluster's name"),
        Property("topics", list, [], doc="topics to mirror, comma separated"),
        Property("topics.regex", str, "", doc="mirror every topic whose whole name matches"),
        Property(
            "topics.exclude",
            str,
            r"__.*|_schemas",
            doc="never mirror topics whose whole name matches (internal ones, the schema registry's)",
        ),
        Property("group.id", str, "", doc="the consumer group (default mirror-<source>-<target>)"),
        Property(
            "instance.id",
            str,
            "",
            doc="a static group member id: a restarted mirror takes its place back without a rebalance",
        ),
        Property("topic.naming", str, "identity", choices=("identity", "prefix")),
        Property(
            "target.replication.factor", int, -1, minimum=-1, doc="for created topics; -1: broker default"
        ),
        Property("metrics.port", int, 0, minimum=0, maximum=65535, doc="Prometheus endpoint; 0: none"),
        Property("poll.max.records", int, 10_000, minimum=1, doc="records copied per cycle at most"),
        Property(
            "max.in.flight.records",
            int,
            100_000,
            minimum=1,
            doc="records sent and not yet acknowledged at most; beyond, reading waits for the target",
        ),
        Property(
            "revoke.wait.ms",
            int,
            10_000,
            minimum=0,
            doc="revoked partitions' answers are awaited this long; the rest is copied again",
        ),
        Property(
            "commit.interval.ms", int, 1000, minimum=0, doc="how often acknowledged offsets are committed"
        ),
        Property("progress.interval.ms", int, 10_000, minimum=0, doc="how often a progress line is logged"),
        Property(
            "audit.bootstrap.servers",
            str,
            "",
            doc="publish audit counts of the copied records there; '': none",
        ),
        Property("audit.topic", str, "__audit", doc="the audit topic counts are published to"),
        Property(
            "audit.bucket.ms", int, 600_000, minimum=1, doc="the audit's time bucket (by record timestamp)"
        ),
        Property("audit.interval.ms", int, 10_000, minimum=1, doc="how often audit counts are published"),
    )
}


@dataclass(frozen=True)
class MirrorConfig:
    source_bootstrap: str
    target_bootstrap: str
    source_alias: str
    target_alias: str
    topics: tuple[str, ...]
    topics_regex: str
    exclude_regex: str
    group_id: str
    instance_id: str
    naming: str
    replication_factor: int
    metrics_port: int
    poll_max_records: int
    commit_interval_ms: int
    progress_interval_ms: int
    consumer: dict[str, Any] = field(default_factory=dict)
    producer: dict[str, Any] = field(default_factory=dict)
    topic_configs: dict[str, str] = field(default_factory=dict)
    audit_bootstrap: str = ""
    audit_topic: str = "__audit"
    audit_bucket_ms: int = 600_000
    audit_interval_ms: int = 10_000
    audit_producer: dict[str, Any] = field(default_factory=dict)
    max_in_flight_records: int = 100_000
    revoke_wait_ms: int = 10_000

    @classmethod
    def from_properties(cls, raw: Mapping[str, Any]) -> MirrorConfig:
        values = resolve(SPECS, raw, allow_unknown=lambda key: key.startswith(_PASSED_THROUGH))
        if bool(values["topics"]) == bool(values["topics.regex"]):
            raise ConfigError(
                "name the topics to mirror with exactly one of topics=a,b or topics.regex=REGEX"
            )
        for key in ("topics.regex", "topics.exclude"):
            try:
                re.compile(values[key])
            except re.error as exc:
                raise ConfigError(f"{key}={values[key]!r} is not a valid regular expression: {exc}") from None
        for key in ("source.alias", "target.alias"):
            if not re.fullmatch(r"[A-Za-z0-9_-]+", values[key]):
                raise ConfigError(f"{key}={values[key]!r}: use letters, digits, - and _ only")
        if values["source.alias"] == values["target.alias"]:
            raise ConfigError("source.alias and target.alias must differ: they tell where a record has been")

        def family(prefix: str) -> dict[str, Any]:
            return {k[len(prefix) :]: v for k, v in raw.items() if k.startswith(prefix)}

        group = values["group.id"] or f"mirror-{values['source.alias']}-{values['target.alias']}"
        return cls(
            source_bootstrap=values["source.bootstrap.servers"],
            target_bootstrap=values["target.bootstrap.servers"],
            source_alias=values["source.alias"],
            target_alias=values["target.alias"],
            topics=tuple(values["topics"]),
            topics_regex=values["topics.regex"],
            exclude_regex=values["topics.exclude"],
            group_id=group,
            instance_id=values["instance.id"],
            naming=values["topic.naming"],
            replication_factor=values["target.replication.factor"],
            metrics_port=values["metrics.port"],
            poll_max_records=values["poll.max.records"],
            commit_interval_ms=values["commit.interval.ms"],
            progress_interval_ms=values["progress.interval.ms"],
            consumer=family(CONSUMER_PREFIX),
            producer=family(PRODUCER_PREFIX),
            topic_configs={k: str(v) for k, v in family(TOPIC_CONFIG_PREFIX).items()},
            audit_bootstrap=values["audit.bootstrap.servers"],
            audit_topic=values["audit.topic"],
            audit_bucket_ms=values["audit.bucket.ms"],
            audit_interval_ms=values["audit.interval.ms"],
            audit_producer=family(AUDIT_PRODUCER_PREFIX),
            max_in_flight_records=values["max.in.flight.records"],
            revoke_wait_ms=values["revoke.wait.ms"],
        )

    def subscription_pattern(self) -> str:
        """One regex for the consumer: the listed topics or the regex, minus the exclusions."""
        wanted = "|".join(re.escape(t) for t in self.topics) if self.topics else self.topics_regex
        return f"(?!(?:{self.exclude_regex})$)(?:{wanted})"

    def target_topic(self, source_topic: str) -> str:
        return source_topic if self.naming == "identity" else f"{self.source_alias}.{source_topic}"
