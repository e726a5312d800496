"""What TLS and SASL cost: produce and fetch throughput over SASL_SSL against PLAINTEXT, side by side.

    python ops/bench/tls_bench.py [--records 200000] [--rounds 3] [--write]

Starts a real ZooKeeper and one broker with a PLAINTEXT and a SASL_SSL listener (certificates from
ops/dev-ca, SCRAM-SHA-512 for the login), then, in alternating rounds so both listeners see the same
machine load, produces `--records` 200-byte records (acks=1, one partition, a fresh topic each run) and
fetches them back, over each listener in turn: with librdkafka (confluent-kafka; its TLS is C, so the
figure is mostly the broker's) and with our Python client. Reports the median records/s of each and the
ratio SASL_SSL / PLAINTEXT, with the load average at the start and the end. `--write` puts the figures
into docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import report
from broker_bench import VALUE_SIZE, timed
from local_cluster import broker_with_sasl_ssl, stop_on_termination

from backbone.client import Admin, Consumer, NewTopic, Producer, TopicPartition

NAME = "tls"
SECTION = "## TLS and SASL cost"
USER, PASSWORD = "bench", "bench-secret"
MECHANISM = "SCRAM-SHA-512"
LISTENERS = ("PLAINTEXT", "SASL_SSL")


class Endpoints:
    """Client settings for each listener of the broker, in our client's and librdkafka's spelling."""

    def __init__(self, plain_port: int, sasl_port: int, ca_file: Path) -> None:
        self.ports = {"PLAINTEXT": plain_port, "SASL_SSL": sasl_port}
        self.ca_file = ca_file

    def settings(self, listener: str, client: str) -> dict[str, Any]:
        """`client` is "ours" or "librdkafka": the two spell the mechanism and the CA file differently."""
        config: dict[str, Any] = {"bootstrap.servers": f"127.0.0.1:{self.ports[listener]}"}
        if listener == "SASL_SSL":
            ours = client == "ours"
            config |= {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism" if ours else "sasl.mechanisms": MECHANISM,
                "sasl.username": USER,
                "sasl.password": PASSWORD,
                "ssl.cafile" if ours else "ssl.ca.location": str(self.ca_file),
            }
        return config


def our_producer(config: dict[str, Any], topic: str, count: int) -> int:
    value = b"x" * VALUE_SIZE
    with Producer(config, acks=1, linger_ms=5, batch_size=1_000_000) as producer:
        send = producer.send
        for _ in range(count):
            send(topic, value, partition=0)
        producer.flush(timeout=300)
    return count


def our_consumer(config: dict[str, Any], topic: str, count: int) -> int:
    seen = 0
    deadline = time.monotonic() + 300
    with Consumer(config, max_partition_fetch_bytes=8 << 20, fetch_max_bytes=64 << 20) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        while seen < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=1000, max_records=100_000).values():
                seen += sum(len(record.value) == VALUE_SIZE for record in records)
    return min(seen, count)


def librdkafka_producer(config: dict[str, Any], topic: str, count: int) -> int:
    from confluent_kafka import Producer as RdProducer

    producer = RdProducer(
        config
        | {
            "acks": "1",
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2_000_000,
        }
    )
    value = b"x" * VALUE_SIZE
    failed: list[object] = []
    for start in range(0, count, 10_000):
        producer.produce_batch(
            topic,
            [{"value": value, "partition": 0} for _ in range(min(10_000, count - start))],
            on_delivery=lambda err, _: err and failed.append(err),
        )
        producer.poll(0)
    if producer.flush(300) or failed:
        raise RuntimeError(f"librdkafka producer: {len(failed)} failed, some unsent")
    return count


def librdkafka_consumer(config: dict[str, Any], topic: str, count: int) -> int:
    from confluent_kafka import Consumer as RdConsumer
    from confluent_kafka import TopicPartition as RdPartition

    consumer = RdConsumer(
        config | {"group.id": f"tls-bench-{topic}", "enable.auto.commit": False, "fetch.max.bytes": 64 << 20}
    )
    consumer.assign([RdPartition(topic, 0, 0)])
    seen = 0
    deadline = time.monotonic() + 300
    try:
        while seen < count and time.monotonic() < deadline:
            for message in consumer.consume(100_000, timeout=1.0):
                if message.error() is None and len(message.value()) == VALUE_SIZE:
                    seen += 1
    finally:
        consumer.close()
    return min(seen, count)


Client = Callable[[dict[str, Any], str, int], int]


def clients() -> dict[str, tuple[str, Client, Client]]:
    """Each client's name, its settings' spelling, its producer and its consumer."""
    found: dict[str, tuple[str, Client, Client]] = {}
    if importlib.util.find_spec("confluent_kafka") is not None:
        found["librdkafka (confluent-kafka)"] = ("librdkafka", librdkafka_producer, librdkafka_consumer)
    else:
        print("confluent-kafka is not installed: no librdkafka rows", file=sys.stderr)
    found["our client"] = ("ours", our_producer, our_consumer)
    return found


def measure(endpoints: Endpoints, records: int, rounds: int) -> dict[tuple[str, str, str], list[float]]:
    """records/s by (client, direction, listener); every round runs each listener once, alternating which
    goes first, so a change in the machine's load falls on both."""
    results: dict[tuple[str, str, str], list[float]] = {}
    topic_number = 0
    for round_number in range(rounds):
        order = LISTENERS if round_number % 2 == 0 else LISTENERS[::-1]
        for name, (spelling, produce, consume) in clients().items():
            for listener in order:
                config = endpoints.settings(listener, spelling)
                topic_number += 1
                topic = f"tls-{topic_number}"
                with Admin(endpoints.settings(listener, "ours")) as admin:
                    admin.create_topics([NewTopic(topic, 1, 1)])
                for direction, run in (("produce", produce), ("fetch", consume)):
                    rate = timed(f"{name} {direction}", records, lambda: run(config, topic, records))  # noqa: B023
                    results.setdefault((name, direction, listener), []).append(rate)
                    what = f"{name} {direction} over {listener}"
                    print(f"round {round_number + 1}: {what}: {rate:,.0f} records/s", file=sys.stderr)
    return results


