"""A consumer of many partitions of which one is busy, with fetch sessions (KIP-227) and without.

    python ops/bench/fetch_session_bench.py [--partitions 200] [--rate 2000] [--seconds 15] [--rounds 3]
        [--write]

Two brokers of this checkout, each alone in its cluster: one at the defaults (fetch sessions on), one with
`max.incremental.fetch.session.cache.slots=0` (every fetch full, as before sessions). In every round, on each
broker in turn: a topic of `--partitions` partitions, our consumer assigned all of them at their end, and our
producer writing `--rate` records/s of 200 bytes (one record a send, at its defaults) into partition 0 only,
for `--seconds`. Measured over that window: the broker's CPU (/proc), the Fetch requests it answered (its
metrics), and the records the consumer read. Prints each run and the medians; `--write` puts them into
docs/benchmarks.md. Everything is stopped at the end, also on failure; every wait is bounded.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

import report
from local_cluster import START_TIMEOUT, stop_on_termination

from backbone.client import Admin, Consumer, NewTopic, Producer, TopicPartition
from backbone.coordination import ZooKeeperServer, find_free_port
from backbone.dev.processes import BrokerProcess

NAME = "fetch-sessions"
SECTION = "## Fetch sessions: a consumer of many partitions, few of them busy"
SETUPS = {"sessions": {}, "no sessions": {"max.incremental.fetch.session.cache.slots": 0}}
VALUE = b"x" * 200


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fetches_answered(metrics_port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("backbone_broker_requests_total{") and 'api="fetch"' in line
    )


def spread(values: list[float], form: str) -> str:
    """The median, then every run in brackets."""
    return f"{form.format(statistics.median(values))} ({', '.join(form.format(v) for v in values)})"


def one_run(broker: BrokerProcess, metrics_port: int, topic: str, args: argparse.Namespace) -> dict:
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        admin.create_topics([NewTopic(topic, args.partitions, 1)])
    partitions = [TopicPartition(topic, p) for p in range(args.partitions)]
    with (
        Producer(bootstrap_servers=broker.bootstrap) as producer,
        Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="latest") as consumer,
    ):
        consumer.assign(partitions)
        for partition in partitions:
            consumer.position(partition)  # every position known before the clock starts
        read = 0
        cpu0, fetches0, start = cpu_seconds(broker.pid or 0), fetches_answered(metrics_port), time.monotonic()
        sent = 0
        while (elapsed := time.monotonic() - start) < args.seconds:
            while sent < elapsed * args.rate:
                producer.send(topic, VALUE, partition=0)
                sent += 1
            read += sum(len(r) for r in consumer.poll(timeout_ms=5).values())
        producer.flush(30)
        deadline = time.monotonic() + 30
        while read < sent and time.monotonic() < deadline:
            read += sum(len(r) for r in consumer.poll(timeout_ms=100).values())
        window = time.monotonic() - start
        cpu = cpu_seconds(broker.pid or 0) - cpu0
        fetches = fetches_answered(metrics_port) - fetches0
    return {
        "sent": sent,
        "read": read,
        "cpu_share": cpu / window,
        "fetches": fetches,
        "us_per_fetch": cpu / fetches * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--partitions", type=int, default=200)
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--write", action="store_true", help="write the figures into docs/benchmarks.md")
    args = parser.parse_args()
    stop_on_termination()
    when = report.started()
    runs: dict[str, list[dict]] = {name: [] for name in SETUPS}
    with tempfile.TemporaryDirectory() as directory, contextlib.ExitStack() as stack:
        work = Path(directory)
        zookeeper = ZooKeeperServer(work / "zk", find_free_port(), force_sync=False)
        zookeeper.start(timeout=START_TIMEOUT)
        stack.callback(zookeeper.stop)
        brokers = {}
        for name, overrides in SETUPS.items():
            port = find_free_port()
            chroot = "/" + name.replace(" ", "-")
            properties = {"metrics.port": port, "offsets.topic.replication.factor": 1, **overrides}
            broker = BrokerProcess(
                1, zookeeper.connect_string + chroot, work / chroot[1:], properties=properties
            )
            stack.callback(broker.stop, timeout=30)
            broker.start(timeout=START_TIMEOUT)
            brokers[name] = (broker, port)
        for round_ in range(args.rounds):
            for name, (broker, port) in brokers.items():
                run = one_run(broker, port, f"many-{round_}", args)
                runs[name].append(run)
                print(
                    f"round {round_ + 1} {name:11s}: broker {run['cpu_share']:.0%} of a core, "
                    f"{run['fetches']:.0f} fetches, {run['us_per_fetch']:.0f} µs a fetch, "
                    f"{run['read']:,} of {run['sent']:,} records read",
                    flush=True,
                )
    rows = [
        [
            name,
            spread([r["cpu_share"] for r in done], "{:.0%}"),
            f"{statistics.median(r['fetches'] for r in done):,.0f}",
            spread([r["us_per_fetch"] for r in done], "{:,.0f}"),
            f"{sum(r['read'] for r in done):,} of {sum(r['sent'] for r in done):,}",
        ]
        for name, done in runs.items()
    ]
    about = (
        f"One broker per setup, a topic of {args.partitions} partitions, our consumer assigned all of them, "
        f"our producer writing {args.rate:,} records/s of 200 bytes into one of them for {args.seconds:g} s; "
        f"medians of {args.rounds} rounds (all runs in brackets), the two brokers taking turns. Without "
        "sessions every Fetch names every partition and is answered for every partition; in a session it "
        "names the partitions that moved and is answered only those with news."
    )
    header = ["fetches", "broker's share of a core", "Fetches", "broker CPU µs per Fetch", "records read"]
    report.publish(
        NAME, SECTION, report.figures("fetch_session_bench.py", when, about, header, rows), args.write
    )


if __name__ == "__main__":
    main()
