"""The seed's broker comparison, reproduced: Backbone, RabbitMQ and ActiveMQ side by side in one run.

The seed (the NetDB'11 Kafka paper) published 10 million 200-byte messages from one producer, with Kafka's
producer sending batches of 1 and of 50 messages per request and ActiveMQ and RabbitMQ sending one message
at a time (persistent messages, every broker flushing to disk asynchronously), then read them with one
consumer that prefetched up to 1,000 messages (about 200 KB) per pull, acknowledging automatically. Here:

- Backbone: our `Producer`, acks=1; "batch 1" is `batch.size=1`, `linger.ms=0` (every record closes its
  batch, and a Produce request carries one batch per partition: one record per request); "batch 50" is a
  `batch.size` that fills with the 50th record and a long `linger.ms`, so every request carries 50 records.
  The broker flushes its log every 10,000 messages, as the seed's Kafka did. Our `Consumer` reads back the
  batch-50 topic with fetches of about 1,000 records (`fetch.max.bytes`, `max.partition.fetch.bytes`).
  Also kcat (librdkafka's C producer, `batch.num.messages=1`) with one record per request against the same
  broker: the broker's own rate at batch 1, apart from our Python producer's cost per request. Every run's
  stored batches are read back from the broker's log files to check they hold 1 or 50 records as claimed.
- RabbitMQ (pika, AMQP 0-9-1): a durable queue, `delivery_mode=2` (persistent) publishes without publisher
  confirms (the seed's "normal persistent sends"); a publish run ends once the queue holds every message.
  One consumer, automatic acknowledgement, `prefetch_count=1000` (RabbitMQ applies a prefetch limit to
  unacknowledged deliveries only: with automatic acknowledgement it sends as fast as the socket takes).
- ActiveMQ (stomp.py, STOMP): `persistent:true` sends to a queue, KahaDB syncing its journal once a second;
  a publish run ends at the receipt for the last send (the broker handles a connection's frames in order).
  One consumer, `ack:auto`, `activemq.prefetchSize:1000`.

Each measurement runs `--rounds` times (the systems take turns within a round), each run bounded by
`--records` and `--seconds`; the table gives medians, and the ratios are Backbone's medians over theirs.

    python ops/bench/seed_comparison.py [--records 100000] [--rounds 3] [--seconds 60] [--write]

Run `ops/bench/install-brokers` first (or pass `--install`). `--write` puts the figures into the section
"The seed's comparison" of docs/benchmarks.md (replacing the older figures there).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import logging
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import report  # noqa: E402
from local_cluster import stop_on_termination, stored_batches  # noqa: E402
from seed_brokers import (  # noqa: E402
    HOST,
    INSTALL_HINT,
    activemq_broker,
    backbone_broker,
    missing_requirements,
    rabbitmq_broker,
)

from backbone.client import Admin, Consumer, NewTopic, Producer, TopicPartition  # noqa: E402
from backbone.protocol.records import RecordBatchBuilder  # noqa: E402

VALUE_SIZE = 200
PREFETCH_RECORDS = 1000  # the seed: "up to 1000 messages or about 200KB" per pull, for every system
SECTION = "## The seed's comparison"
NAME = "seed"
SENDER_LOGGER = "backbone.client.producer.sender"


@dataclass
class Run:
    """One bounded run: how many records were moved, in how many seconds."""

    records: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0


def timed(work: Callable[[float], int], seconds: float) -> Run:
    """Run `work(deadline)`, which returns how many records it moved by then (or shortly after)."""
    started = time.perf_counter()
    done = work(started + seconds)
    return Run(done, time.perf_counter() - started)


def send_bounded(send_one: Callable[[], object], count: int, deadline: float) -> int:
    """Call `send_one` up to `count` times, stopping at the deadline (looked at every 1,000 sends)."""
    sent = 0
    while sent < count and (sent % 1000 or time.perf_counter() < deadline):
        send_one()
        sent += 1
    return sent


def wait_until(condition: Callable[[], bool], deadline: float, pause: float = 0.005) -> bool:
    while not condition():
        if time.perf_counter() >= deadline:
            return False
        time.sleep(pause)
    return True


# -- Backbone ------------------------------------------------------------------------------------------


def batch_size_for(records: int) -> int:
    """A `batch.size` that holds `records` 200-byte records and not one more.

    Our producer adds a record while the batch stays within `batch.size` and closes the batch at the first
    record that does not fit. Halfway between the exact sizes of `records` and `records + 1` records, so the
    byte a record's timestamp delta may add cannot move the cut.
    """
    builder = RecordBatchBuilder()
    value = b"v" * VALUE_SIZE
    now = time.time_ns() // 1_000_000
    sizes = [builder.try_append(None, value, (), now) for _ in range(records + 1)]
    return (sizes[-2] + sizes[-1]) // 2


def backbone_producer(bootstrap: str, topic: str, count: int, batch: int) -> Callable[[float], int]:
    if batch == 1:
        settings = {"batch_size": 1, "linger_ms": 0}
    else:  # a batch leaves when full; the long linger keeps a half-full one from leaving early
        settings = {"batch_size": batch_size_for(batch), "linger_ms": 1000}

    def work(deadline: float) -> int:
        producer = Producer(bootstrap_servers=bootstrap, acks=1, enable_idempotence=False, **settings)
        cut_short = False
        try:
            send = partial(producer.send, topic, b"v" * VALUE_SIZE, partition=0)
            sent = send_bounded(send, count, deadline)
            try:  # `send` only queues a record: the run ends when the broker has acknowledged them all
                producer.flush(max(deadline - time.perf_counter(), 1.0))
                return sent
            except TimeoutError:  # the time bound came first: count what the broker has stored by now
                cut_short = True
                return stored_records(bootstrap, topic)
        finally:
            # Closing a cut-short run fails the records still queued, a warning per batch: expected here.
            with quiet(SENDER_LOGGER) if cut_short else contextlib.nullcontext():
                producer.close(timeout=0)

    return work


@contextlib.contextmanager
def quiet(name: str) -> Iterator[None]:
    """Only errors from logger `name` while the block runs."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def batch_record_counts(log_dirs: str, topic: str) -> collections.Counter[int]:
    """How many records each stored batch of partition 0 holds (batches as the producer sent them: the
    broker appends a request's batch as it came). Checks that batch 1 and batch 50 mean what they say."""
    return collections.Counter(header.record_count for header in stored_batches(log_dirs, topic))


