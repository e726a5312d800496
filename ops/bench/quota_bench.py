"""Client quotas against a greedy producer: is it held to its `producer_byte_rate`, and does a polite client
on the same broker keep its throughput?

    python ops/bench/quota_bench.py [--rate 1048576] [--runs 12] [--seconds 10] [--warmup 20] [--write]

One broker with Kafka's default quota windows (11 of 1 s). Producers each in a process of their own, each as
fast as our producer goes (1000-byte values, acks=1, a partition each): a greedy one whose client id has
`producer_byte_rate` = `--rate`, a polite one without a quota, and for contrast a greedy one without a
quota. In order: half the polite runs alone; all of them beside the throttled greedy producer (started
`--warmup` seconds earlier, past the windows' first burst); the other half alone; half beside the unquoted
greedy producer. The alone runs come before and after, so the shared machine's drift falls on both sides.

Kafka's windows hold a throttled client to its rate on average, in a sawtooth: when the window holding a
burst expires, the client sends about one window-span's worth at once and is then throttled for about as
long. The greedy producer's rate is therefore measured over many windows (the span of all the polite runs
beside it), where one sawtooth more or less matters little.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import report
from local_cluster import START_TIMEOUT, stop_on_termination

from backbone.client import Admin, NewTopic, Producer
from backbone.coordination import ClusterStore, ZooKeeperServer, find_free_port
from backbone.coordination.quotas import CLIENT_ID
from backbone.dev.processes import BrokerProcess

NAME = "client-quotas"
SECTION = "## Client quotas"
VALUE_SIZE = 1000
FLUSH_BYTES = 128 * 1024  # a progress line per this much acknowledged (the greedy one's is a fraction of a s)
GREEDY, FREE, POLITE = "greedy", "greedy-unquoted", "polite"
CHROOT = "/quota-bench"


def produce(bootstrap: str, client_id: str, topic: str, seconds: float) -> None:
    """Produce as fast as acknowledgements come for `seconds`, printing `elapsed_s acknowledged_bytes` each
    FLUSH_BYTES (the child process's side)."""
    producer = Producer(
        bootstrap_servers=bootstrap, acks=1, linger_ms=5, batch_size=256 * 1024, client_id=client_id
    )
    value = b"x" * VALUE_SIZE
    acknowledged = pending = 0
    started = time.monotonic()
    try:
        while (elapsed := time.monotonic() - started) < seconds:
            producer.send(topic, value, partition=0)
            pending += VALUE_SIZE
            if pending >= FLUSH_BYTES:
                producer.flush(timeout=120)
                acknowledged += pending
                pending = 0
                print(f"{time.monotonic() - started:.4f} {acknowledged}", flush=True)
    finally:
        producer.close()
    del elapsed


class Producing:
    """A producer process and the (time, acknowledged bytes) points it reports, on the bench's clock."""

    def __init__(self, bootstrap: str, client_id: str, topic: str, seconds: float) -> None:
        self.points: list[tuple[float, int]] = []
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            [sys.executable, __file__, "produce", bootstrap, client_id, topic, str(seconds)],
            stdout=subprocess.PIPE,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            elapsed, acknowledged = line.split()
            self.points.append((self.started + float(elapsed), int(acknowledged)))

    def wait(self) -> None:
        if self.process.wait(timeout=300) != 0:
            raise RuntimeError(f"a producer process failed with exit status {self.process.returncode}")
        self._reader.join(timeout=10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)

    def rate(self, start: float, end: float) -> float:
        """Bytes/s acknowledged between two moments (from the reports nearest inside them)."""
        inside = [(t, b) for t, b in self.points if start <= t <= end]
        if len(inside) < 2:
            raise RuntimeError("too few progress reports to measure a rate; run longer")
        (t0, b0), (t1, b1) = inside[0], inside[-1]
        return (b1 - b0) / (t1 - t0)


def polite_runs(bootstrap: str, count: int, seconds: float) -> list[float]:
    """The polite producer's rate in each of `count` runs of `seconds`, back to back."""
    rates = []
    for _ in range(count):
        polite = Producing(bootstrap, POLITE, POLITE, seconds)
        try:
            polite.wait()
        finally:
            polite.stop()
        rates.append(polite.rate(polite.started, time.monotonic()))
    return rates


def beside(
    bootstrap: str, client_id: str, lead: float, count: int, seconds: float
) -> tuple[list[float], float]:
    """Polite runs while a greedy producer with `client_id` runs (started `lead` seconds before), and the
    greedy one's rate over the span of those runs."""
    greedy = Producing(bootstrap, client_id, client_id, lead + count * seconds + 60)
    try:
        time.sleep(lead)
        start = time.monotonic()
        polite = polite_runs(bootstrap, count, seconds)
        return polite, greedy.rate(start, time.monotonic())
    finally:
        greedy.stop()


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "produce":
        bootstrap, client_id, topic, seconds = sys.argv[2:6]
        produce(bootstrap, client_id, topic, float(seconds))
        return 0
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--rate", type=int, default=1_048_576, help="the greedy producer's producer_byte_rate"
    )
    parser.add_argument(
        "--runs", type=int, default=12, help="polite runs beside the throttled greedy producer"
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each polite run")
    parser.add_argument(
        "--warmup",
        type=float,
        default=20.0,
        help="seconds the throttled greedy producer runs before measuring",
    )
    parser.add_argument("--write", action="store_true", help="put the figures into docs/benchmarks.md")
    args = parser.parse_args(argv)
    stop_on_termination()
    when = report.started()
    half = max(args.runs // 2, 1)
    with tempfile.TemporaryDirectory(prefix="quota-bench-") as tmp:
        zookeeper = ZooKeeperServer(Path(tmp) / "zk", find_free_port(), force_sync=False)
        zookeeper.start(timeout=START_TIMEOUT)
        broker = BrokerProcess(1, zookeeper.connect_string + CHROOT, Path(tmp) / "broker")
        try:
            # Set before the broker starts, which reads every quota entity at start.
            with ClusterStore(zookeeper.connect_string + CHROOT) as store:
                store.alter_client_quota(((CLIENT_ID, GREEDY),), {"producer_byte_rate": float(args.rate)})
            broker.start(timeout=START_TIMEOUT)
            bootstrap = broker.bootstrap
            with Admin(bootstrap_servers=bootstrap) as admin:
                admin.create_topics([NewTopic(topic, 1, 1) for topic in (POLITE, GREEDY, FREE)])
            alone = polite_runs(bootstrap, half, args.seconds)
            throttled, greedy_rate = beside(bootstrap, GREEDY, args.warmup, args.runs, args.seconds)
            alone += polite_runs(bootstrap, args.runs - half, args.seconds)
            unquoted, free_rate = beside(bootstrap, FREE, 2.0, half, args.seconds)
        finally:
            broker.stop(timeout=30)
            zookeeper.stop()
    after = f"{os.getloadavg()[0]:.1f}"
    alone_median = statistics.median(alone)
    rows = [
        [
            f"greedy producer, quota {args.rate:,} B/s",
            f"{greedy_rate:,.0f} B/s",
            f"{greedy_rate / args.rate:.3f} of its quota",
        ],
        ["greedy producer, no quota (for contrast)", f"{free_rate:,.0f} B/s", "-"],
        ["polite producer alone", f"{alone_median:,.0f} B/s", f"runs: {listed(alone, alone_median)}"],
    ]
    for label, rates in (
        ("beside the throttled greedy one", throttled),
        ("beside the unquoted one", unquoted),
    ):
        median = statistics.median(rates)
        rows.append(
            [
                f"polite producer {label}",
                f"{median:,.0f} B/s",
                f"{median / alone_median:.3f} of its rate alone; runs: {listed(rates, alone_median)}",
            ]
        )
    about = (
        f"Polite runs of {args.seconds:g} s: {half} alone, {args.runs} beside the throttled greedy "
        f"producer (measured after a {args.warmup:g} s warm-up, over the {args.runs * args.seconds:g} s of "
        f"those runs), {args.runs - half} alone again, {half} beside a greedy producer without a quota; "
        f"load average {after} "
        "at the end. Rates are acknowledged value bytes per second (the quota counts whole Produce requests, "
        "a little more than their values); a polite run's figure in the last column is its rate over the "
        "median alone."
    )
    body = report.figures("quota_bench.py", when, about, ["who", "rate (median)", "against"], rows)
    report.publish(NAME, SECTION, body, args.write)
    return 0


def listed(values: list[float], unit: float) -> str:
    return ", ".join(f"{value / unit:.2f}" for value in values)


if __name__ == "__main__":
    sys.exit(main())