def render(args: argparse.Namespace, when: str, results: dict[tuple[str, str, str], list[float]]) -> str:
    rows = []
    for name in dict.fromkeys(key[0] for key in results):
        for direction in ("produce", "fetch"):
            plain = statistics.median(results[(name, direction, "PLAINTEXT")])
            secure = statistics.median(results[(name, direction, "SASL_SSL")])
            rows.append(
                [
                    f"{name}, {direction}",
                    f"{plain:,.0f}",
                    f"{secure:,.0f}",
                    f"{secure / plain:.2f}",
                    ", ".join(f"{r:,.0f}" for r in results[(name, direction, "PLAINTEXT")]),
                    ", ".join(f"{r:,.0f}" for r in results[(name, direction, "SASL_SSL")]),
                ]
            )
    about = (
        f"One broker with a PLAINTEXT and a SASL_SSL listener (TLS 1.3 from Python's ssl, SCRAM-SHA-512), "
        f"one partition, {VALUE_SIZE}-byte values, acks=1; {args.records:,} records produced and fetched "
        f"back a run, each into a fresh topic; median of {args.rounds} rounds, the listeners alternating "
        f"which goes first. Fetches over TLS are read and written, never sendfile. Load average "
        f"{os.getloadavg()[0]:.1f} at the end."
    )
    header = [
        "client, direction",
        "PLAINTEXT records/s",
        "SASL_SSL records/s",
        "ratio",
        "PLAINTEXT runs",
        "SASL_SSL runs",
    ]
    return report.figures("tls_bench.py", when, about, header, rows)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3, help="rounds; the median is reported")
    parser.add_argument("--write", action="store_true", help="write the figures into docs/benchmarks.md")
    args = parser.parse_args()
    stop_on_termination()
    when = report.started()
    with (
        tempfile.TemporaryDirectory(dir=report.ROOT.parent) as work,
        broker_with_sasl_ssl(Path(work), USER, PASSWORD) as secure,
    ):
        endpoints = Endpoints(secure.broker.port, secure.sasl_port, secure.ca_file)
        results = measure(endpoints, args.records, args.rounds)
    report.publish(NAME, SECTION, render(args, when, results), args.write)


if __name__ == "__main__":
    main()