def check_batches(log_dirs: str, topic: str, per_batch: int) -> None:
    """Every stored batch holds `per_batch` records, but for one smaller last one (what the flush sent)."""
    counts = batch_record_counts(log_dirs, topic)
    others = {size: number for size, number in counts.items() if size != per_batch}
    if sum(others.values()) > 1 or any(size > per_batch for size in others):
        raise RuntimeError(f"{topic}: batches of {dict(counts)} records (count: batches), not {per_batch}")


def stored_records(bootstrap: str, topic: str) -> int:
    partition = TopicPartition(topic, 0)
    with Consumer(bootstrap_servers=bootstrap) as consumer:
        return consumer.end_offsets([partition])[partition]


def kcat_producer(bootstrap: str, topic: str, count: int, lines: Path) -> Callable[[float], int]:
    """librdkafka's producer with one record per batch (so per request), to tell our producer's cost per
    request from the broker's. The file holds `count` records; a kcat still running 30 s past the deadline
    is an error, not a figure."""

    def work(deadline: float) -> int:
        command = [
            "kcat", "-P", "-b", bootstrap, "-t", topic, "-p", "0", "-l", str(lines),
            "-X", "acks=1", "-X", "linger.ms=0", "-X", "batch.num.messages=1",
            "-X", "enable.idempotence=false",
        ]  # fmt: skip
        subprocess.run(command, check=True, timeout=max(deadline - time.perf_counter(), 1.0) + 30)
        return count

    return work


def backbone_consumer(bootstrap: str, topic: str, count: int) -> Callable[[float], int]:
    fetch_bytes = PREFETCH_RECORDS * batch_size_for(50) // 50

    def work(deadline: float) -> int:
        received = 0
        with Consumer(
            bootstrap_servers=bootstrap,
            auto_offset_reset="earliest",
            fetch_max_bytes=fetch_bytes,
            max_partition_fetch_bytes=fetch_bytes,
        ) as consumer:
            consumer.assign([TopicPartition(topic, 0)])
            while received < count and time.perf_counter() < deadline:
                for records in consumer.poll(timeout_ms=500).values():
                    for record in records:  # a record counts once the application has its value
                        if len(record.value) == VALUE_SIZE:
                            received += 1
        return received

    return work


# -- RabbitMQ ------------------------------------------------------------------------------------------


