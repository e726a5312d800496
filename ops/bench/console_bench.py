"""The console's speed with many topics and groups: server-side time to render each page and API answer.

Three single-broker clusters (one ZooKeeper, a chroot each) get `--topics` topics of `--partitions`
partitions, a few records in every partition and `--groups` consumer groups committing offsets on four
topics each; dc1's groups also get an hour of history (a sample every 10 s). The console samples all three,
then every page and API path is asked `--rounds` times; the time from the request entering the application
to its answer (login, session and CSRF included) is measured in the application itself. Targets: pages
median < 200 ms, API median < 50 ms.

`--before REV` also measures the console as it was at git revision REV, against the same clusters in the
same run (its own process, its own history database filled the same way), first, so that the two are
compared under the same load.

    python ops/bench/console_bench.py [--topics 200 --partitions 8 --groups 50 --rounds 30] [--before REV]
        [--write]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The code measured: this tree, or (in the process measuring `--before`) the revision extracted for it.
sys.path.insert(0, os.environ.get("CONSOLE_BENCH_CODE", str(Path(__file__).resolve().parents[2])))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from local_cluster import START_TIMEOUT, stop_on_termination
from report import figures, publish, started

from backbone.client import AsyncAdmin, AsyncProducer, NewTopic, TopicPartition
from backbone.console.app import STATE, build_app
from backbone.console.auth import hash_password
from backbone.console.config import parse
from backbone.console.history import HistoryStore, LagRow
from backbone.coordination import ZooKeeperServer, find_free_port
from backbone.dev.processes import BrokerProcess
from backbone.protocol.errors import TopicAlreadyExistsError

ROOT = Path(__file__).resolve().parents[2]
CLUSTERS = ("dc1", "dc2", "aggregate")
PAGES = [
    "/",
    "/clusters/dc1",
    "/clusters/dc1/topics/topic-000",
    "/clusters/dc1/groups",
    "/clusters/dc1/groups/group-00",
    "/mirrors",
    "/actions",
]
APIS = [
    "/api/overview",
    "/api/clusters/dc1",
    "/api/clusters/dc1/topics/topic-000",
    "/api/clusters/dc1/groups",
    "/api/clusters/dc1/groups/group-00",
    "/api/mirrors",
    "/metrics",
]
# A group's page and API answer read its history once per sampling round; asking a different group each
# round measures that read (the rows above ask group-00 again and again).
EACH_GROUP_ONCE = "`/api/clusters/dc1/groups/group-NN`, a different group each time"


async def fill(bootstrap: str, topics: int, partitions: int, groups: int) -> None:
    names = [f"topic-{i:03d}" for i in range(topics)]
    async with AsyncAdmin(bootstrap_servers=bootstrap, default_api_timeout_ms=120_000) as admin:
        for start in range(0, topics, 20):
            batch = [NewTopic(n, partitions, 1) for n in names[start : start + 20]]
            try:
                await admin.create_topics(batch)
            except TopicAlreadyExistsError as error:  # a retry after a slow first answer: created then
                if not all(isinstance(e, TopicAlreadyExistsError) for e in error.errors.values()):
                    raise
        async with AsyncProducer(bootstrap_servers=bootstrap, linger_ms=20) as producer:
            sent = [
                await producer.send(n, b"x" * 100, partition=p)
                for n in names
                for p in range(partitions)
                for _ in range(3)
            ]
            await asyncio.gather(*sent)
        per_group = max(1, topics // max(groups, 1))
        for g in range(groups):
            mine = names[(g * per_group) % topics : (g * per_group) % topics + per_group]
            offsets = {TopicPartition(n, p): 1 for n in mine for p in range(partitions)}
            await admin.alter_consumer_group_offsets(f"group-{g:02d}", offsets)


def fill_history(store: HistoryStore, topics: int, partitions: int, groups: int) -> int:
    """An hour of 10-second samples of dc1's groups, as a console running for an hour would hold."""
    now = int(time.time() * 1000)
    per_group = max(1, topics // max(groups, 1))
    rows = 0
    for step in range(360):
        ts = now - (360 - step) * 10_000
        lags = [
            LagRow("dc1", f"group-{g:02d}", f"topic-{(g * per_group + t) % topics:03d}", p, 1, 3, 2)
            for g in range(groups)
            for t in range(per_group)
            for p in range(partitions)
        ]
        store.record(
            ts, lags, [("dc1", f"group-{g:02d}", "OK", 2 * per_group * partitions) for g in range(groups)], []
        )
        rows += len(lags)
    return rows


async def measure(args: argparse.Namespace, bootstraps: dict[str, str], directory: Path) -> dict:
    """{"timings": {path: [seconds, ...]}, "rounds": {cluster: seconds}, "history_rows": n}."""
    config = parse(
        {
            "sampling": {"interval": {"ms": 30_000}},
            "clusters": [
                {
                    "name": n,
                    "bootstrap": {"servers": b},
                    "role": "aggregate" if n == "aggregate" else "datacenter",
                }
                for n, b in bootstraps.items()
            ],
            "mirrors": [{"source": "dc1", "target": "aggregate"}, {"source": "dc2", "target": "aggregate"}],
            "users": [{"name": "bench", "role": "operator", "password": {"hash": hash_password("bench")}}],
        }
    )
    history = HistoryStore(f"sqlite:///{directory}/history.db")
    history_rows = await asyncio.to_thread(fill_history, history, args.topics, args.partitions, args.groups)
    app = build_app(config, history)
    timings: dict[str, list[float]] = {}

    @web.middleware
    async def timed(request: web.Request, handler):
        began = time.perf_counter()
        try:
            return await handler(request)
        finally:
            timings.setdefault(request.path, []).append(time.perf_counter() - began)

    app.middlewares.insert(0, timed)
    async with TestClient(TestServer(app)) as client:
        samplers = client.app[STATE].samplers
        deadline = time.monotonic() + 900

        def complete(snapshot) -> bool:  # every part read, not just the cluster reached
            return snapshot.taken_ms and not snapshot.error and not snapshot.notes and snapshot.groups

        while not all(complete(s.snapshot) for s in samplers.values()):
            if time.monotonic() > deadline:
                errors = [s.snapshot.error for s in samplers.values()]
                raise SystemExit(f"the console did not sample every cluster: {errors}")
            await asyncio.sleep(0.2)
        for sampler in samplers.values():  # a second round: the first also connects to every broker
            sampler.wake()
        first = {name: s.rounds for name, s in samplers.items()}
        while not all(s.rounds > first[name] for name, s in samplers.items()):
            await asyncio.sleep(0.2)
        rounds = {name: s.last_round_s for name, s in samplers.items()}
        page = await (await client.get("/login")).text()
        token = page.split('name="csrf_token" value="', 1)[1].split('"', 1)[0]
        await client.post("/login", data={"user": "bench", "password": "bench", "csrf_token": token})
        timings.clear()
        once = [f"/api/clusters/dc1/groups/group-{1 + i % (args.groups - 1):02d}" for i in range(args.rounds)]
        for round_number in range(args.rounds):
            for path in [*PAGES, *APIS, once[round_number]]:
                answer = await client.get(path)
                if answer.status != 200:
                    raise SystemExit(f"{path} answered {answer.status}: {(await answer.text())[:300]}")
                await answer.read()
        timings[EACH_GROUP_ONCE] = [t for path in set(once) for t in timings.pop(path)]
    return {"timings": timings, "rounds": rounds, "history_rows": history_rows}


def summary(times: list[float]) -> tuple[float, float]:
    """(median, 90th percentile) in milliseconds."""
    times = sorted(times)
    return statistics.median(times) * 1000, times[int(len(times) * 0.9) - 1] * 1000


def measure_revision(
    args: argparse.Namespace, revision: str, bootstraps: dict[str, str], directory: Path
) -> dict:
    """`measure` run by the code of git revision `revision`, in a process of its own."""
    code = directory / f"code-{revision}"
    code.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", revision, "backbone"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(code)], input=archive, check=True)
    work = directory / f"measure-{revision}"
    work.mkdir()
    child = [sys.executable, __file__, "--measure-only", json.dumps(bootstraps), str(work)]
    child += ["--rounds", str(args.rounds), "--topics", str(args.topics)]
    child += ["--partitions", str(args.partitions), "--groups", str(args.groups)]
    env = {**os.environ, "CONSOLE_BENCH_CODE": str(code), "PYTHONPATH": str(code)}
    found = subprocess.run(child, env=env, check=True, stdout=subprocess.PIPE, text=True)
    return json.loads(found.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--topics", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--groups", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--before", metavar="REV", help="also measure git revision REV, in the same run")
    parser.add_argument("--write", action="store_true", help="put the figures into docs/benchmarks.md")
    parser.add_argument("--measure-only", nargs=2, metavar=("BOOTSTRAPS", "DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure_only:  # the process measuring `--before`: clusters given, figures to stdout
        bootstraps, work = json.loads(args.measure_only[0]), Path(args.measure_only[1])
        print(json.dumps(asyncio.run(measure(args, bootstraps, work))))
        return 0
    stop_on_termination()
    when = started()
    with tempfile.TemporaryDirectory(prefix="console-bench-") as tmp:
        directory = Path(tmp)
        zookeeper = ZooKeeperServer(directory / "zk", find_free_port(), force_sync=False)
        zookeeper.start(timeout=START_TIMEOUT)
        brokers = []
        try:
            for name in CLUSTERS:
                broker = BrokerProcess(1, f"{zookeeper.connect_string}/{name}", directory / name)
                brokers.append(broker)
                broker.start(timeout=START_TIMEOUT)
            bootstraps = {name: b.bootstrap for name, b in zip(CLUSTERS, brokers, strict=True)}
            began = time.monotonic()
            for bootstrap in bootstraps.values():
                asyncio.run(fill(bootstrap, args.topics, args.partitions, args.groups))
            print(f"filled three clusters in {time.monotonic() - began:.0f} s", file=sys.stderr)
            before = measure_revision(args, args.before, bootstraps, directory) if args.before else None
            facts = asyncio.run(measure(args, bootstraps, directory))
        finally:
            for broker in brokers:
                broker.stop(timeout=30)
            zookeeper.stop()
    rows = []
    for path in [*PAGES, *APIS, EACH_GROUP_ONCE]:
        target = 50 if path.startswith(("/api/", "/metrics", "`/api/")) else 200
        median, p90 = summary(facts["timings"][path])
        row = [path if path == EACH_GROUP_ONCE else f"`{path}`"]
        if before is not None:
            row.append("{:.1f} ms / {:.1f} ms".format(*summary(before["timings"][path])))
        row += [
            f"{median:.1f} ms",
            f"{p90:.1f} ms",
            f"< {target} ms: {'met' if median < target else '**not met**'}",
        ]
        rows.append(row)
    header = ["path", "median", "p90", "target"]
    if before is not None:
        header[1:1] = [f"before ({args.before}): median / p90"]
    sampling = ", ".join(f"{name} {seconds:.2f} s" for name, seconds in facts["rounds"].items())
    about = (
        f"3 clusters of one broker, {args.topics} topics x {args.partitions} partitions and {args.groups} "
        f"groups each (every group on {max(1, args.topics // max(args.groups, 1))} topics); dc1's groups "
        f"with an hour of history ({facts['history_rows']:,} lag rows in SQLite). Server-side time per "
        f"request (median and 90th percentile of {args.rounds}), measured inside the application. One "
        f"sampling round (every request a page needs, to one cluster): {sampling}."
    )
    body = figures("console_bench.py", when, about, header, rows)
    publish("console", "## Web console", body, args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
