"""Helpers for the Spark tests: producing known records and reading them back as plain tuples."""

from __future__ import annotations

import json
from datetime import UTC
from pathlib import Path
from typing import Any, NamedTuple

from backbone.client import Admin, NewTopic, Producer

# Spark's JVMs in tests only: a quicker start matters more than peak speed.
TEST_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


class Produced(NamedTuple):
    """A record as the broker acknowledged it, in the columns Spark's Kafka source gives."""

    key: bytes | None
    value: bytes | None
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    timestamp_type: int
    headers: tuple[tuple[str, bytes | None], ...] | None


def create_topic(bootstrap: str, topic: str, partitions: int, **configs: str) -> None:
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic(topic, partitions, 1, configs=configs)])


def produce(
    bootstrap: str,
    topic: str,
    count: int,
    partitions: int,
    *,
    timestamp_of: Any = None,
    log_append_time: bool = False,
    **config: Any,
) -> list[Produced]:
    """Send `count` records round-robin over the partitions: keys k<i> (every fifth null), values v<i>,
    headers on every other record; returns them with their acknowledged offsets and timestamps."""
    sent = []
    with Producer(bootstrap_servers=bootstrap, **config) as producer:
        for i in range(count):
            key = None if i % 5 == 0 else b"k%d" % i
            headers = (("h", b"x%d" % i), ("empty", None)) if i % 2 else None
            stamp = None if timestamp_of is None else timestamp_of(i)
            future = producer.send(
                topic, b"v%d" % i, key, headers=headers, partition=i % partitions, timestamp_ms=stamp
            )
            sent.append((key, b"v%d" % i, headers, future))
        producer.flush()
        result = []
        for key, value, headers, future in sent:
            meta = future.get(30)
            result.append(
                Produced(
                    key,
                    value,
                    topic,
                    meta.partition,
                    meta.offset,
                    meta.timestamp,
                    1 if log_append_time else 0,
                    tuple(headers) if headers else None,
                )
            )
    return result


def as_produced(row: Any) -> Produced:
    headers = row["headers"] if "headers" in row.asDict() else None
    return Produced(
        None if row.key is None else bytes(row.key),
        None if row.value is None else bytes(row.value),
        row.topic,
        row.partition,
        row.offset,
        round(row.timestamp.replace(tzinfo=UTC).timestamp() * 1000),  # the session's zone is UTC
        row.timestampType,
        None
        if headers is None
        else tuple((h.key, None if h.value is None else bytes(h.value)) for h in headers),
    )


def in_order(records: list[Produced]) -> list[Produced]:
    return sorted(records, key=lambda r: (r.topic, r.partition, r.offset))


def read_rows(df: Any) -> list[Produced]:
    return sorted((as_produced(row) for row in df.collect()), key=lambda r: (r.topic, r.partition, r.offset))


def checkpoint_offsets(checkpoint: Path | str) -> dict[str, dict[str, int]]:
    """The source offsets of the last batch Spark committed in `checkpoint` ({topic: {partition: offset}})."""
    commits = [int(p.name) for p in Path(checkpoint, "commits").iterdir() if p.name.isdigit()]
    last = max(commits)
    lines = Path(checkpoint, "offsets", str(last)).read_text().splitlines()
    return json.loads(lines[-1])["offsets"]


def group_offsets(bootstrap: str, group: str) -> dict[str, dict[str, int]]:
    with Admin(bootstrap_servers=bootstrap) as admin:
        committed = admin.list_consumer_group_offsets(group)
    result: dict[str, dict[str, int]] = {}
    for tp, meta in committed.items():
        result.setdefault(tp.topic, {})[str(tp.partition)] = meta.offset
    return result