def rabbitmq_connection(port: int):
    import pika

    return pika.BlockingConnection(pika.ConnectionParameters(HOST, port, heartbeat=0))


def rabbitmq_depth(channel, queue: str) -> int:
    return channel.queue_declare(queue, durable=True, passive=True).method.message_count


def rabbitmq_publisher(port: int, queue: str, count: int) -> Callable[[float], int]:
    import pika

    def work(deadline: float) -> int:
        connection = rabbitmq_connection(port)
        try:
            channel = connection.channel()
            channel.queue_declare(queue, durable=True)
            persistent = pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent)
            publish = partial(channel.basic_publish, "", queue, b"v" * VALUE_SIZE, persistent)
            sent = send_bounded(publish, count, deadline)
            # Without confirms a publish is only written to the socket: the run ends when the queue has them.
            wait_until(
                lambda: rabbitmq_depth(channel, queue) >= sent, max(deadline, time.perf_counter() + 1.0)
            )
            return rabbitmq_depth(channel, queue)
        finally:
            connection.close()

    return work


def rabbitmq_consumer(port: int, queue: str, count: int) -> Callable[[float], int]:
    def work(deadline: float) -> int:
        connection = rabbitmq_connection(port)
        received = 0

        def on_message(_channel, _method, _properties, body: bytes) -> None:
            nonlocal received
            if len(body) == VALUE_SIZE:
                received += 1

        try:
            channel = connection.channel()
            channel.basic_qos(prefetch_count=PREFETCH_RECORDS)
            channel.basic_consume(queue, on_message, auto_ack=True)
            while received < count and time.perf_counter() < deadline:
                connection.process_data_events(time_limit=0.5)
            return received
        finally:
            connection.close()

    return work


# -- ActiveMQ ------------------------------------------------------------------------------------------


class StompCounter:
    """A stomp.py listener that counts 200-byte messages and notes receipts, each with an event to wait on."""

    def __init__(self, expected: int = 0) -> None:
        self.expected = expected
        self.received = 0
        self.all_received = threading.Event()
        self.receipts: set[str] = set()
        self.receipt_arrived = threading.Condition()
        self.error: str | None = None

    def on_message(self, frame) -> None:
        if len(frame.body) == VALUE_SIZE:
            self.received += 1
            if self.received >= self.expected:
                self.all_received.set()

    def on_receipt(self, frame) -> None:
        with self.receipt_arrived:
            self.receipts.add(frame.headers.get("receipt-id", ""))
            self.receipt_arrived.notify_all()

    def on_error(self, frame) -> None:
        self.error = f"{frame.headers.get('message', '')} {frame.body!r}"
        self.all_received.set()

    def wait_for_receipt(self, receipt: str, timeout: float) -> bool:
        with self.receipt_arrived:
            return self.receipt_arrived.wait_for(lambda: receipt in self.receipts, timeout)


@contextlib.contextmanager
def stomp_connection(port: int, listener: StompCounter) -> Iterator[object]:
    import stomp

    connection = stomp.Connection([(HOST, port)], auto_decode=False)
    connection.set_listener("seed", listener)
    connection.connect(wait=True)
    try:
        yield connection
    finally:
        connection.disconnect()


def activemq_publisher(port: int, queue: str, count: int) -> Callable[[float], int]:
    def work(deadline: float) -> int:
        listener = StompCounter()
        with stomp_connection(port, listener) as connection:
            send = partial(connection.send, f"/queue/{queue}", b"v" * VALUE_SIZE, persistent="true")
            sent = send_bounded(send, count - 1, deadline)
            send(receipt="last")
            if not listener.wait_for_receipt("last", max(deadline - time.perf_counter(), 30.0)):
                raise RuntimeError(f"ActiveMQ sent no receipt for the last of {sent + 1} sends")
            if listener.error:
                raise RuntimeError(f"ActiveMQ: {listener.error}")
            return sent + 1

    return work


def activemq_consumer(port: int, queue: str, count: int) -> Callable[[float], int]:
    def work(deadline: float) -> int:
        listener = StompCounter(count)
        with stomp_connection(port, listener) as connection:
            connection.subscribe(
                f"/queue/{queue}", id="seed", ack="auto", headers={"activemq.prefetchSize": PREFETCH_RECORDS}
            )
            listener.all_received.wait(max(deadline - time.perf_counter(), 0.0))
            if listener.error:
                raise RuntimeError(f"ActiveMQ: {listener.error}")
            return listener.received

    return work


