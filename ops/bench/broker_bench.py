"""Broker benchmarks on loopback: one broker, one partition, 200-byte values, acks=1.

    python ops/bench/broker_bench.py [--records 1000000] [--rounds 3] [--write]

Starts a real ZooKeeper and one broker (as `backbone dev` does), then measures, each bounded in count and
time: librdkafka producers (confluent-kafka, if installed by `ops/bench/install-brokers`, with `produce`
per record and with `produce_batch`; and kcat, librdkafka's C tool, reading the records from a file written
before the timing starts), our Python producer and our consumer (every value read).
Prints a markdown table; `--write` puts it into the broker's section of docs/benchmarks.md. End-to-end
latency is `latency_bench.py`'s.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import report
from local_cluster import one_broker, stop_on_termination

from backbone.client import Admin, Consumer, NewTopic, Producer, TopicPartition

VALUE_SIZE = 200
SECTION = "## Broker"
NAME = "broker"


def timed(label: str, count: int, run: Callable[[], int]) -> float:
    """records/s of one run; a run that did not move every record is an error, not a figure."""
    started = time.perf_counter()
    done = run()
    seconds = time.perf_counter() - started
    if done != count:
        raise RuntimeError(f"{label}: {done} of {count} records")
    return count / seconds


def librdkafka_producer(bootstrap: str, topic: str, *, count: int, batched: bool) -> int:
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
    if batched:
        # produce_batch hands librdkafka a list of messages in one call (10,000 here, the list made once).
        chunk = [{"value": value}] * 10_000
        for start in range(0, count, len(chunk)):
            messages = chunk[: count - start]
            if producer.produce_batch(topic, messages, partition=0) != len(messages):
                raise RuntimeError(f"librdkafka refused messages: {messages[0].get('_error')}")
    else:
        produce = producer.produce
        for _ in range(count):
            produce(topic, value, partition=0)
    remaining = producer.flush(120)
    return count - remaining


def records_file(directory: Path, count: int) -> Path:
    """kcat's input: `count` lines of 199 bytes and a newline (written before the timing starts)."""
    lines = directory / f"records-{count}.txt"
    if not lines.exists():
        lines.write_bytes((b"x" * (VALUE_SIZE - 1) + b"\n") * count)
    return lines


def kcat_producer(bootstrap: str, topic: str, *, count: int, directory: Path) -> int:
    lines = records_file(directory, count)
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


CONFLUENT = "librdkafka producer (confluent-kafka, `produce` per record)"
CONFLUENT_BATCH = "librdkafka producer (confluent-kafka, `produce_batch` of 10,000)"
KCAT = "librdkafka producer (kcat, C)"
OUR_PRODUCER = "our producer (sync `Producer`)"
OUR_CONSUMER = "our consumer (sync `Consumer`, every value read)"
LIBRDKAFKA_TARGET = ">= 1,000,000"
TARGETS = {
    CONFLUENT_BATCH: LIBRDKAFKA_TARGET,
    KCAT: LIBRDKAFKA_TARGET,
    OUR_PRODUCER: ">= 500,000",
    OUR_CONSUMER: ">= 1,000,000",
}


def available_producers(bootstrap: str, directory: Path, records: int) -> dict[str, Callable[[str], int]]:
    """The producers to compare, each given a topic; librdkafka's only where it is installed."""
    producers: dict[str, Callable[[str], int]] = {}
    if importlib.util.find_spec("confluent_kafka") is not None:
        producers[CONFLUENT] = partial(librdkafka_producer, bootstrap, count=records, batched=False)
        producers[CONFLUENT_BATCH] = partial(librdkafka_producer, bootstrap, count=records, batched=True)
    else:
        print("confluent-kafka is not installed (ops/bench/install-brokers): no rows for it", file=sys.stderr)
    if shutil.which("kcat") is not None:
        records_file(directory, records)
        producers[KCAT] = partial(kcat_producer, bootstrap, count=records, directory=directory)
    else:
        print("kcat is not installed: its row is left out", file=sys.stderr)
    producers[OUR_PRODUCER] = partial(our_producer, bootstrap, count=records)
    return producers


def measure(bootstrap: str, directory: Path, records: int, rounds: int) -> dict[str, list[float]]:
    """records/s of each client, `rounds` times, every run into a fresh topic."""
    producers = available_producers(bootstrap, directory, records)
    topics = [f"p{p}-r{r}" for p in range(len(producers)) for r in range(rounds)]
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic(name, 1, 1) for name in topics])
    results: dict[str, list[float]] = {}
    for r in range(rounds):
        for p, (label, produce) in enumerate(producers.items()):
            topic = f"p{p}-r{r}"
            results.setdefault(label, []).append(timed(label, records, partial(produce, topic)))
            print(f"round {r + 1}: {label}: {results[label][-1]:,.0f} records/s", file=sys.stderr)
        # Our consumer reads back what our producer just wrote.
        consume = partial(our_consumer, bootstrap, f"p{list(producers).index(OUR_PRODUCER)}-r{r}", records)
        results.setdefault(OUR_CONSUMER, []).append(timed("consumer", records, consume))
        print(f"round {r + 1}: {OUR_CONSUMER}: {results[OUR_CONSUMER][-1]:,.0f} records/s", file=sys.stderr)
    return results


def render(args: argparse.Namespace, when: str, results: dict[str, list[float]]) -> str:
    rows = []
    for label, rates in results.items():
        rate = statistics.median(rates)
        runs = ", ".join(f"{run:,.0f}" for run in rates)
        rows.append([label, f"{rate:,.0f}", runs, f"{rate * VALUE_SIZE / 1e6:,.1f}", TARGETS.get(label, "")])
    about = (
        f"One broker, one partition, {VALUE_SIZE}-byte values, acks=1; {args.records:,} records a run, each "
        f"run into a fresh topic; median of {args.rounds} runs. Our consumer reads back what our producer "
        "wrote in the same round."
    )
    header = ["measurement", "records/s (median)", "runs", "MB/s of values", "target"]
    return report.figures("broker_bench.py", when, about, header, rows)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3, help="runs per measurement; the median is reported")
    parser.add_argument("--write", action="store_true", help="write the figures into docs/benchmarks.md")
    args = parser.parse_args()
    stop_on_termination()
    when = report.started()
    with tempfile.TemporaryDirectory(dir=report.ROOT.parent) as work:
        directory = Path(work)
        with one_broker(directory / "backbone") as broker:
            results = measure(broker.bootstrap, directory, args.records, args.rounds)
    body = render(args, when, results)
    report.publish(NAME, SECTION, body, args.write)


if __name__ == "__main__":
    main()
