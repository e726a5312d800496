"""`backbone perf produce|consume|e2e`: throughput and latency of a cluster, measured with our own clients.

In the spirit of Kafka's producer and consumer performance tools and its end-to-end latency tool:
- `produce` sends N records of a given size (optionally capped at a rate) and reports records/s, MB/s and
  the latency from send to acknowledgement (sampled on every `--latency-sample`-th record, since a callback
  on each record would slow the producer it measures);
- `consume` reads N records from the beginning of a topic's partitions and reports records/s and MB/s;
- `e2e` produces at a fixed rate while a consumer reads the same topic and reports, for every record,
  the time from just before `send` to the moment `poll` returned it (the send time travels in the value);
  one untimed record per partition warms the producer up first.
Every run is bounded by `--num-records` and by `--max-seconds`; a progress line goes to stderr while it
runs, the result to stdout (one line, or JSON with `--json`).
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from backbone.cli.connect import (
    CommandFailed,
    admin_session,
    client_config,
    connection_options,
    int_at_least,
    reports_failures,
)
from backbone.cli.perf_stats import LatencySamples, Progress, Summary, Throttle

if TYPE_CHECKING:
    from backbone.client import Consumer, Producer, TopicPartition

_SEND_TIME = struct.Struct(">q")  # e2e: the send time in ns at the start of each value
_POLL_MS = 100


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("perf", help="measure produce, consume and end-to-end performance")
    commands = parser.add_subparsers(dest="perf_command", metavar="MODE")
    commands.required = True

    common = argparse.ArgumentParser(add_help=False, parents=[connection_options()])
    common.add_argument("--topic", required=True)
    common.add_argument("--num-records", type=int_at_least(1), required=True, help="records to move")
    common.add_argument(
        "--max-seconds",
        type=float,
        default=300.0,
        help="stop after this long, whatever the count",
    )
    common.add_argument("--json", action="store_true", help="print the result as JSON")

    sending = argparse.ArgumentParser(add_help=False)
    sending.add_argument("--record-size", type=int_at_least(8), default=200, help="value bytes (default 200)")
    sending.add_argument("--acks", choices=["0", "1", "all", "-1"], default="1")
    sending.add_argument("--batch-size", type=int_at_least(0), help="producer batch.size in bytes")
    sending.add_argument("--linger-ms", type=int_at_least(0), help="producer linger.ms")
    sending.add_argument(
        "--compression-type", choices=["none", "gzip", "snappy", "lz4", "zstd"], help="producer compression"
    )
    sending.add_argument(
        "--partitions",
        type=int_at_least(1),
        help="create the topic with this many partitions if missing",
    )
    sending.add_argument("--replication-factor", type=int_at_least(1), help="with --partitions")
    sending.add_argument(
        "--producer-property", action="append", default=[], metavar="KEY=VALUE", help="any producer setting"
    )

    produce = commands.add_parser(
        "produce", parents=[common, sending], help="producer throughput and latency"
    )
    produce.add_argument(
        "--throughput", type=float, default=-1, help="cap in records/s (default: as fast as possible)"
    )
    produce.add_argument(
        "--latency-sample", type=int_at_least(1), default=16, help="measure latency on every Nth record (16)"
    )
    produce.set_defaults(handler=reports_failures(_produce))

    consume = commands.add_parser("consume", parents=[common], help="consumer throughput from the beginning")
    consume.add_argument("--fetch-max-bytes", type=int_at_least(1), help="consumer fetch.max.bytes")
    consume.set_defaults(handler=reports_failures(_consume))

    e2e = commands.add_parser("e2e", parents=[common, sending], help="end-to-end latency at a fixed rate")
    e2e.add_argument("--throughput", type=float, default=10_000, help="records/s to produce (default 10000)")
    e2e.set_defaults(handler=reports_failures(_end_to_end))


def _producer_config(args: argparse.Namespace) -> dict[str, Any]:
    from backbone.cli.connect import parse_assignments

    config = client_config(args)
    config["acks"] = "all" if args.acks in ("all", "-1") else int(args.acks)
    for option, name in (("batch_size", "batch.size"), ("linger_ms", "linger.ms")):
        if getattr(args, option) is not None:
            config[name] = getattr(args, option)
    if args.compression_type:
        config["compression.type"] = args.compression_type
    config.update(parse_assignments(args.producer_property, "--producer-property"))
    return config


def _ensure_topic(args: argparse.Namespace) -> None:
    """With --partitions, create the topic unless it exists; without, it must exist (or be auto-created)."""
    if args.partitions is None:
        return
    from backbone.client import NewTopic

    with admin_session(args) as admin:
        if args.topic in admin.list_topics():
            return
        factor = args.replication_factor or -1
        admin.create_topics([NewTopic(args.topic, args.partitions, factor)])


def _report(args: argparse.Namespace, summary: Summary) -> int:
    if args.json:
        print(json.dumps(summary.as_dict()))
    else:
        print(summary.line())
    return 0 if summary.errors == 0 else 1


def _produce(args: argparse.Namespace) -> int:
    from backbone.client import Producer

    _ensure_topic(args)
    value = os.urandom(args.record_size)
    latency = LatencySamples()
    failures: list[BaseException] = []
    progress = Progress(sys.stderr, "sent")
    throttle = Throttle(args.throughput)
    deadline = time.monotonic() + args.max_seconds
    sent = 0
    with Producer(_producer_config(args)) as producer:
        started = time.perf_counter()
        while sent < args.num_records and time.monotonic() < deadline:
            throttle.wait_for(sent)
            if sent % args.latency_sample == 0:
                future = producer.send(args.topic, value)
                future.add_done_callback(_latency_callback(latency, failures, time.perf_counter()))
            else:
                producer.send(args.topic, value)
            sent += 1
            if sent & 1023 == 0:
                progress.update(sent, latency)
        producer.flush(timeout=max(1.0, deadline - time.monotonic() + 30))
        elapsed = time.perf_counter() - started
    return _report(args, Summary(sent, sent * args.record_size, elapsed, latency, errors=len(failures)))


def _latency_callback(latency: LatencySamples, failures: list[BaseException], sent_at: float):
    def done(future: Any) -> None:
        error = future.exception(0)
        if error is not None:
            failures.append(error)
        else:
            latency.add((time.perf_counter() - sent_at) * 1000)

    return done


def _assigned_consumer(args: argparse.Namespace, **settings: Any) -> tuple[Consumer, list[TopicPartition]]:
    from backbone.client import Consumer, TopicPartition

    consumer = Consumer(client_config(args), **settings)
    try:
        partitions = sorted(consumer.partitions_for_topic(args.topic))
    except Exception:
        consumer.close()
        raise
    if not partitions:
        consumer.close()
        raise CommandFailed(f"topic {args.topic!r} has no partitions; create it or produce to it first")
    assigned = [TopicPartition(args.topic, p) for p in partitions]
    consumer.assign(assigned)
    return consumer, assigned


def _consume(args: argparse.Namespace) -> int:
    settings = {} if args.fetch_max_bytes is None else {"fetch_max_bytes": args.fetch_max_bytes}
    consumer, assigned = _assigned_consumer(args, **settings)
    progress = Progress(sys.stderr, "read")
    deadline = time.monotonic() + args.max_seconds
    count = size = 0
    try:
        consumer.seek_to_beginning(*assigned)
        started = time.perf_counter()
        while count < args.num_records and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=_POLL_MS).values():
                for record in records:
                    count += 1
                    size += len(record.value or b"") + len(record.key or b"")
            progress.update(count)
        elapsed = time.perf_counter() - started
    finally:
        consumer.close()
    if count < args.num_records:
        print(f"only {count:,} of {args.num_records:,} records arrived within --max-seconds", file=sys.stderr)
    return _report(args, Summary(count, size, elapsed))


def _end_to_end(args: argparse.Namespace) -> int:
    from backbone.client import Producer

    _ensure_topic(args)
    consumer, assigned = _assigned_consumer(args, fetch_max_wait_ms=100, fetch_min_bytes=1)
    try:
        producer = Producer({"linger.ms": 0, **_producer_config(args)})
    except BaseException:
        consumer.close()
        raise
    try:
        return _measure_end_to_end(args, producer, consumer, assigned)
    finally:
        consumer.close()
        producer.close()


def _measure_end_to_end(
    args: argparse.Namespace, producer: Producer, consumer: Consumer, assigned: list[TopicPartition]
) -> int:
    latency = LatencySamples()
    progress = Progress(sys.stderr, "received")
    deadline = time.monotonic() + args.max_seconds
    stop = threading.Event()
    failures: list[BaseException] = []
    received = 0
    padding = os.urandom(args.record_size - _SEND_TIME.size)
    _warm_up(producer, assigned, padding, deadline)
    consumer.seek_to_end(*assigned)
    for tp in assigned:  # resolve the end offsets now, so no record sent from here on is missed
        consumer.position(tp)
    sender = threading.Thread(
        target=_send_paced,
        args=(producer, args, padding, stop, failures, deadline),
        name="perf-e2e-producer",
        daemon=True,
    )
    started = time.perf_counter()
    sender.start()
    try:
        while received < args.num_records and time.monotonic() < deadline and not failures:
            for records in consumer.poll(timeout_ms=_POLL_MS).values():
                now = time.time_ns()
                for record in records:
                    latency.add((now - _SEND_TIME.unpack_from(record.value)[0]) / 1e6)
                received += len(records)
            progress.update(received, latency)
        elapsed = time.perf_counter() - started
    finally:
        stop.set()
        sender.join(timeout=60)
    if received < args.num_records:
        print(f"only {received:,} of {args.num_records:,} records arrived in time", file=sys.stderr)
    summary = Summary(received, received * args.record_size, elapsed, latency, errors=len(failures))
    return _report(args, summary)


def _warm_up(producer: Producer, partitions: list[TopicPartition], padding: bytes, deadline: float) -> None:
    """One acknowledged record per partition before the clock starts (the consumer starts after them).

    The first send waits for the topic's metadata, a producer id and a connection to each leader; timed,
    that start-up (~0.1 s) and the records queued behind it were the run's worst latencies, enough to set
    its p99 on their own (Kafka's producer performance tool has --warmup-records for the same reason).
    """
    futures = [
        producer.send(tp.topic, _SEND_TIME.pack(time.time_ns()) + padding, partition=tp.partition)
        for tp in partitions
    ]
    for future in futures:
        future.result(timeout=max(deadline - time.monotonic(), 1.0))


def _send_paced(
    producer: Producer,
    args: argparse.Namespace,
    padding: bytes,
    stop: threading.Event,
    failures: list,
    deadline: float,
) -> None:
    throttle = Throttle(args.throughput)  # from the first measured send on, not from the warm-up
    try:
        for sent in range(args.num_records):
            if stop.is_set() or time.monotonic() >= deadline:
                break
            throttle.wait_for(sent)
            producer.send(args.topic, _SEND_TIME.pack(time.time_ns()) + padding)
        producer.flush(timeout=30)
    except Exception as error:  # reported by the main thread, which stops waiting for records
        failures.append(error)
