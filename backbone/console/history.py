"""The console's history: lag per group and partition, group statuses, topic sizes and end offsets (record
rates come from successive end offsets), and the action log, in any SQLAlchemy database (a SQLite file by
default). Samples older than a day are thinned to one per key and `DOWNSAMPLE_MS`, and everything older than
`RETAIN_MS` is dropped, so the database stays bounded.

The store is synchronous (SQLAlchemy Core); the console calls it from a worker thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy import (
    BigInteger,
    Column,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    and_,
    create_engine,
    delete,
    func,
    insert,
    inspect,
    or_,
    select,
)
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

log = logging.getLogger(__name__)

DAY_MS = 86_400_000
DOWNSAMPLE_MS = 300_000  # one sample per five minutes after the first day
RETAIN_MS = 14 * DAY_MS
COMPACT_EVERY_MS = 3_600_000

metadata = MetaData()


def _timed_table(name: str, *columns: Column | Index) -> Table:
    """A table whose rows each begin with an id and the time they were written (epoch ms)."""
    return Table(
        name,
        metadata,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("ts_ms", BigInteger, nullable=False),
        *columns,
    )


def _sampled_table(name: str, *columns: Column | Index) -> Table:
    """A table of samples: each row's id and time, then the cluster sampled, then its own columns."""
    return _timed_table(name, Column("cluster", String(64), nullable=False), *columns)


partition_lag = _sampled_table(
    "partition_lag",
    Column("group_id", String(255), nullable=False),
    Column("topic", String(255), nullable=False),
    Column("partition", Integer, nullable=False),
    Column("committed", BigInteger),
    Column("log_end", BigInteger),
    Column("lag", BigInteger),
    # A chart reads a few series of one group: the index holds each series in time order, with its lag
    # (the rows of one series are spread over the table, one per sampling round).
    Index("ix_partition_lag_series", "cluster", "group_id", "topic", "partition", "ts_ms", "lag"),
)

group_status = _sampled_table(
    "group_status",
    Column("group_id", String(255), nullable=False),
    Column("status", String(8), nullable=False),
    Column("total_lag", BigInteger),
    Index("ix_group_status_group", "cluster", "group_id", "ts_ms"),
)

topic_size = _sampled_table(
    "topic_size",
    Column("topic", String(255), nullable=False),
    Column("size_bytes", BigInteger),
    Column("end_offsets", BigInteger, nullable=False),
    Index("ix_topic_size_topic", "cluster", "topic", "ts_ms"),
)

action_log = _timed_table(
    "action_log",
    Column("user", String(255), nullable=False),
    Column("cluster", String(64), nullable=False),
    Column("action", String(64), nullable=False),
    Column("target", String(255), nullable=False),
    Column("detail", Text, nullable=False),
    Column("result", Text, nullable=False),
)

_SAMPLED = (
    (partition_lag, ("cluster", "group_id", "topic", "partition")),
    (group_status, ("cluster", "group_id")),
    (topic_size, ("cluster", "topic")),
)


# Indexes of earlier versions that a matching one replaced: left in place, a planner may still pick them.
# (A table of their own: an index made on one of `metadata`'s tables would join that table's indexes.)
_retired = Table("partition_lag", MetaData(), Column("cluster", String(64)))
_RETIRED_INDEXES = (Index("ix_partition_lag_group", _retired.c.cluster),)


def _update_indexes(engine: Engine) -> None:
    """Bring a database made by an earlier version to today's indexes (`create_all` makes only tables)."""
    present = {i["name"] for t in metadata.tables for i in inspect(engine).get_indexes(t)}
    for index in _RETIRED_INDEXES:
        if index.name in present:
            index.drop(engine)
    for table in metadata.tables.values():
        for index in table.indexes:
            if index.name not in present:
                index.create(engine)


class HistoryUnavailable(RuntimeError):
    """The history database cannot be used; the message names its URL (without the password)."""


@dataclass(frozen=True)
class LagRow:
    cluster: str
    group_id: str
    topic: str
    partition: int
    committed: int | None
    log_end: int | None
    lag: int | None


@dataclass(frozen=True)
class TopicRow:
    cluster: str
    topic: str
    size_bytes: int | None
    end_offsets: int


@dataclass(frozen=True)
class Action:
    id: int
    ts_ms: int
    user: str
    cluster: str
    action: str
    target: str
    detail: str
    result: str


def _safe_url(url: str) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<unparseable URL>"


