"""What a broker's Prometheus metrics cost: the same workloads against a broker with `metrics.port` set and
one without, measured as paired rounds so that the shared machine's noise cancels out.

    python ops/bench/metrics_bench.py [--records 50000] [--rounds 40] [--write]

Two brokers of one ZooKeeper (separate chroots) run side by side, one partition each, 200-byte values.
Workloads: our producer with small requests (linger.ms=0, 16 KiB batches, acks=1: many requests, where a
per-request cost would show) and our consumer reading everything back. While one broker works the other
idles.

Each round runs each workload on both brokers back to back, in alternating order (on then off, then off
then on, ...), and keeps the ratio of the two rates: a load spike lasts longer than a round, so it slows
both halves of a pair alike, where in long rounds it hits one side and not the other. Many short rounds
give many pairs; the figure is the median of the paired ratios with its interquartile range, the median's
95% confidence interval and the share of rounds where metrics were slower. Prints the figures; `--write`
puts them into docs/benchmarks.md with the load average before and after.
"""

from __future__ import annotations

import argparse
import math
import os
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


WORKLOADS = (
    ("produce", "our producer, small requests (acks=1)"),
    ("consume", "our consumer"),
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=50_000, help="records per workload, broker and round")
    parser.add_argument("--rounds", type=int, default=40, help="paired rounds (each: both brokers)")
    parser.add_argument("--write", action="store_true", help="put the figures into docs/benchmarks.md")
    args = parser.parse_args(argv)
    stop_on_termination()
    when = report.started()
    rates: dict[tuple[str, bool], list[float]] = {}
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
                order = (True, False) if round_number % 2 == 0 else (False, True)
                for (workload, on), rate in run_round(brokers, order, f"bench-{round_number}", args.records):
                    rates.setdefault((workload, on), []).append(rate)
                print(f"round {round_number + 1} of {args.rounds} done", file=sys.stderr)
        finally:
            for broker in brokers.values():
                broker.stop(timeout=30)
            zookeeper.stop()
    after = f"{os.getloadavg()[0]:.1f}"
    rows = [
        summary_row(label, rates[(workload, False)], rates[(workload, True)]) for workload, label in WORKLOADS
    ]
    about = (
        f"{args.rounds} paired rounds of {args.records:,} records per workload and broker, the brokers of "
        f"a pair back to back in alternating order; load average {after} at the end. A ratio is the round's "
        "rate with metrics over its rate without (below 1: metrics slower). A cost shows as a median ratio "
        "below 1 whose 95% confidence interval stays below 1; an interval holding 1 bounds what the metrics "
        "can cost at its lower end."
    )
    header = [
        "workload",
        "rate off (median)",
        "rate on (median)",
        "on/off ratio: median (IQR)",
        "median's 95% CI",
        "rounds slower",
    ]
    body = report.figures("metrics_bench.py", when, about, header, rows)
    report.publish(NAME, SECTION, body, args.write)
    return 0


def run_round(
    brokers: dict[bool, BrokerProcess], order: tuple[bool, bool], topic: str, count: int
) -> list[tuple[tuple[str, bool], float]]:
    """Each workload on both brokers, one right after the other in `order`: ((workload, metrics on),
    records/s)."""
    for on in order:
        with Admin(bootstrap_servers=brokers[on].bootstrap) as admin:
            admin.create_topics([NewTopic(topic, 1, 1)])
    found = []
    for on in order:
        bootstrap = brokers[on].bootstrap
        rate = timed("produce", count, lambda b=bootstrap: small_request_producer(b, topic, count=count))
        found.append((("produce", on), rate))
    for on in order:
        bootstrap = brokers[on].bootstrap
        found.append(
            (("consume", on), timed("consume", count, lambda b=bootstrap: our_consumer(b, topic, count)))
        )
    return found


def summary_row(label: str, off: list[float], on: list[float]) -> list[str]:
    ratios = sorted(with_metrics / without for with_metrics, without in zip(on, off, strict=True))
    low, median, high = statistics.quantiles(ratios, n=4, method="inclusive")
    # The median's 95% confidence interval from order statistics (no assumption about the noise's shape):
    # ranks n/2 -+ 1.96 * sqrt(n)/2.
    reach = 0.98 * math.sqrt(len(ratios))
    ci_low = ratios[max(0, math.floor(len(ratios) / 2 - reach) - 1)]
    ci_high = ratios[min(len(ratios) - 1, math.ceil(len(ratios) / 2 + reach))]
    slower = sum(ratio < 1 for ratio in ratios)
    return [
        label,
        f"{statistics.median(off):,.0f}",
        f"{statistics.median(on):,.0f}",
        f"{median:.3f} ({low:.3f}-{high:.3f})",
        f"{ci_low:.3f}-{ci_high:.3f}",
        f"{slower} of {len(ratios)}",
    ]


if __name__ == "__main__":
    sys.exit(main())
