"""Client throughput against a live broker: producer and consumer records/s, 200-byte values, acks=1.

Starts a throwaway ZooKeeper and one broker the way the integration tests do (unless `--bootstrap` names a
running cluster), creates a one-partition topic, then measures in turn:

- our sync `Producer` (`acks=1`, the given `linger.ms`/`batch.size`): send N records, flush;
- our `AsyncProducer`, the same way, into a topic of its own (`await send(...)` per record, then flush);
- our sync `Consumer` and the `AsyncConsumer`: read the N records back from the first offset, looking at
  every record's value (a poll loop that does nothing else);
- kafka-python's KafkaProducer and KafkaConsumer on the same workload, for comparison (`--no-kafka-python`
  skips them).

Each phase stops at N records or `--seconds`, whichever comes first, and the rate counts what was done.

    python ops/bench/client_bench.py [--records 200000] [--seconds 60] [--bootstrap HOST:PORT]

Prints a markdown table with the exact command.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import platform
import shlex
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from backbone.client import (
    Admin,
    AsyncConsumer,
    AsyncProducer,
    Consumer,
    NewTopic,
    Producer,
    TopicPartition,
)

VALUE_SIZE = 200


@contextlib.contextmanager
def local_broker() -> Iterator[str]:
    """ZooKeeper and one broker in a temporary directory; yields the bootstrap address."""
    from backbone.coordination import ZooKeeperServer, find_free_port
    from backbone.dev.processes import BrokerProcess

    with tempfile.TemporaryDirectory(prefix="client-bench-") as tmp:
        zookeeper = ZooKeeperServer(Path(tmp) / "zk", find_free_port(), force_sync=False)
        zookeeper.start(timeout=60.0)
        try:
            broker = BrokerProcess(1, zookeeper.connect_string + "/bench", Path(tmp) / "broker")
            broker.start(timeout=60.0)
            try:
                yield broker.bootstrap
            finally:
                broker.stop(timeout=30)
        finally:
            zookeeper.stop()


def touch(polled: Mapping[object, Iterable[Any]]) -> int:
    """Look at every record's value, as an application would; return how many records there were."""
    count = 0
    size = 0
    for records in polled.values():
        for record in records:
            size += len(record.value)
            count += 1
    return count


def timed(work: Callable[[float], int], seconds: float) -> tuple[int, float]:
    """Run `work(deadline)`; return (records done, elapsed seconds)."""
    started = time.perf_counter()
    done = work(started + seconds)
    return done, time.perf_counter() - started


def our_producer(
    bootstrap: str, topic: str, count: int, linger_ms: int, batch_size: int
) -> Callable[[float], int]:
    def work(deadline: float) -> int:
        value = b"v" * VALUE_SIZE
        sent = 0
        with Producer(
            bootstrap_servers=bootstrap, acks=1, linger_ms=linger_ms, batch_size=batch_size
        ) as producer:
            while sent < count and (sent % 1000 or time.perf_counter() < deadline):
                producer.send(topic, value)
                sent += 1
            producer.flush(max(deadline - time.perf_counter(), 1.0))
        return sent

    return work


def our_async_producer(
    bootstrap: str, topic: str, count: int, linger_ms: int, batch_size: int
) -> Callable[[float], int]:
    async def produce(deadline: float) -> int:
        value = b"v" * VALUE_SIZE
        sent = 0
        options = {"acks": 1, "linger.ms": linger_ms, "batch.size": batch_size}
        async with AsyncProducer(options, bootstrap_servers=bootstrap) as producer:
            while sent < count and (sent % 1000 or time.perf_counter() < deadline):
                await producer.send(topic, value)
                sent += 1
            await producer.flush(max(deadline - time.perf_counter(), 1.0))
        return sent

    return lambda deadline: asyncio.run(produce(deadline))


def our_consumer(bootstrap: str, topic: str, count: int) -> Callable[[float], int]:
    def work(deadline: float) -> int:
        received = 0
        options = {"auto.offset.reset": "earliest", "max.poll.records": 10_000}
        with Consumer(options, bootstrap_servers=bootstrap) as consumer:
            consumer.assign([TopicPartition(topic, 0)])
            while received < count and time.perf_counter() < deadline:
                received += touch(consumer.poll(timeout_ms=500))
        return received

    return work


