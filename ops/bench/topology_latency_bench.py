"""The local topology at a sustained rate: acks=all into dc1 and dc2 at once, and how long each record takes
to reach the aggregate through the mirrors.

    python ops/bench/topology_latency_bench.py [--rate 20000] [--seconds 60] [--cold] [--timeline]

Run it from the checkout to measure: the topology's processes import `backbone` from the working directory.
Starts the topology `ops/start` runs (`backbone dev up`'s own code, free ports, a temporary directory: 3
clusters of 3 brokers, `min.insync.replicas=2`, two mirrors, the audit counters), creates a topic of 3
partitions and 3 replicas in dc1 and dc2, and runs one producer process per datacenter at our producer's
defaults with acks=all, each paced at `--rate` records/s of 200 bytes for `--seconds`. Each value carries
its send time; a consumer on the aggregate reads both datacenters' records and measures send-to-aggregate
latency. Prints each producer's achieved rate and failures, the records that reached the aggregate, and the
latency percentiles. Everything is stopped at the end, also on failure; every wait is bounded.

The paced run starts once the new topic flows: a first record into each partition of each datacenter has
reached the aggregate, so the mirrors have found the topic (they look for new ones every few seconds),
made it in the aggregate, and the consumer has its partitions. How long that took is printed on its own.
`--cold` starts the paced producers as soon as the topic is created, so the first seconds' records also
wait for that discovery. `--timeline` prints the latency by second of sending, per datacenter. `--source`
also measures, with a consumer process per datacenter, how long each record takes to be readable there
(acknowledged by the in-sync replicas, below the high watermark): the first leg of the path.
"""

from __future__ import annotations

import argparse
import multiprocessing
import struct
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from local_cluster import stop_on_termination

from backbone.client import Admin, Consumer, NewTopic, Producer, TopicPartition
from backbone.dev import topology

TOPIC = "paced"
PARTITIONS = 3
VALUE_SIZE = 200
DATACENTERS = ("dc1", "dc2")
# First in each value: time.time_ns() at send, the datacenter's index, and 1 for a warm-up record.
STAMP = struct.Struct(">qBB")
TICK_S = 0.01
WARM_UP_TIMEOUT_S = 120.0


def value(datacenter: int, warm_up: bool = False) -> bytes:
    return STAMP.pack(time.time_ns(), datacenter, warm_up) + b"x" * (VALUE_SIZE - STAMP.size)


def produce_paced(
    bootstrap: str, datacenter: int, rate: int, seconds: float, results: multiprocessing.Queue
) -> None:
    """`rate` records/s for `seconds` (exactly rate x seconds records), sent in 10 ms ticks; puts
    (acknowledged, failed, seconds) on `results`."""
    padding = b"x" * (VALUE_SIZE - STAMP.size)
    producer = Producer(bootstrap_servers=bootstrap, acks="all")
    futures = []
    total = int(rate * seconds)
    started = time.monotonic()
    sent = 0
    try:
        while sent < total:
            due = min(int((time.monotonic() - started) * rate), total) - sent
            for _ in range(due):
                futures.append(producer.send(TOPIC, STAMP.pack(time.time_ns(), datacenter, 0) + padding))
            sent += due
            time.sleep(TICK_S)
        producer.flush(timeout=120)
    finally:
        producer.close()
    failed = sum(1 for f in futures if f.exception() is not None)
    results.put((len(futures) - failed, failed, time.monotonic() - started))


