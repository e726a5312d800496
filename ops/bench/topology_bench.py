"""The topology `ops/start` runs, measured end to end: dc1, dc2 and aggregate with 3 brokers each, topics with
three replicas and min.insync.replicas=2, the two mirrors and the audit counters, all on this machine.

    python ops/bench/topology_bench.py [--records 200000] [--write]

Starts the topology with `backbone dev up`'s own code in a temporary directory on free ports, creates a
topic of 3 partitions in dc1, then sends `--records` 200-byte values with our producer (acks=all) and
measures: the produce rate into dc1 (every record acknowledged by two in-sync replicas or more), and the
rate through the mirror (from the first send until the aggregate holds every record). Stops everything at
the end, also on failure; every wait is bounded.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import report
from local_cluster import stop_on_termination

from backbone.client import Admin, NewTopic, Producer, TopicPartition
from backbone.dev import topology
from backbone.protocol.errors import KafkaError

NAME = "topology"
SECTION = "## The local topology (`ops/start`)"
VALUE_SIZE = 200
PARTITIONS = 3
DEADLINE_S = 600


def end_total(bootstrap: str, topic: str) -> int:
    with Admin(bootstrap_servers=bootstrap) as admin:
        if topic not in admin.list_topics():
            return 0
        specs = {TopicPartition(topic, p): "latest" for p in range(PARTITIONS)}
        try:
            return sum(o.offset for o in admin.list_offsets(specs).values())
        except KafkaError:  # a partition without a leader yet counts as empty
            return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--write", action="store_true", help="put the figures into docs/benchmarks.md")
    args = parser.parse_args(argv)
    stop_on_termination()
    when = report.started()
    with tempfile.TemporaryDirectory(prefix="topology-bench-") as tmp:
        directory = Path(tmp) / "dev"
        progress = lambda line: print(line, file=sys.stderr)  # noqa: E731
        try:
            started = topology.up(directory, brokers=3, progress=progress, preferred_ports=False)
            dc1 = started.data["clusters"]["dc1"]["bootstrap"]
            aggregate = started.data["clusters"]["aggregate"]["bootstrap"]
            with Admin(bootstrap_servers=dc1) as admin:
                admin.create_topics([NewTopic("bench", PARTITIONS, 3)])
            value = b"x" * VALUE_SIZE
            producer = Producer(bootstrap_servers=dc1, acks="all", linger_ms=5, batch_size=1_000_000)
            first = time.perf_counter()
            try:
                for i in range(args.records):
                    producer.send("bench", value, partition=i % PARTITIONS)
                producer.flush(timeout=DEADLINE_S)
            finally:
                producer.close()
            produced = time.perf_counter() - first
            deadline = time.monotonic() + DEADLINE_S
            while end_total(aggregate, "bench") < args.records:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the aggregate did not get {args.records} records in {DEADLINE_S} s")
                time.sleep(0.2)
            mirrored = time.perf_counter() - first
        finally:
            topology.down(directory, progress=progress)
    rows = [
        ["produce into dc1 (our producer, acks=all)", f"{args.records / produced:,.0f}", f"{produced:.1f}"],
        [
            "through the mirror into aggregate (first send to last copy)",
            f"{args.records / mirrored:,.0f}",
            f"{mirrored:.1f}",
        ],
    ]
    about = (
        f"{args.records:,} records of {VALUE_SIZE} bytes into a topic of {PARTITIONS} partitions, "
        "3 replicas, min.insync.replicas=2; 9 brokers, 2 mirrors, 3 audit counters and ZooKeeper share "
        "the 2 cores."
    )
    body = report.figures("topology_bench.py", when, about, ["what", "records/s", "seconds"], rows)
    report.publish(NAME, SECTION, body, args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
