"""The local topology at a sustained rate: acks=all into dc1 and dc2 at once, and how long each record takes
to reach the aggregate through the mirrors.

    python ops/bench/topology_latency_bench.py [--rate 20000] [--seconds 60]

Starts the topology `ops/start` runs (`backbone dev up`'s own code, free ports, a temporary directory: 3
clusters of 3 brokers, `min.insync.replicas=2`, two mirrors, the audit counters), creates a topic of 3
partitions and 3 replicas in dc1 and dc2, and runs one producer process per datacenter at our producer's
defaults with acks=all, each paced at `--rate` records/s of 200 bytes for `--seconds`. Each value carries
its send time; a consumer on the aggregate reads both datacenters' records and measures send-to-aggregate
latency. Prints each producer's achieved rate and failures, the records that reached the aggregate, and the
latency percentiles. Everything is stopped at the end, also on failure; every wait is bounded.
"""

from __future__ import annotations

import argparse
import multiprocessing
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from local_cluster import stop_on_termination

from backbone.client import Admin, Consumer, NewTopic, Producer
from backbone.dev import topology

TOPIC = "paced"
PARTITIONS = 3
VALUE_SIZE = 200
SEND_TIME = struct.Struct(">q")  # time.time_ns() at send, first in each value
TICK_S = 0.01


def produce_paced(bootstrap: str, rate: int, seconds: float, results: multiprocessing.Queue) -> None:
    """`rate` records/s for `seconds`, sent in 10 ms ticks; puts (acknowledged, failed, seconds) on
    `results`."""
    padding = b"x" * (VALUE_SIZE - SEND_TIME.size)
    producer = Producer(bootstrap_servers=bootstrap, acks="all")
    futures = []
    started = time.monotonic()
    sent = 0
    try:
        while (elapsed := time.monotonic() - started) < seconds:
            due = int(elapsed * rate) - sent
            for _ in range(due):
                futures.append(producer.send(TOPIC, SEND_TIME.pack(time.time_ns()) + padding))
            sent += due
            time.sleep(TICK_S)
        producer.flush(timeout=120)
    finally:
        producer.close()
    failed = sum(1 for f in futures if f.exception() is not None)
    results.put((len(futures) - failed, failed, time.monotonic() - started))


def percentile(ordered: list[float], fraction: float) -> float:
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rate", type=int, default=20_000, help="records/s into each datacenter")
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args(argv)
    stop_on_termination()
    expected = 2 * int(args.rate * args.seconds)
    with tempfile.TemporaryDirectory(prefix="topology-latency-") as tmp:
        directory = Path(tmp) / "dev"
        progress = lambda line: print(line, file=sys.stderr)  # noqa: E731
        try:
            started = topology.up(directory, brokers=3, progress=progress, preferred_ports=False)
            clusters = {name: c["bootstrap"] for name, c in started.data["clusters"].items()}
            for dc in ("dc1", "dc2"):
                with Admin(bootstrap_servers=clusters[dc]) as admin:
                    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])
            consumer = Consumer(
                bootstrap_servers=clusters["aggregate"],
                group_id="latency-bench",
                auto_offset_reset="earliest",
                fetch_max_wait_ms=100,
                metadata_max_age_ms=1000,  # the mirrors make the topic in the aggregate
            )
            consumer.subscribe([TOPIC])
            results: multiprocessing.Queue = multiprocessing.Queue()
            producers = [
                multiprocessing.Process(
                    target=produce_paced, args=(clusters[dc], args.rate, args.seconds, results)
                )
                for dc in ("dc1", "dc2")
            ]
            for process in producers:
                process.start()
            latencies: list[float] = []
            deadline = time.monotonic() + args.seconds + 120
            try:
                while len(latencies) < expected and time.monotonic() < deadline:
                    for records in consumer.poll(timeout_ms=200).values():
                        now = time.time_ns()
                        latencies += [(now - SEND_TIME.unpack_from(r.value)[0]) / 1e6 for r in records]
            finally:
                consumer.close()
                for process in producers:
                    process.join(timeout=180)
            produced = [results.get(timeout=10) for _ in producers]
        finally:
            topology.down(directory, progress=progress)
    for dc, (acknowledged, failed, seconds) in zip(("dc1", "dc2"), produced, strict=True):
        print(
            f"{dc}: {acknowledged:,} acknowledged ({acknowledged / seconds:,.0f}/s over {seconds:.1f} s), "
            f"{failed} failed"
        )
    ordered = sorted(latencies)
    print(
        f"aggregate: {len(ordered):,} of {expected:,} records; send-to-aggregate latency "
        f"p50 {percentile(ordered, 0.5):,.0f} ms, p99 {percentile(ordered, 0.99):,.0f} ms, "
        f"max {ordered[-1] if ordered else float('nan'):,.0f} ms"
    )
    return 0 if len(ordered) >= expected and all(p[1] == 0 for p in produced) else 1


if __name__ == "__main__":
    sys.exit(main())