def watch_source(
    bootstrap: str, datacenter: int, expected: int, seconds: float, results: multiprocessing.Queue
) -> None:
    """Read the datacenter's paced records where they are produced; puts (datacenter, sorted send-to-readable
    latencies in ms, the largest by second of sending) on `results`."""
    consumer = Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100)
    consumer.assign([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
    latencies: list[float] = []
    worst: dict[int, float] = {}
    started = None
    deadline = time.monotonic() + seconds + 120
    try:
        while len(latencies) < expected and time.monotonic() < deadline:
            polled = consumer.poll(timeout_ms=200)
            now = time.time_ns()
            for records in polled.values():
                for record in records:
                    sent, _, warm_up = STAMP.unpack_from(record.value)
                    if warm_up:
                        continue
                    started = sent if started is None else started
                    latency = (now - sent) / 1e6
                    latencies.append(latency)
                    second = (sent - started) // 1_000_000_000
                    worst[second] = max(worst.get(second, 0.0), latency)
    finally:
        consumer.close()
    results.put((datacenter, sorted(latencies), worst))


def percentile(ordered: list[float], fraction: float) -> float:
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else float("nan")


class Arrivals:
    """Send-to-aggregate latencies as the consumer sees them, by datacenter and second of sending."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.warm_up: set[tuple[int, int]] = set()  # (datacenter, partition) whose warm-up record arrived
        self.by_second: dict[tuple[int, int], list[float]] = defaultdict(list)
        self.start_ns = 0  # when the paced run began

    def take(self, polled: dict) -> None:
        now = time.time_ns()
        for tp, records in polled.items():
            for record in records:
                sent, datacenter, warm_up = STAMP.unpack_from(record.value)
                if warm_up:
                    self.warm_up.add((datacenter, tp.partition))
                    continue
                latency = (now - sent) / 1e6
                self.latencies.append(latency)
                self.by_second[(datacenter, (sent - self.start_ns) // 1_000_000_000)].append(latency)

    def timeline(self) -> list[str]:
        seconds = sorted({second for _, second in self.by_second})
        lines = []
        for second in seconds:
            cells = []
            for index, dc in enumerate(DATACENTERS):
                ordered = sorted(self.by_second.get((index, second), []))
                count = len(ordered)
                ordered = ordered or [float("nan")]
                cells.append(
                    f"{dc} {count:6,} p50 {percentile(ordered, 0.5):7,.0f} "
                    f"p99 {percentile(ordered, 0.99):7,.0f} max {ordered[-1]:7,.0f}"
                )
            lines.append(f"  second {second:3}: " + " | ".join(cells))
        return lines


def warm_up(clusters: dict[str, str], consumer: Consumer, arrivals: Arrivals) -> float:
    """Send a record into each partition of each datacenter and wait until all reached the aggregate;
    return how long that took."""
    started = time.monotonic()
    for index, dc in enumerate(DATACENTERS):
        with Producer(bootstrap_servers=clusters[dc], acks="all") as producer:
            for partition in range(PARTITIONS):
                producer.send(TOPIC, value(index, warm_up=True), partition=partition)
            producer.flush(timeout=60)
    wanted = {(index, p) for index in range(len(DATACENTERS)) for p in range(PARTITIONS)}
    while not wanted <= arrivals.warm_up:
        if time.monotonic() - started > WARM_UP_TIMEOUT_S:
            raise TimeoutError(
                f"the warm-up records did not all reach the aggregate in {WARM_UP_TIMEOUT_S:.0f} s"
            )
        arrivals.take(consumer.poll(timeout_ms=200))
    return time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rate", type=int, default=20_000, help="records/s into each datacenter")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--cold", action="store_true", help="start pacing as soon as the topic is created")
    parser.add_argument("--timeline", action="store_true", help="latency by second of sending")
    parser.add_argument("--source", action="store_true", help="also measure send-to-source latency")
    parser.add_argument("--keep", type=Path, help="run the topology in this new directory and keep its logs")
    args = parser.parse_args(argv)
    stop_on_termination()
    expected = 2 * int(args.rate * args.seconds)
    arrivals = Arrivals()
    flowing = None
    with tempfile.TemporaryDirectory(prefix="topology-latency-") as tmp:
        directory = args.keep or Path(tmp) / "dev"
        progress = lambda line: print(line, file=sys.stderr)  # noqa: E731
        try:
            started = topology.up(directory, brokers=3, progress=progress, preferred_ports=False)
            clusters = {name: c["bootstrap"] for name, c in started.data["clusters"].items()}
            for dc in DATACENTERS:
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
            try:
                if not args.cold:
                    flowing = warm_up(clusters, consumer, arrivals)
                    progress(f"the new topic reached the aggregate from both datacenters in {flowing:.1f} s")
                results: multiprocessing.Queue = multiprocessing.Queue()
                producers = [
                    multiprocessing.Process(
                        target=produce_paced, args=(clusters[dc], index, args.rate, args.seconds, results)
                    )
                    for index, dc in enumerate(DATACENTERS)
                ]
                sources: multiprocessing.Queue = multiprocessing.Queue()
                watchers = [
                    multiprocessing.Process(
                        target=watch_source,
                        args=(clusters[dc], index, expected // 2, args.seconds, sources),
                    )
                    for index, dc in enumerate(DATACENTERS)
                    if args.source
                ]
                for process in watchers:
                    process.start()
                arrivals.start_ns = time.time_ns()
                for process in producers:
                    process.start()
                deadline = time.monotonic() + args.seconds + 120
                try:
                    while len(arrivals.latencies) < expected and time.monotonic() < deadline:
                        arrivals.take(consumer.poll(timeout_ms=200))
                finally:
                    for process in producers:
                        process.join(timeout=180)
                    at_source = sorted(sources.get(timeout=180) for _ in watchers)
                    for process in watchers:
                        process.join(timeout=30)
            finally:
                consumer.close()
            produced = [results.get(timeout=10) for _ in producers]
        finally:
            topology.down(directory, progress=progress)
    if flowing is not None:
        print(f"warm-up: the new topic reached the aggregate from both datacenters in {flowing:.1f} s")
    for dc, (acknowledged, failed, seconds) in zip(DATACENTERS, produced, strict=True):
        print(
            f"{dc}: {acknowledged:,} acknowledged ({acknowledged / seconds:,.0f}/s over {seconds:.1f} s), "
            f"{failed} failed"
        )
    for datacenter, ordered, worst in at_source:
        print(
            f"{DATACENTERS[datacenter]}: {len(ordered):,} records readable there; send-to-source latency "
            f"p50 {percentile(ordered, 0.5):,.0f} ms, p99 {percentile(ordered, 0.99):,.0f} ms, "
            f"max {ordered[-1] if ordered else float('nan'):,.0f} ms"
        )
        if args.timeline:
            print("  the largest by second of sending:", " ".join(f"{worst[s]:,.0f}" for s in sorted(worst)))
    if args.timeline:
        print("latency (ms) of the records sent in each second:", *arrivals.timeline(), sep="\n")
    ordered = sorted(arrivals.latencies)
    print(
        f"aggregate: {len(ordered):,} of {expected:,} records; send-to-aggregate latency "
        f"p50 {percentile(ordered, 0.5):,.0f} ms, p99 {percentile(ordered, 0.99):,.0f} ms, "
        f"max {ordered[-1] if ordered else float('nan'):,.0f} ms"
    )
    return 0 if len(ordered) >= expected and all(p[1] == 0 for p in produced) else 1


if __name__ == "__main__":
    sys.exit(main())
