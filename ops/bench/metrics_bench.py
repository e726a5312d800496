"""What a broker's Prometheus metrics cost: the same workloads against a broker with `metrics.port` set and
one without, in alternating runs (on, off, on, off, ...), so the machine's drift hits both alike.

    python ops/bench/metrics_bench.py [--records 300000] [--rounds 4] [--write]

Two brokers of one ZooKeeper (separate chroots) run side by side, one partition each, 200-byte values.
Workloads: our producer with small requests (linger.ms=0, 16 KiB batches, acks=1: many requests, where a
per-request cost would show) and our consumer reading everything back. While one broker works the other
idles. Prints the medians and the difference; `--write` puts them into docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import report
from broker_bench import VALUE_SIZE, our_consumer, timed
from local_cluster import START_TIMEOUT, stop_on_termination

from backbone.client import Admin, NewTopic, Producer
from backbone.coordination import ZooKeeperServer, find_free_port
from backbone.dev.processes import BrokerProcess

NAME = "broker-metrics"
SECTION = "## Broker metrics: cost on the hot path"


def small_request_producer(bootstrap: str, topic: str, *, count: int) -> int:
    producer = Producer(bootstrap_servers=bootstrap, acks=1, linger_ms=0, batch_size=16_384)
    value = b"x" * VALUE_SIZE
    try:
        for _ in range(count):
            producer.send(topic, value, partition=0)
        producer.flush(timeout=120)
    finally:
        producer.close()
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--write", action="store_true", help="put the figures into docs/benchmarks.md")
    args = parser.parse_args(argv)
    stop_on_termination()
    when = report.started()
    results: dict[tuple[str, bool], list[float]] = {}
    count = args.records
    with tempfile.TemporaryDirectory(prefix="metrics-bench-") as tmp:
        zookeeper = ZooKeeperServer(Path(tmp) / "zk", find_free_port(), force_sync=False)
        zookeeper.start(timeout=START_TIMEOUT)
        brokers: dict[bool, BrokerProcess] = {}
        try:
            for on in (True, False):
                properties = {"metrics.port": find_free_port()} if on else {}
                chroot = "/metrics-on" if on else "/metrics-off"
                brokers[on] = BrokerProcess(
                    1, zookeeper.connect_string + chroot, Path(tmp) / chroot.strip("/"), properties=properties
                )
                brokers[on].start(timeout=START_TIMEOUT)
            for round_number in range(args.rounds):
                for on in (True, False) if round_number % 2 == 0 else (False, True):
                    bootstrap = brokers[on].bootstrap
                    topic = f"bench-{round_number}"
                    with Admin(bootstrap_servers=bootstrap) as admin:
                        admin.create_topics([NewTopic(topic, 1, 1)])
                    rate = timed(
                        "produce",
                        count,
                        lambda b=bootstrap, t=topic: small_request_producer(b, t, count=count),
                    )
                    results.setdefault(("produce", on), []).append(rate)
                    rate = timed("consume", count, lambda b=bootstrap, t=topic: our_consumer(b, t, count))
                    results.setdefault(("consume", on), []).append(rate)
                    print(f"round {round_number} metrics {'on' if on else 'off'}: done", file=sys.stderr)
        finally:
            for broker in brokers.values():
                broker.stop(timeout=30)
            zookeeper.stop()
    rows = []
    for workload, label in (
        ("produce", "our producer, small requests (acks=1)"),
        ("consume", "our consumer"),
    ):
        on = statistics.median(results[(workload, True)])
        off = statistics.median(results[(workload, False)])
        spread = {side: ", ".join(f"{r:,.0f}" for r in results[(workload, side)]) for side in (False, True)}
        rows.append(
            [
                label,
                f"{off:,.0f} ({spread[False]})",
                f"{on:,.0f} ({spread[True]})",
                f"{(on - off) / off * 100:+.1f}%",
            ]
        )
    about = (
        f"{args.rounds} alternating rounds of {args.records:,} records per workload and broker; medians in "
        "records/s, every run in brackets. On this shared machine a difference inside the runs' spread is "
        "noise, not a cost."
    )
    body = report.figures(
        "metrics_bench.py", when, about, ["workload", "metrics off", "metrics on", "difference"], rows
    )
    report.publish(NAME, SECTION, body, args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
