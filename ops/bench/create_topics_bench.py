"""How long CreateTopics and CreatePartitions take for many partitions on a 3-broker cluster.

    python ops/bench/create_topics_bench.py [--rounds 3] [--compare DIR] [--write]

The request is the one librdkafka's admin test (0081) sends: 7 topics of 1, 8, 15, 22, 29 and 36 partitions
and one of the broker's default 4, each with 3 replicas (115 partitions, 345 replicas), then the 8-partition
topic grown to 36. Each is timed from the request until the answer, which the broker gives once every new
partition has a leader in its metadata; every topic's outcome is checked. Each round starts a fresh cluster.
With `--compare DIR` every round also runs the brokers of another checkout (say, of main) on a cluster of
its own, alternating with this one, so both sides are measured under the same load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from ops.bench.report import figures, publish, started
from ops.client_suites.cluster import SUITE_PROPERTIES, running_cluster

THIS_TREE = Path(__file__).resolve().parents[2]
PARTITION_COUNTS = (1, 8, 15, 22, 29, 36, -1)  # -1: the broker's num.partitions (4 here)
GROWN_TO = 36


def _wait(futures: dict, what: str) -> None:
    for name, future in futures.items():
        try:
            future.result()
        except Exception as exc:
            raise SystemExit(f"{what} {name} failed: {exc}") from exc


def one_round(tree: Path, work: Path) -> tuple[float, float]:
    """(seconds to create the 7 topics, seconds to grow one to 36) on a fresh cluster of `tree`'s brokers."""
    os.environ["PYTHONPATH"] = str(tree)  # the brokers run the code of `tree`
    with running_cluster(work, SUITE_PROPERTIES) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        topics = [
            NewTopic(f"bench-{i}", num_partitions=n, replication_factor=3)
            for i, n in enumerate(PARTITION_COUNTS)
        ]
        started_at = time.monotonic()
        _wait(admin.create_topics(topics, operation_timeout=120, request_timeout=180), "creating topic")
        created = time.monotonic() - started_at
        started_at = time.monotonic()
        grow = [NewPartitions("bench-1", GROWN_TO)]
        _wait(admin.create_partitions(grow, operation_timeout=120, request_timeout=180), "growing topic")
        grown = time.monotonic() - started_at
        del admin  # closed before its brokers stop, so that it does not log their going
    return created, grown


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--compare", type=Path, help="also run the brokers of this checkout, alternately")
    parser.add_argument("--write", action="store_true", help="put the figures into docs/benchmarks.md")
    args = parser.parse_args()
    when = started()
    trees = [THIS_TREE] if args.compare is None else [args.compare.resolve(), THIS_TREE]
    times: dict[Path, list[tuple[float, float]]] = {tree: [] for tree in trees}
    with tempfile.TemporaryDirectory(prefix="create-topics-bench-") as scratch:
        for round_number in range(args.rounds):
            for index, tree in enumerate(trees):
                times[tree].append(one_round(tree, Path(scratch) / f"round-{round_number}-{index}"))
                created, grown = times[tree][-1]
                print(f"round {round_number + 1} {tree}: created in {created:.2f} s, grown in {grown:.2f} s")
    rows = []
    for tree in trees:
        created = [c for c, _ in times[tree]]
        grown = [g for _, g in times[tree]]
        rows.append(
            [
                "this checkout" if tree == THIS_TREE else f"`{tree}`",
                f"**{statistics.median(created):.2f} s** ({', '.join(f'{c:.2f}' for c in created)})",
                f"**{statistics.median(grown):.2f} s** ({', '.join(f'{g:.2f}' for g in grown)})",
            ]
        )
    about = (
        "One CreateTopics request of 7 topics with 3 replicas each (1, 8, 15, 22, 29, 36 and 4 partitions: "
        f"librdkafka's test 0081), then CreatePartitions growing the 8-partition one to {GROWN_TO}; medians "
        f"of {args.rounds} rounds on fresh 3-broker clusters, each round's figures in brackets."
    )
    header = ["brokers", "CreateTopics, 115 partitions x 3", f"CreatePartitions, 8 to {GROWN_TO} x 3"]
    publish(
        "create_topics",
        "## Creating topics",
        figures("create_topics_bench.py", when, about, header, rows),
        args.write,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
