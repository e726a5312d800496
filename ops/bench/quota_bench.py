"""Client quotas against a greedy producer: is it held to its `producer_byte_rate`, and does a polite client
on the same broker keep its throughput?

    python ops/bench/quota_bench.py [--rate 1048576] [--span 120] [--pairs 16] [--seconds 8] [--write]

One broker with Kafka's default quota windows (11 of 1 s). Producers each in a process of their own, each as
fast as our producer goes (1000-byte values, acks=1, a partition each): a greedy one whose client id has
`producer_byte_rate` = `--rate`, a polite one without a quota, and for contrast a greedy one without a quota.

1. The greedy producer runs alone: after a 20 s warm-up (past the windows' first burst), its rate over
   `--span` seconds against its quota, and the CPU the broker and the greedy process use meanwhile (what
   a neighbour can lose to it at most, a figure the shared machine's noise does not blur). Kafka's
   windows hold a throttled client to its rate on average, in a sawtooth (when the window holding a burst
   expires, the client sends about a window-span's worth at once and is then throttled about as long), so
   the span covers many windows.
2. The polite producer runs while the greedy one is paused (SIGSTOP: alone) and running (beside) in turns
   of `--seconds`, `--pairs` pairs in alternating order, so that the shared machine's load changes fall on
   both halves of a pair alike. The figure is the median of the pairs' ratios (beside over alone).
3. The same pairs, half as many, beside the greedy producer without a quota: what the quota prevents.

Prints the figures; `--write` puts them into docs/benchmarks.md with the load average.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
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
WARMUP_S = 20.0
SETTLE_S = 1.0  # a turn's first second is left out of its rate (the other producer pausing or resuming)


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


def cpu_seconds(pid: int) -> float:
    """CPU time (user and system) a process has used so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pairs(bootstrap: str, greedy: Producing, count: int, seconds: float) -> list[float]:
    """The polite producer runs throughout; `greedy` is paused and running in turns of `seconds`, in
    alternating order: each pair's ratio of the polite rate beside it over the rate alone."""
    polite = Producing(bootstrap, POLITE, POLITE, 24 * 3600.0)
    ratios = []
    try:
        time.sleep(SETTLE_S)  # the polite process starting
        for number in range(count):
            rates = {}
            for running in (False, True) if number % 2 == 0 else (True, False):
                os.kill(greedy.process.pid, signal.SIGCONT if running else signal.SIGSTOP)
                start = time.monotonic()
                time.sleep(seconds)
                rates[running] = polite.rate(start + SETTLE_S, time.monotonic())
            ratios.append(rates[True] / rates[False])
            print(f"pair {number + 1}: {rates[False]:,.0f} alone, {rates[True]:,.0f} beside", file=sys.stderr)
    finally:
        os.kill(greedy.process.pid, signal.SIGCONT)
        polite.stop()
    return ratios


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
        "--span", type=float, default=120.0, help="seconds the greedy producer's rate is measured"
    )
    parser.add_argument("--pairs", type=int, default=16, help="pairs of turns beside the throttled one")
    parser.add_argument("--seconds", type=float, default=8.0, help="length of each turn")
    parser.add_argument("--write", action="store_true", help="put the figures into docs/benchmarks.md")
    args = parser.parse_args(argv)
    stop_on_termination()
    when = report.started()
    forever = 24 * 3600.0  # the greedy producers run until stopped
    with tempfile.TemporaryDirectory(prefix="quota-bench-") as tmp:
        zookeeper = ZooKeeperServer(Path(tmp) / "zk", find_free_port(), force_sync=False)
        zookeeper.start(timeout=START_TIMEOUT)
        broker = BrokerProcess(1, zookeeper.connect_string + CHROOT, Path(tmp) / "broker")
        greedy: Producing | None = None
        try:
            # Set before the broker starts, which reads every quota entity at start.
            with ClusterStore(zookeeper.connect_string + CHROOT) as store:
                store.alter_client_quota(((CLIENT_ID, GREEDY),), {"producer_byte_rate": float(args.rate)})
            broker.start(timeout=START_TIMEOUT)
            bootstrap = broker.bootstrap
            with Admin(bootstrap_servers=bootstrap) as admin:
                admin.create_topics([NewTopic(topic, 1, 1) for topic in (POLITE, GREEDY, FREE)])
            greedy = Producing(bootstrap, GREEDY, GREEDY, forever)
            time.sleep(WARMUP_S)
            start = time.monotonic()
            broker_cpu, greedy_cpu = cpu_seconds(broker.process.pid), cpu_seconds(greedy.process.pid)
            time.sleep(args.span)
            broker_cpu = (cpu_seconds(broker.process.pid) - broker_cpu) / args.span
            greedy_cpu = (cpu_seconds(greedy.process.pid) - greedy_cpu) / args.span
            greedy_rate = greedy.rate(start, time.monotonic())
            throttled = pairs(bootstrap, greedy, args.pairs, args.seconds)
            greedy.stop()
            greedy = Producing(bootstrap, FREE, FREE, forever)
            unquoted = pairs(bootstrap, greedy, max(args.pairs // 2, 1), args.seconds)
        finally:
            if greedy is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(greedy.process.pid, signal.SIGCONT)
                greedy.stop()
            broker.stop(timeout=30)
            zookeeper.stop()
    after = f"{os.getloadavg()[0]:.1f}"
    rows = [
        [
            f"greedy producer, quota {args.rate:,} B/s, alone",
            f"{greedy_rate:,.0f} B/s over {args.span:g} s",
            f"{greedy_rate / args.rate:.3f} of its quota",
        ],
        [
            "CPU the throttled greedy producer costs meanwhile",
            f"broker {broker_cpu:.1%} of a core",
            f"its own process {greedy_cpu:.1%} of a core",
        ],
    ]
    for label, ratios in (
        ("throttled greedy producer", throttled),
        ("greedy producer without a quota", unquoted),
    ):
        low, median, high = (
            statistics.quantiles(ratios, n=4, method="inclusive") if len(ratios) > 1 else [ratios[0]] * 3
        )
        rows.append(
            [
                f"polite producer beside the {label}",
                f"{median:.3f} of its rate alone (IQR {low:.3f}-{high:.3f})",
                f"pairs: {', '.join(f'{r:.2f}' for r in ratios)}",
            ]
        )
    about = (
        f"Greedy producer measured over {args.span:g} s after a {WARMUP_S:g} s warm-up; {args.pairs} pairs "
        f"of {args.seconds:g} s turns of the polite producer beside it and alone (the greedy process "
        f"paused), {max(args.pairs // 2, 1)} pairs beside a greedy producer without a quota; load average "
        f"{after} at the end. Rates are acknowledged value bytes per second (the quota counts whole Produce "
        "requests, a little more than their values)."
    )
    body = report.figures("quota_bench.py", when, about, ["who", "figure", "detail"], rows)
    report.publish(NAME, SECTION, body, args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
