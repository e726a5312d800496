"""Replication benchmarks on a local 3-broker cluster with default settings.

    python ops/bench/replication_bench.py [--records 300000] [--rounds 3] [--kills 20] [--write]

1. Throughput: the same producer writes `--records` 200-byte records to a topic with replication factor 1
   and acks=1, then to one with replication factor 3, min.insync.replicas=2 and acks=all; the rounds
   alternate, so both see the same machine. Prints records/s (median) and the ratio.
2. Failover: a producer with acks=all sends a record every 5 ms; the benchmark kills (SIGKILL) the
   partition leader `--kills` times and measures the time from the kill to the first acknowledgement of a
   record sent after it (necessarily written by the new leader), restarting the killed broker and waiting for
   a full ISR between kills. Prints p50 and max.

Every step is bounded in count and time. ZooKeeper and the brokers are started and stopped by the script.
`--write` puts the figures into the replication section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import report
from local_cluster import stop_on_termination

from backbone.client import Admin, NewTopic, Producer
from backbone.coordination import ClusterStore, ZooKeeperServer, find_free_port
from backbone.dev.processes import BrokerProcess

VALUE = b"x" * 200
SECTION = "## Replication"
NAME = "replication"
RF1 = "rf1 acks=1"
RF3 = "rf3 acks=all"


def produce(bootstrap: str, topic: str, count: int, acks: str) -> float:
    """records/s for `count` records with `acks`; every record must be acknowledged."""
    producer = Producer(bootstrap_servers=bootstrap, acks=acks, linger_ms=5, batch_size=1_000_000)
    send = producer.send
    try:
        started = time.perf_counter()
        futures = [send(topic, VALUE, partition=0) for _ in range(count)]
        producer.flush(timeout=300)
        seconds = time.perf_counter() - started
        failed = sum(1 for f in futures[-1000:] if f.exception() is not None)
    finally:
        producer.close()
    if failed:
        raise RuntimeError(f"{topic}: {failed} of the last 1000 records failed")
    return count / seconds


def throughput(bootstrap: str, records: int, rounds: int) -> dict[str, list[float]]:
    with Admin(bootstrap_servers=bootstrap) as admin:
        topics = []
        for r in range(rounds):
            topics += [
                NewTopic(f"rf1-{r}", 1, 1),
                NewTopic(f"rf3-{r}", 1, 3, configs={"min.insync.replicas": "2"}),
            ]
        admin.create_topics(topics)
    time.sleep(1.0)  # leaders elected and followers fetching before the clock starts
    results: dict[str, list[float]] = {RF1: [], RF3: []}
    for r in range(rounds):
        results[RF1].append(produce(bootstrap, f"rf1-{r}", records, "1"))
        results[RF3].append(produce(bootstrap, f"rf3-{r}", records, "all"))
        print(f"round {r + 1}: rf1 {results[RF1][-1]:,.0f}/s rf3 {results[RF3][-1]:,.0f}/s", file=sys.stderr)
    return results


class PacedProducer:
    """acks=all, one record every `interval` seconds; remembers when each acknowledgement arrived."""

    def __init__(self, bootstrap: str, topic: str, interval: float = 0.005) -> None:
        self.topic = topic
        self.interval = interval
        self.acks: list[tuple[float, float]] = []  # (sent at, acknowledged at)
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.producer = Producer(bootstrap_servers=bootstrap, acks="all", linger_ms=0, retry_backoff_ms=20)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        for _ in range(2_000_000):  # bounded: 10,000 s at the pace
            if self.stop.is_set():
                return
            sent = time.monotonic()
            self.producer.send(self.topic, VALUE, partition=0, callback=self._answer(sent))
            time.sleep(self.interval)

    def _answer(self, sent: float):
        def record(metadata, error) -> None:
            if error is None:
                with self.lock:
                    self.acks.append((sent, time.monotonic()))

        return record

    def first_ack_of_record_sent_after(self, moment: float, timeout: float) -> float | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                found = [acked for sent, acked in self.acks if sent >= moment]
            if found:
                return min(found)
            time.sleep(0.005)
        return None

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)
        self.producer.close(timeout=30)


def failover(brokers: list[BrokerProcess], store: ClusterStore, kills: int) -> list[float]:
    bootstrap = ",".join(b.bootstrap for b in brokers)
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic("failover", 1, 3, configs={"min.insync.replicas": "2"})])
    wait(lambda: len(store.get_partition_state("failover", 0).isr) == 3, 60, "a full ISR")
    producer = PacedProducer(bootstrap, "failover")
    times: list[float] = []
    try:
        for kill in range(kills):
            wait(lambda: len(store.get_partition_state("failover", 0).isr) == 3, 120, "a full ISR")
            time.sleep(0.5)  # steady traffic on the current leader before the kill
            victim = brokers[store.get_partition_state("failover", 0).leader - 1]
            killed_at = time.monotonic()
            victim.kill()
            acked_at = producer.first_ack_of_record_sent_after(killed_at, timeout=120)
            if acked_at is None:
                raise RuntimeError(f"kill {kill + 1}: no acknowledged write within 120 s")
            times.append(acked_at - killed_at)
            print(
                f"kill {kill + 1}: broker {victim.broker_id}, first acks=all write after {times[-1]:.2f} s",
                file=sys.stderr,
            )
            victim.start(timeout=120)
    finally:
        producer.close()
    return times


def wait(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} after {timeout:.0f} s")
        time.sleep(0.05)


def render(args: argparse.Namespace, when: str, results: dict[str, list[float]], times: list[float]) -> str:
    lines = [report.run_facts(report.command("replication_bench.py"), when)]
    if results:
        labels = {
            RF1: "replication factor 1, acks=1",
            RF3: "replication factor 3, acks=all, min.insync.replicas=2",
        }
        medians = {key: statistics.median(rates) for key, rates in results.items()}
        rows = [
            [label, f"{medians[key]:,.0f}", ", ".join(f"{rate:,.0f}" for rate in results[key])]
            for key, label in labels.items()
        ]
        rows.append(["ratio", f"{medians[RF3] / medians[RF1]:.0%} (target: at least 40%)", ""])
        header = [f"{args.records:,} records of 200 bytes", f"records/s (median of {args.rounds})", "runs"]
        lines += ["", report.table(header, rows)]
    if times:
        p50, worst = statistics.median(times), max(times)
        failover = (
            f"Failover over {len(times)} leader kills, from the kill to the first acks=all acknowledgement "
            f"of a record sent after it: **p50 {p50:.2f} s, max {worst:.2f} s** (target: p50 at most 3 s)."
        )
        lines += ["", report.wrap(failover)]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--write", action="store_true", help="write the figures into docs/benchmarks.md")
    args = parser.parse_args()
    stop_on_termination()
    when = report.started()
    with tempfile.TemporaryDirectory(dir=report.ROOT.parent) as work:
        directory = Path(work)
        zookeeper = ZooKeeperServer(directory / "zk", find_free_port(), force_sync=False)
        zookeeper.start(timeout=60)
        connect = zookeeper.connect_string + "/bench"
        brokers = [BrokerProcess(i, connect, directory / f"broker-{i}") for i in (1, 2, 3)]
        store = ClusterStore(connect)
        try:
            for broker in brokers:
                broker.start(timeout=60)
            store.start()
            bootstrap = ",".join(b.bootstrap for b in brokers)
            results = throughput(bootstrap, args.records, args.rounds) if args.rounds else {}
            times = failover(brokers, store, args.kills) if args.kills else []
        finally:
            store.close()
            for broker in brokers:
                broker.stop()
            zookeeper.stop()
    body = render(args, when, results, times)
    report.publish(NAME, SECTION, body, args.write)


if __name__ == "__main__":
    main()