def our_async_consumer(bootstrap: str, topic: str, count: int) -> Callable[[float], int]:
    async def consume(deadline: float) -> int:
        received = 0
        options = {"auto.offset.reset": "earliest", "max.poll.records": 10_000}
        async with AsyncConsumer(options, bootstrap_servers=bootstrap) as consumer:
            consumer.assign([TopicPartition(topic, 0)])
            while received < count and time.perf_counter() < deadline:
                received += touch(await consumer.poll(timeout_ms=500))
        return received

    return lambda deadline: asyncio.run(consume(deadline))


def kafka_python_producer(
    bootstrap: str, topic: str, count: int, linger_ms: int, batch_size: int
) -> Callable[[float], int]:
    from kafka import KafkaProducer

    def work(deadline: float) -> int:
        value = b"v" * VALUE_SIZE
        producer = KafkaProducer(
            bootstrap_servers=bootstrap, acks=1, linger_ms=linger_ms, batch_size=batch_size
        )
        sent = 0
        try:
            while sent < count and (sent % 1000 or time.perf_counter() < deadline):
                producer.send(topic, value)
                sent += 1
            producer.flush(max(deadline - time.perf_counter(), 1.0))
        finally:
            producer.close(10)
        return sent

    return work


def kafka_python_consumer(bootstrap: str, topic: str, count: int) -> Callable[[float], int]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaTopicPartition

    def work(deadline: float) -> int:
        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap, auto_offset_reset="earliest", max_poll_records=10_000
        )
        received = 0
        try:
            consumer.assign([KafkaTopicPartition(topic, 0)])
            while received < count and time.perf_counter() < deadline:
                received += touch(consumer.poll(timeout_ms=500))
        finally:
            consumer.close()
        return received

    return work


def create_topic(bootstrap: str) -> str:
    name = f"bench-{uuid.uuid4().hex[:8]}"
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic(name, 1, 1)])
    return name


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=200_000, help="records per phase")
    parser.add_argument("--seconds", type=float, default=60.0, help="time limit per phase")
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=65_536)
    parser.add_argument("--bootstrap", help="a running cluster (default: start ZooKeeper and a broker)")
    parser.add_argument("--no-kafka-python", action="store_true", help="skip the kafka-python comparison")
    args = parser.parse_args()

    rows: list[tuple[str, int, float]] = []
    source = contextlib.nullcontext(args.bootstrap) if args.bootstrap else local_broker()
    with source as bootstrap:
        ours = create_topic(bootstrap)
        phases = [
            (
                "Producer (ours, sync)",
                our_producer(bootstrap, ours, args.records, args.linger_ms, args.batch_size),
            ),
            ("Consumer (ours, sync)", our_consumer(bootstrap, ours, args.records)),
            ("AsyncConsumer (ours)", our_async_consumer(bootstrap, ours, args.records)),
            (
                "AsyncProducer (ours)",
                our_async_producer(
                    bootstrap, create_topic(bootstrap), args.records, args.linger_ms, args.batch_size
                ),
            ),
        ]
        if not args.no_kafka_python:
            theirs = create_topic(bootstrap)
            phases += [
                (
                    "KafkaProducer (kafka-python)",
                    kafka_python_producer(bootstrap, theirs, args.records, args.linger_ms, args.batch_size),
                ),
                ("KafkaConsumer (kafka-python)", kafka_python_consumer(bootstrap, theirs, args.records)),
            ]
        for name, work in phases:
            done, elapsed = timed(work, args.seconds)
            rows.append((name, done, elapsed))
            print(f"{name}: {done} records in {elapsed:.2f} s", file=sys.stderr)

    print(f"`{shlex.join(['python', *sys.argv])}`")
    print()
    print(
        f"Python {platform.python_version()} on {platform.machine()}, {VALUE_SIZE}-byte values, acks=1, ",
        end="",
    )
    print(f"linger.ms={args.linger_ms}, batch.size={args.batch_size}, one partition, one broker on loopback")
    print()
    print("| client | records | seconds | records/s |")
    print("| --- | ---: | ---: | ---: |")
    for name, done, elapsed in rows:
        print(f"| {name} | {done:,} | {elapsed:.2f} | {done / elapsed:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
