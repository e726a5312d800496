"""Mirror speed: one `backbone mirror` process between two local clusters.

Starts a throwaway ZooKeeper with two one-broker clusters (source and target, each under its own chroot),
then measures:

- **throughput**: N records of 200 bytes are written to a 3-partition source topic first; a mirror process
  then copies them; the rate is N over the time from the first record seen in the target to the last
  (the process's start-up and group join are reported separately);
- **latency**: with the mirror running, a producer writes to the source at a steady rate (default 5,000
  records/s for 20 s, the send time in each value) and a consumer on the target measures send-to-poll time:
  p50, p99, max.

    python ops/bench/mirror_bench.py [--records 1000000] [--rate 5000] [--seconds 20] [--write]

Prints a markdown table with the exact command; `--write` puts it into the mirror's section of
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import report
from local_cluster import stop_on_termination

from backbone.client import Admin, Consumer, NewTopic, Producer, TopicPartition

VALUE_SIZE = 200
SECTION = "## Mirror"
NAME = "mirror"
SEND_TIME = struct.Struct(">q")
GROUP_SETTINGS = {"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 3}


@contextlib.contextmanager
def two_clusters() -> Iterator[tuple[str, str]]:
    from backbone.coordination import ZooKeeperServer, find_free_port
    from backbone.dev.processes import BrokerProcess

    with tempfile.TemporaryDirectory(prefix="mirror-bench-") as tmp:
        zookeeper = ZooKeeperServer(Path(tmp) / "zk", find_free_port(), force_sync=False)
        zookeeper.start(timeout=60.0)
        brokers = []
        try:
            for name in ("source", "target"):
                broker = BrokerProcess(
                    1, f"{zookeeper.connect_string}/{name}", Path(tmp) / name, properties=GROUP_SETTINGS
                )
                brokers.append(broker)
                broker.start(timeout=60.0)
            yield brokers[0].bootstrap, brokers[1].bootstrap
        finally:
            for broker in brokers:
                broker.stop(timeout=30)
            zookeeper.stop()


@contextlib.contextmanager
def mirror_process(source: str, target: str, topic: str, log: Path) -> Iterator[subprocess.Popen]:
    command = [
        sys.executable, "-m", "backbone", "mirror", "--source-bootstrap", source,
        "--target-bootstrap", target, "--source-alias", "source", "--target-alias", "target",
        "--topics", topic, "--group", f"bench-{topic}",
    ]  # fmt: skip
    with log.open("ab") as out:
        process = subprocess.Popen(command, stdout=out, stderr=out, stdin=subprocess.DEVNULL)
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def end_total(consumer: Consumer, topic: str) -> int:
    if topic not in consumer.topics():
        return 0
    partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
    return sum(consumer.end_offsets(partitions).values())


def throughput(source: str, target: str, records: int, log: Path) -> dict[str, float]:
    topic = "throughput"
    with Admin(bootstrap_servers=source) as admin:
        admin.create_topics([NewTopic(topic, 3, 1)])
    value = b"v" * VALUE_SIZE
    with Producer(bootstrap_servers=source, linger_ms=5, batch_size=262_144) as producer:
        for _ in range(records):
            producer.send(topic, value)
        producer.flush()
    started = time.perf_counter()
    first = None
    with mirror_process(source, target, topic, log), Consumer(bootstrap_servers=target) as watcher:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            copied = end_total(watcher, topic)
            now = time.perf_counter()
            if copied and first is None:
                first = (now, copied)
            if copied >= records:
                break
            print(f"  {copied:,} of {records:,} copied", file=sys.stderr)
            time.sleep(0.5)
        done = time.perf_counter()
    if first is None or copied < records:
        raise SystemExit(f"the mirror copied {copied} of {records} records within the time bound; see {log}")
    first_time, first_count = first
    return {
        "records/s": (records - first_count) / max(done - first_time, 1e-9),
        "start-up s": first_time - started,
        "total s": done - started,
    }


def latency(source: str, target: str, rate: int, seconds: float, log: Path) -> dict[str, float]:
    topic = "latency"
    with Admin(bootstrap_servers=source) as admin:
        admin.create_topics([NewTopic(topic, 3, 1)])
    total = int(rate * seconds)
    latencies: list[float] = []
    with (
        mirror_process(source, target, topic, log),
        Consumer(bootstrap_servers=target, fetch_max_wait_ms=100) as reader,
    ):
        # The mirror creates the target topic once it sees the first record.
        with Producer(bootstrap_servers=source, linger_ms=0) as producer:
            producer.send(topic, SEND_TIME.pack(time.time_ns()) + b"w" * (VALUE_SIZE - 8)).get(timeout=30)
        deadline = time.monotonic() + 60
        while topic not in reader.topics() and time.monotonic() < deadline:
            time.sleep(0.2)
        partitions = [TopicPartition(topic, p) for p in reader.partitions_for_topic(topic)]
        reader.assign(partitions)
        reader.seek_to_end(*partitions)
        for tp in partitions:
            reader.position(tp)
        stop = threading.Event()

        def produce() -> None:
            padding = b"p" * (VALUE_SIZE - SEND_TIME.size)
            with Producer(bootstrap_servers=source, linger_ms=0) as producer:
                began = time.perf_counter()
                for i in range(total):
                    if stop.is_set():
                        break
                    delay = began + i / rate - time.perf_counter()
                    if delay > 0:
                        time.sleep(delay)
                    producer.send(topic, SEND_TIME.pack(time.time_ns()) + padding)

        writer = threading.Thread(target=produce)
        writer.start()
        deadline = time.monotonic() + seconds + 60
        try:
            while len(latencies) < total and time.monotonic() < deadline:
                for batch in reader.poll(timeout_ms=200).values():
                    now = time.time_ns()
                    latencies.extend((now - SEND_TIME.unpack_from(r.value)[0]) / 1e6 for r in batch)
        finally:
            stop.set()
            writer.join(60)
    latencies.sort()
    if not latencies:
        raise SystemExit(f"no record reached the target; see {log}")

    def quantile(q: float) -> float:
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))]

    return {
        "records": len(latencies),
        "p50 ms": quantile(0.5),
        "p99 ms": quantile(0.99),
        "max ms": latencies[-1],
    }


def throughput_cell(moved: dict[str, float]) -> str:
    if moved["records/s"] <= 0:  # the first look (every 0.5 s) already found every record copied
        return "not timed: too few records (raise --records)"
    return f"{moved['records/s']:,.0f} records/s"


def render(args: argparse.Namespace, when: str, moved: dict, timed: dict) -> str:
    rows = [
        ["mirror throughput, 200-byte records", throughput_cell(moved), ">= 400,000"],
        ["mirror start-up (process start to first copied record)", f"{moved['start-up s']:.1f} s", ""],
        [f"produce in the source to visible in the target, at {args.rate:,} records/s: p50",
         f"{timed['p50 ms']:.1f} ms", ""],
        ["the same, p99", f"{timed['p99 ms']:.1f} ms", "<= 2 s"],
        ["the same, max", f"{timed['max ms']:.1f} ms", ""],
    ]  # fmt: skip
    return "\n".join(
        [
            report.run_facts(report.command("mirror_bench.py"), when),
            "",
            report.table(["measurement", "value", "target"], rows),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rate", type=int, default=5_000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--write", action="store_true", help="write the figures into docs/benchmarks.md")
    args = parser.parse_args()
    stop_on_termination()
    when = report.started()
    log = Path(tempfile.mkdtemp(prefix="mirror-bench-log-")) / "mirror.log"
    with two_clusters() as (source, target):
        moved = throughput(source, target, args.records, log)
        timed = latency(source, target, args.rate, args.seconds, log)
    body = render(args, when, moved, timed)
    print(f"mirror log: {log}", file=sys.stderr)
    report.publish(NAME, SECTION, body, args.write)


if __name__ == "__main__":
    main()