class HistoryStore:
    def __init__(self, url: str) -> None:
        self.url = _safe_url(url)
        # One writer at a time: SQLite allows no more, and every sampler writes from its own worker thread.
        self.write_lock = threading.Lock()
        self.compacted_ms = int(time.time() * 1000)
        try:
            self.engine: Engine = create_engine(url, future=True, pool_pre_ping=True)
            metadata.create_all(self.engine)
            _update_indexes(self.engine)
        except (ArgumentError, SQLAlchemyError, ImportError) as error:
            raise HistoryUnavailable(
                f"the history database {self.url} cannot be used: {str(error).splitlines()[0]}; "
                "check history.url in the console's configuration"
            ) from None

    def close(self) -> None:
        self.engine.dispose()

    # -- writing samples ------------------------------------------------------------------------------

    def record(
        self,
        ts_ms: int,
        lags: Sequence[LagRow],
        statuses: Iterable[tuple[str, str, str, int | None]],
        topics: Sequence[TopicRow],
    ) -> None:
        """One sampling round: partition lags, (cluster, group, status, total lag), topic sizes."""
        with self.write_lock, self.engine.begin() as db:
            if lags:
                db.execute(insert(partition_lag), [{"ts_ms": ts_ms, **row.__dict__} for row in lags])
            rows = [
                {"ts_ms": ts_ms, "cluster": c, "group_id": g, "status": s, "total_lag": t}
                for c, g, s, t in statuses
            ]
            if rows:
                db.execute(insert(group_status), rows)
            if topics:
                db.execute(insert(topic_size), [{"ts_ms": ts_ms, **row.__dict__} for row in topics])

    def compact_when_due(self, now_ms: int) -> None:
        """Compact once an hour, whichever sampler asks first."""
        with self.write_lock:
            if now_ms - self.compacted_ms < COMPACT_EVERY_MS:
                return
            self.compacted_ms = now_ms
        self.compact(now_ms)

    def compact(self, now_ms: int | None = None) -> int:
        """Thin samples older than a day to one per key and five minutes, drop those older than
        `RETAIN_MS`; returns how many rows went."""
        now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
        day_ago, too_old = now_ms - DAY_MS, now_ms - RETAIN_MS
        removed = 0
        with self.write_lock, self.engine.begin() as db:
            for table, key in _SAMPLED:
                removed += db.execute(delete(table).where(table.c.ts_ms < too_old)).rowcount
                bucket = table.c.ts_ms // DOWNSAMPLE_MS  # floor division in every dialect
                keep = (
                    select(func.min(table.c.id))
                    .where(table.c.ts_ms < day_ago)
                    .group_by(*(table.c[k] for k in key), bucket)
                )
                thinned = delete(table).where(
                    table.c.ts_ms < day_ago, table.c.id.not_in(keep.scalar_subquery())
                )
                removed += db.execute(thinned).rowcount
        log.info("event=history_compacted removed=%d", removed)
        return removed

    # -- reading --------------------------------------------------------------------------------------

    def group_lag_series(
        self,
        cluster: str,
        group_id: str,
        since_ms: int,
        partitions: Iterable[tuple[str, int]] | None = None,
        step_ms: int = 1,
    ) -> dict[tuple[str, int], list[tuple[int, int]]]:
        """{(topic, partition): [(ts_ms, lag), ...]} oldest first (of `partitions` only, when given), one
        point per `step_ms`: the highest lag in that step at its last sample's time, so a chart of any range
        reads a bounded number of rows and still shows every peak."""
        c = partition_lag.c
        wanted = sorted(set(partitions)) if partitions is not None else None
        if wanted == []:
            return {}
        bucket = c.ts_ms // max(step_ms, 1)  # floor division in every dialect
        query = (
            select(c.topic, c.partition, func.max(c.ts_ms), func.max(c.lag))
            .where(
                c.cluster == cluster,
                c.group_id == group_id,
                c.ts_ms >= since_ms,
                c.lag.is_not(None),
                # one index range per series (a row-value IN is not used to seek by every dialect)
                *([or_(*(and_(c.topic == t, c.partition == p) for t, p in wanted))] if wanted else []),
            )
            .group_by(c.topic, c.partition, bucket)
            .order_by(c.topic, c.partition, bucket)
        )
        series: dict[tuple[str, int], list[tuple[int, int]]] = {}
        with self.engine.connect() as db:
            for topic, partition, ts, lag in db.execute(query):
                series.setdefault((topic, partition), []).append((ts, lag))
        return series

    def group_total_series(
        self, cluster: str, group_id: str, since_ms: int, step_ms: int = 1
    ) -> list[tuple[int, int]]:
        """[(ts_ms, total lag), ...] oldest first, one point per `step_ms` (the step's highest)."""
        c = group_status.c
        bucket = c.ts_ms // max(step_ms, 1)
        query = (
            select(func.max(c.ts_ms), func.max(c.total_lag))
            .where(c.cluster == cluster, c.group_id == group_id, c.ts_ms >= since_ms)
            .group_by(bucket)
            .order_by(bucket)
        )
        with self.engine.connect() as db:
            return [(ts, total or 0) for ts, total in db.execute(query)]

    def topic_rates(self, cluster: str, since_ms: int) -> dict[str, float]:
        """Records per second into each topic between its oldest and newest sample since `since_ms`."""
        query = (
            select(
                topic_size.c.topic,
                func.min(topic_size.c.ts_ms),
                func.max(topic_size.c.ts_ms),
                func.min(topic_size.c.end_offsets),
                func.max(topic_size.c.end_offsets),
            )
            .where(topic_size.c.cluster == cluster, topic_size.c.ts_ms >= since_ms)
            .group_by(topic_size.c.topic)
        )
        rates = {}
        with self.engine.connect() as db:
            for topic, first, last, low, high in db.execute(query):
                rates[topic] = (high - low) * 1000 / (last - first) if last > first else 0.0
        return rates

    # -- the action log -------------------------------------------------------------------------------

    def log_action(self, user: str, cluster: str, action: str, target: str, detail: str, result: str) -> int:
        with self.write_lock, self.engine.begin() as db:
            inserted = db.execute(
                insert(action_log).values(
                    ts_ms=int(time.time() * 1000),
                    user=user,
                    cluster=cluster,
                    action=action,
                    target=target,
                    detail=detail,
                    result=result,
                )
            )
            key = inserted.inserted_primary_key
            if key is None:  # only for statements that insert no row, which this one always does
                raise RuntimeError("the action log insert returned no row id")
            return int(key[0])

    def actions(self, limit: int = 200) -> list[Action]:
        query = select(action_log).order_by(action_log.c.id.desc()).limit(limit)
        with self.engine.connect() as db:
            return [Action(*row) for row in db.execute(query)]