# -- the run -------------------------------------------------------------------------------------------

OURS_1 = "Backbone, batch 1 (our Producer)"
OURS_50 = "Backbone, batch 50 (our Producer)"
KCAT_1 = "Backbone, batch 1 (kcat: librdkafka, C)"
RABBITMQ = "RabbitMQ"
ACTIVEMQ = "ActiveMQ"
BACKBONE = "Backbone"
PRODUCE_ROWS = (OURS_1, OURS_50, KCAT_1, RABBITMQ, ACTIVEMQ)
CONSUME_ROWS = {OURS_50: BACKBONE, RABBITMQ: RABBITMQ, ACTIVEMQ: ACTIVEMQ}  # produce row -> consume row


def measure(args: argparse.Namespace, directory: Path) -> tuple[dict[str, list[Run]], dict[str, list[Run]]]:
    """Each measurement `args.rounds` times, the systems taking turns: (produce runs, consume runs)."""
    produced: dict[str, list[Run]] = {name: [] for name in PRODUCE_ROWS}
    consumed: dict[str, list[Run]] = {name: [] for name in CONSUME_ROWS.values()}
    with (
        backbone_broker(directory / "backbone") as broker,
        rabbitmq_broker(directory / "rabbitmq") as rabbitmq_port,
        activemq_broker(directory / "activemq") as activemq_port,
    ):
        bootstrap, log_dirs = broker.bootstrap, broker.properties["log.dirs"]
        lines = directory / "records.txt"  # kcat's input: one 200-byte record a line, newline excluded
        lines.write_bytes((b"v" * VALUE_SIZE + b"\n") * args.records)
        for round_number in range(1, args.rounds + 1):
            name = f"seed-{round_number}-{uuid.uuid4().hex[:6]}"
            topics = {OURS_1: f"{name}-b1", OURS_50: f"{name}-b50", KCAT_1: f"{name}-kcat"}
            batch = {OURS_1: 1, OURS_50: 50, KCAT_1: 1}
            with Admin(bootstrap_servers=bootstrap) as admin:
                admin.create_topics([NewTopic(topic, 1, 1) for topic in topics.values()])
            producers = {
                OURS_1: backbone_producer(bootstrap, topics[OURS_1], args.records, 1),
                OURS_50: backbone_producer(bootstrap, topics[OURS_50], args.records, 50),
                KCAT_1: kcat_producer(bootstrap, topics[KCAT_1], args.records, lines),
                RABBITMQ: rabbitmq_publisher(rabbitmq_port, name, args.records),
                ACTIVEMQ: activemq_publisher(activemq_port, name, args.records),
            }
            for label, work in producers.items():
                run = timed(work, args.seconds)
                produced[label].append(run)
                print_run(round_number, f"produce {label}", run)
                if label in topics:
                    check_batches(log_dirs, topics[label], batch[label])
            # Each consumer reads what its system's producer wrote this round (Backbone: the batch-50 topic).
            written = {label: runs[-1].records for label, runs in produced.items()}
            consumers = {
                BACKBONE: backbone_consumer(bootstrap, topics[OURS_50], written[OURS_50]),
                RABBITMQ: rabbitmq_consumer(rabbitmq_port, name, written[RABBITMQ]),
                ACTIVEMQ: activemq_consumer(activemq_port, name, written[ACTIVEMQ]),
            }
            for label, work in consumers.items():
                run = timed(work, args.seconds)
                consumed[label].append(run)
                print_run(round_number, f"consume {label}", run)
    return produced, consumed


def print_run(round_number: int, what: str, run: Run) -> None:
    line = f"round {round_number}: {what}: {run.records:,} records in {run.seconds:.2f} s = {run.rate:,.0f}/s"
    print(line, file=sys.stderr, flush=True)


def median_rate(runs: list[Run]) -> float:
    return statistics.median(run.rate for run in runs)


def package_version(name: str) -> str:
    result = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Version}", name], capture_output=True, text=True, check=False
    )
    return result.stdout.strip() or "unknown"


def compared_brokers() -> str:
    from importlib.metadata import version

    rabbitmq = f"RabbitMQ {package_version('rabbitmq-server')} with pika {version('pika')}"
    activemq = f"ActiveMQ {package_version('activemq')} with stomp.py {version('stomp.py')}"
    return f"{rabbitmq}, {activemq}; all on loopback, data on the same disk"


