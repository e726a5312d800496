"""The console's history store on a SQLite file and on a real PostgreSQL server (Debian's `postgresql`,
started here with initdb and pg_ctl on a free port in a temporary directory, as the postgres user)."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from backbone.console.history import DAY_MS, HistoryStore, LagRow, TopicRow
from backbone.console.lag_history import CHART_POINTS, GroupHistoryCache
from backbone.console.snapshot import GroupState, PartitionLagState
from backbone.coordination import find_free_port

pytestmark = pytest.mark.integration


def postgres_bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if not found:
        pytest.fail("PostgreSQL is not installed: ops/setup installs Debian's postgresql package")
    return Path(found[-1]).parent


def as_postgres(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["runuser", "-u", "postgres", "--", *command], capture_output=True, text=True, timeout=120, check=True
    )


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    """A PostgreSQL server of its own; yields its SQLAlchemy URL. initdb and pg_ctl refuse root."""
    binaries = postgres_bin()
    # Not under pytest's own temporary directory: that one is private to root, and initdb runs as postgres.
    home = Path(tempfile.mkdtemp(prefix="backbone-console-pg-"))
    data = home / "data"
    account = pwd.getpwnam("postgres")
    os.chown(home, account.pw_uid, account.pw_gid)
    port = find_free_port("127.0.0.1")
    as_postgres(str(binaries / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync")
    options = f"-p {port} -k {home} -c listen_addresses=127.0.0.1 -c fsync=off"
    as_postgres(
        str(binaries / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(home / "log"), "-w", "start"
    )
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [
                "runuser",
                "-u",
                "postgres",
                "--",
                str(binaries / "pg_ctl"),
                "-D",
                str(data),
                "-m",
                "fast",
                "-w",
                "stop",
            ],
            capture_output=True,
            timeout=120,
            check=False,
        )
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgresql"])
def history_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/history.db"
        return
    url = request.getfixturevalue("postgres")
    yield url
    store = HistoryStore(url)  # the next test starts from empty tables
    from backbone.console.history import metadata

    metadata.drop_all(store.engine)
    store.close()


def test_history_records_reads_and_thins_old_samples(history_url: str) -> None:
    store = HistoryStore(history_url)
    now = 10 * DAY_MS
    old = now - 2 * DAY_MS
    for i in range(60):  # ten-second samples two days ago: one per five minutes survives
        ts = old + i * 10_000
        store.record(
            ts,
            [LagRow("dc1", "g", "t", 0, 10, 10 + i, i)],
            [("dc1", "g", "OK", i)],
            [TopicRow("dc1", "t", 1, i)],
        )
    for i in range(3):
        ts = now - 30_000 + i * 10_000
        store.record(
            ts,
            [LagRow("dc1", "g", "t", 0, 10, 50, 40 + i)],
            [("dc1", "g", "WARN", 40 + i)],
            [TopicRow("dc1", "t", 1, 100 + 10 * i)],
        )
    assert store.group_lag_series("dc1", "g", now - DAY_MS) == {
        ("t", 0): [(now - 30_000, 40), (now - 20_000, 41), (now - 10_000, 42)]
    }
    assert store.topic_rates("dc1", now - DAY_MS) == {"t": pytest.approx(1.0)}
    removed = store.compact(now)
    buckets = len({(old + i * 10_000) // 300_000 for i in range(60)})
    assert removed == 3 * (60 - buckets)
    assert len(store.group_total_series("dc1", "g", 0)) == buckets + 3
    assert store.compact(now + 30 * DAY_MS) == 3 * (buckets + 3)  # past retention: all gone
    store.log_action("alice", "dc1", "create topic", "t", "3 partitions", "ok: done")
    (action,) = store.actions()
    assert (action.user, action.action, action.result) == ("alice", "create topic", "ok: done")
    store.close()


def test_a_chart_reads_one_point_per_step_of_only_the_partitions_it_shows(history_url: str) -> None:
    store = HistoryStore(history_url)
    for i in range(20):  # a sample a second; lag rises on t/0, falls on t/1, peaks once on u/0
        store.record(
            1000 * i,
            [
                LagRow("dc1", "g", "t", 0, 0, i, i),
                LagRow("dc1", "g", "t", 1, 0, 100, 100 - i),
                LagRow("dc1", "g", "u", 0, 0, 50, 50 if i == 7 else 1),
            ],
            [("dc1", "g", "OK", 100 + i)],
            [],
        )
    series = store.group_lag_series("dc1", "g", 0, {("t", 1), ("u", 0)}, step_ms=5000)
    # each step's highest lag, at the time of the step's last sample: a peak between samples survives
    assert series == {
        ("t", 1): [(4000, 100), (9000, 95), (14000, 90), (19000, 85)],
        ("u", 0): [(4000, 1), (9000, 50), (14000, 1), (19000, 1)],
    }
    assert store.group_lag_series("dc1", "g", 10_000, {("t", 0)}, step_ms=5000) == {
        ("t", 0): [(14000, 14), (19000, 19)]
    }
    assert store.group_lag_series("dc1", "g", 0, set(), step_ms=5000) == {}
    assert store.group_total_series("dc1", "g", 0, step_ms=10_000) == [(9000, 109), (19000, 119)]
    assert len(store.group_lag_series("dc1", "g", 0)[("t", 0)]) == 20  # step 1 ms: every sample
    store.close()


def test_a_database_of_an_earlier_version_gets_the_indexes_of_this_one(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "history.db"
    HistoryStore(f"sqlite:///{path}").close()
    with sqlite3.connect(path) as db:  # as the earlier version made it
        db.execute("DROP INDEX ix_partition_lag_series")
        db.execute("CREATE INDEX ix_partition_lag_group ON partition_lag (cluster, group_id, ts_ms)")
    HistoryStore(f"sqlite:///{path}").close()
    with sqlite3.connect(path) as db:
        indexes = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        plan = " ".join(
            str(row)
            for row in db.execute(
                "EXPLAIN QUERY PLAN SELECT ts_ms, lag FROM partition_lag WHERE cluster = 'dc1' AND "
                "group_id = 'g' AND topic = 't' AND partition = 0 AND ts_ms >= 0"
            )
        )
    assert "ix_partition_lag_series" in indexes and "ix_partition_lag_group" not in indexes
    assert (
        "ix_partition_lag_series (cluster=? AND group_id=? AND topic=? AND partition=? AND ts_ms>?)" in plan
    )


async def test_a_groups_history_is_read_once_per_sampling_round(history_url: str) -> None:
    store = HistoryStore(history_url)
    cache = GroupHistoryCache()
    span = CHART_POINTS  # a range of one millisecond per point: every sample is a point
    group = GroupState("g", "Empty", "", [], [PartitionLagState("t", 0, 0, 5, 5, None)])
    store.record(1000, [LagRow("dc1", "g", "t", 0, 0, 5, 5)], [("dc1", "g", "OK", 5)], [])
    first = await cache.read(store, group, "dc1", 1, "1h", span, 0)
    assert first == ([("total lag", [(1000, 5)])], [("t/0", [(1000, 5)])])
    store.record(2000, [LagRow("dc1", "g", "t", 0, 0, 9, 9)], [("dc1", "g", "OK", 9)], [])
    assert await cache.read(store, group, "dc1", 1, "1h", span, 0) == first  # the same round
    # ... whose points leave as the range moves past them
    assert await cache.read(store, group, "dc1", 1, "1h", span, 1500) == (
        [("total lag", [])],
        [("t/0", [])],
    )
    after = await cache.read(store, group, "dc1", 2, "1h", span, 0)  # the next round reads again
    assert after == ([("total lag", [(1000, 5), (2000, 9)])], [("t/0", [(1000, 5), (2000, 9)])])
    store.close()
