"""Broker benchmarks on loopback: one broker, one partition, 200-byte values, acks=1.

    python ops/bench/broker_bench.py [--records 1000000] [--latency-seconds 10] [--write docs/benchmarks.md]

Starts a real ZooKeeper and one broker (as `backbone dev` does), then measures, each bounded in count and
time: a librdkafka producer (confluent-kafka, Python loop; and kcat, librdkafka's C tool, reading the
records from a file), our Python producer, our consumer (records decoded), and end-to-end latency at a
fixed 10,000 records/s (produce timestamp to poll, our producer and consumer). Prints a markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from backbone.client import Admin, Consumer, NewTopic, Producer, TopicPartition
from backbone.coordination import ZooKeeperServer, find_free_port
from backbone.dev.processes import BrokerProcess

VALUE_SIZE = 200


def timed(label: str, count: int, run: Callable[[], int]) -> float:
    """records/s of one run; a run that did not move every record is an error, not a figure."""
    started = time.perf_counter()
    done = run()
    seconds = time.perf_counter() - started
    if done != count:
        raise RuntimeError(f"{label}: {done} of {count} records")
    return count / seconds


def librdkafka_producer(bootstrap: str, topic: str, *, count: int) -> int:
    from confluent_kafka import Producer as RdProducer

    producer = RdProducer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "1",
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2_000_000,
            "enable.idempotence": False,
        }
    )
    value = b"x" * VALUE_SIZE
    produce = producer.produce
    for _ in range(count):
        produce(topic, value, partition=0)
    remaining = producer.flush(120)
    return count - remaining


def kcat_producer(bootstrap: str, topic: str, *, count: int, directory: Path) -> int:
    lines = directory / "records.txt"
    lines.write_bytes((b"x" * (VALUE_SIZE - 1) + b"\n") * count)
    subprocess.run(
        [
            "kcat", "-P", "-b", bootstrap, "-t", topic, "-p", "0", "-l", str(lines),
            "-X", "linger.ms=5", "-X", "batch.size=1000000", "-X", "acks=1",
            "-X", "queue.buffering.max.messages=2000000",
        ],
        check=True,
        timeout=300,
    )  # fmt: skip
    return count


def our_producer(bootstrap: str, topic: str, *, count: int) -> int:
    producer = Producer(bootstrap_servers=bootstrap, acks=1, linger_ms=5, batch_size=1_000_000)
    value = b"x" * VALUE_SIZE
    send = producer.send
    try:
        for _ in range(count):
            send(topic, value, partition=0)
        producer.flush(timeout=120)
    finally:
        producer.close()
    return count


def our_consumer(bootstrap: str, topic: str, count: int) -> int:
    consumer = Consumer(
        bootstrap_servers=bootstrap, max_partition_fetch_bytes=8 << 20, fetch_max_bytes=64 << 20
    )
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    seen = 0
    deadline = time.monotonic() + 300
    try:
        while seen < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=1000, max_records=100_000).values():
                # Touch every record's value: a record counts only once it is decoded and read.
                for record in records:
                    if len(record.value) == VALUE_SIZE:
                        seen += 1
    finally:
        consumer.close()
    return min(seen, count)


def end_to_end_latency(bootstrap: str, topic: str, rate: int, seconds: float) -> dict[str, float]:
    """Produce at `rate` records/s with our producer; the consumer measures now - record timestamp."""
    consumer = Consumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=100, fetch_min_bytes=1)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek_to_end()
    latencies: list[float] = []
    total = int(rate * seconds)
    stop = threading.Event()

    def consume() -> None:
        while not stop.is_set() and len(latencies) < total:
            for records in consumer.poll(timeout_ms=200).values():
                now = time.time() * 1000
                latencies.extend(now - record.timestamp for record in records)

    reader = threading.Thread(target=consume)
    reader.start()
    producer = Producer(bootstrap_servers=bootstrap, acks=1, linger_ms=0)
    value = b"x" * VALUE_SIZE
    started = time.perf_counter()
    try:
        for i in range(total):
            target = started + i / rate
            delay = target - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            producer.send(topic, value, partition=0)
        producer.flush(timeout=60)
        deadline = time.monotonic() + 30
        while len(latencies) < total and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        reader.join(30)
        producer.close()
        consumer.close()
    latencies.sort()
    quantile = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))]  # noqa: E731
    return {"count": len(latencies), "p50": quantile(0.5), "p99": quantile(0.99), "max": latencies[-1]}


def measure(bootstrap: str, directory: Path, records: int, rounds: int) -> dict[str, list[float]]:
    """records/s of each client, `rounds` times, every run into a fresh topic."""
    producers: dict[str, Callable[[str], int]] = {
        "librdkafka producer (confluent-kafka, Python loop)": partial(
            librdkafka_producer, bootstrap, count=records
        ),
        "librdkafka producer (kcat, C)": partial(
            kcat_producer, bootstrap, count=records, directory=directory
        ),
        "our producer": partial(our_producer, bootstrap, count=records),
    }
    topics = [f"p{p}-r{r}" for p in range(len(producers)) for r in range(rounds)]
    admin = Admin(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(name, 1, 1) for name in [*topics, "e2e"]])
    admin.close()
    results: dict[str, list[float]] = {}
    for r in range(rounds):
        for p, (label, produce) in enumerate(producers.items()):
            topic = f"p{p}-r{r}"
            results.setdefault(label, []).append(timed(label, records, partial(produce, topic)))
        # Our consumer reads back what our producer just wrote.
        consume = partial(our_consumer, bootstrap, f"p{len(producers) - 1}-r{r}", records)
        results.setdefault("our consumer (records decoded)", []).append(timed("consumer", records, consume))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3, help="runs per measurement; the median is reported")
    parser.add_argument("--latency-seconds", type=float, default=10.0)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(dir="/work" if Path("/work").is_dir() else None) as work:
        directory = Path(work)
        zookeeper = ZooKeeperServer(directory / "zk", find_free_port(), force_sync=False)
        zookeeper.start(timeout=60)
        broker = BrokerProcess(1, zookeeper.connect_string + "/bench", directory / "broker")
        try:
            broker.start(timeout=60)
            results = measure(broker.bootstrap, directory, args.records, args.rounds)
            latency = end_to_end_latency(broker.bootstrap, "e2e", 10_000, args.latency_seconds)
        finally:
            broker.stop()
            zookeeper.stop()
    print(
        f"One broker, one partition, {VALUE_SIZE}-byte values, acks=1, "
        f"{args.records:,} records a run, median of {args.rounds} runs:\n"
    )
    print("| measurement | records/s | MB/s |")
    print("| --- | ---: | ---: |")
    for label, rates in results.items():
        rate = statistics.median(rates)
        print(f"| {label} | {rate:,.0f} | {rate * VALUE_SIZE / 1e6:,.1f} |")
    print(
        f"\nEnd-to-end latency at 10,000 records/s ({latency['count']:,} records): "
        f"p50 {latency['p50']:.1f} ms, p99 {latency['p99']:.1f} ms, max {latency['max']:.1f} ms"
    )


if __name__ == "__main__":
    main()