def ratio(ours: float, theirs: float) -> str:
    return f"{ours / theirs:,.1f}x" if theirs > 0 else "n/a"


READING_GUIDE = (
    "How to read it: batch 1 measures the cost of one request. The kcat row is the same broker taking",
    "one record per request from librdkafka's C producer, so the distance from it to our Producer's batch-1",
    "figure is our Python producer's cost per request, not the broker's. Neither pika nor stomp.py batches,",
    "so RabbitMQ's and ActiveMQ's one publish figure stands against both of ours. Runs include connecting.",
)


def render(args: argparse.Namespace, command: str, started: str, produced, consumed) -> str:
    """The figures: command, date, machine, settings, the table and the ratios against the targets."""
    about = (
        f"{VALUE_SIZE}-byte messages, one producer, then one consumer reading what it wrote; every run "
        f"bounded by {args.records:,} records and {args.seconds:.0f} s; medians of {args.rounds} rounds "
        "(all runs in brackets). Settings follow the seed (the docstring of `ops/bench/seed_comparison.py` "
        "has them in full): Backbone acks=1, batch 1 = one record per Produce request, batch 50 = 50 records "
        "per request, log flushed every 10,000 messages; RabbitMQ persistent publishes (`delivery_mode=2`, "
        "durable queue, no publisher confirms; a run ends when the queue holds them all); ActiveMQ "
        "persistent STOMP sends (KahaDB journal synced once a second; a run ends at the receipt for the last "
        "send); consumers prefetch about 1,000 messages, RabbitMQ and ActiveMQ acknowledge automatically."
    )
    lines = [
        report.run_facts(command, started, compared_brokers()),
        "",
        report.wrap(about),
        "",
        "| system | produce, records/s | consume, records/s |",
        "| --- | ---: | ---: |",
    ]
    for name, runs in produced.items():
        consume = _cell(consumed[CONSUME_ROWS[name]]) if name in CONSUME_ROWS else ""
        lines.append(f"| {name} | {_cell(runs)} | {consume} |")
    mine = {row: median_rate(produced[row]) for row in (OURS_50, OURS_1, KCAT_1)}
    mine[BACKBONE] = median_rate(consumed[BACKBONE])
    lines += [
        "",
        "Ratios, Backbone's median over theirs (targets: publish at least 10x, consume at least 4x):",
        "",
        "| against | publish: ours, batch 50 | ours, batch 1 | kcat, batch 1 | consume |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for other in (RABBITMQ, ACTIVEMQ):
        publish, consume = median_rate(produced[other]), median_rate(consumed[other])
        cells = [ratio(mine[row], publish) for row in (OURS_50, OURS_1, KCAT_1)]
        lines.append(f"| {other} | {' | '.join(cells)} | {ratio(mine[BACKBONE], consume)} |")
    lines += ["", *READING_GUIDE]
    return "\n".join(lines) + "\n"


def _cell(runs: list[Run]) -> str:
    return f"{median_rate(runs):,.0f} ({', '.join(f'{run.rate:,.0f}' for run in runs)})"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=100_000, help="records per run (default 100,000)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each measurement (default 3)")
    parser.add_argument("--seconds", type=float, default=60.0, help="time limit of one run (default 60)")
    parser.add_argument("--install", action="store_true", help="run ops/bench/install-brokers first")
    parser.add_argument("--write", action="store_true", help="write the figures into docs/benchmarks.md")
    args = parser.parse_args()
    if args.records < 2 or args.rounds < 1 or args.seconds <= 0:
        parser.error("--records must be at least 2, --rounds at least 1, --seconds positive")
    if args.install:
        subprocess.run([str(ROOT / "ops" / "bench" / "install-brokers")], check=True)
    missing = missing_requirements()
    if missing:
        print(f"missing: {', '.join(missing)}; {INSTALL_HINT}", file=sys.stderr)
        return 2

    command = report.command("seed_comparison.py")
    # The brokers run in sessions of their own: a SIGTERM or SIGHUP here must unwind and stop them too.
    stop_on_termination()
    started = report.started()
    with tempfile.TemporaryDirectory(prefix="seed-comparison-", dir=ROOT.parent) as directory:
        produced, consumed = measure(args, Path(directory))
    section = render(args, command, started, produced, consumed)
    report.publish(NAME, SECTION, section, args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
