"""acks=1 against acks=all on a 3-broker cluster, through `backbone perf produce` at its defaults.

    python ops/bench/acks_all_bench.py [--records 200000] [--rounds 3] [--partitions 12] [--baseline DIR]

Topics of `--partitions` partitions, replication factor 3, min.insync.replicas=2; one fresh topic a run.
With `--baseline DIR` a second cluster runs the brokers of another checkout (DIR) beside this one's, the
two taking turns in every round, so both see the same machine. Prints each run's records/s and p50 latency,
then the medians. ZooKeeper and the brokers are started and stopped by the script; every run is bounded.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from local_cluster import stop_on_termination

from backbone.client import Admin, NewTopic
from backbone.coordination import ZooKeeperServer, find_free_port
from backbone.dev.processes import BrokerProcess

ROOT = Path(__file__).resolve().parents[2]


def start_cluster(checkout: Path, zookeeper: str, name: str, work: Path) -> list[BrokerProcess]:
    """Three brokers running the code of `checkout`: started from it with its package first on their path
    (`python -m` puts the working directory first)."""
    brokers = [BrokerProcess(i, f"{zookeeper}/{name}", work / f"{name}-{i}") for i in (1, 2, 3)]
    here, previous = Path.cwd(), os.environ.get("PYTHONPATH")
    os.chdir(checkout)
    os.environ["PYTHONPATH"] = str(checkout)  # the brokers' processes inherit both
    try:
        for broker in brokers:
            broker.start(timeout=60)
    finally:
        os.chdir(here)
        if previous is None:
            os.environ.pop("PYTHONPATH")
        else:
            os.environ["PYTHONPATH"] = previous
    return brokers


def perf_produce(bootstrap: str, topic: str, records: int, acks: str) -> dict:
    """`backbone perf produce` at its defaults (this checkout's client) and its JSON summary."""
    done = subprocess.run(
        [sys.executable, "-m", "backbone", "perf", "produce", "--bootstrap-server", bootstrap,
         "--topic", topic, "--num-records", str(records), "--record-size", "200", "--acks", acks, "--json"],
        capture_output=True, text=True, timeout=600, cwd=ROOT, check=True,
    )  # fmt: skip
    return json.loads([line for line in done.stdout.splitlines() if line.startswith("{")][-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--baseline", type=Path, help="a checkout whose brokers run beside this one's")
    args = parser.parse_args()
    stop_on_termination()
    checkouts = {"this checkout": ROOT}
    if args.baseline is not None:
        checkouts = {"baseline": args.baseline.resolve(), **checkouts}
    runs: dict[tuple[str, str], list[dict]] = {}
    print(f"started at load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as directory:
        work = Path(directory)
        zookeeper = ZooKeeperServer(work / "zk", find_free_port(), force_sync=False)
        zookeeper.start(timeout=60)
        clusters: dict[str, list[BrokerProcess]] = {}
        try:
            for number, (name, checkout) in enumerate(checkouts.items()):
                clusters[name] = start_cluster(checkout, zookeeper.connect_string, f"cluster{number}", work)
            topics = [f"t{r}-{acks}" for r in range(args.rounds) for acks in ("1", "all")]
            for brokers in clusters.values():
                with Admin(bootstrap_servers=",".join(b.bootstrap for b in brokers)) as admin:
                    admin.create_topics(
                        [
                            NewTopic(t, args.partitions, 3, configs={"min.insync.replicas": "2"})
                            for t in topics
                        ]
                    )
            time.sleep(2.0)  # leaders elected and followers fetching before the clock starts
            for r in range(args.rounds):
                names = list(clusters) if r % 2 == 0 else list(reversed(clusters))
                for name in names:
                    bootstrap = ",".join(b.bootstrap for b in clusters[name])
                    for acks in ("1", "all"):
                        result = perf_produce(bootstrap, f"t{r}-{acks}", args.records, acks)
                        runs.setdefault((name, acks), []).append(result)
                        print(
                            f"round {r + 1} {name} acks={acks}: {result['records_per_second']:,.0f} "
                            f"records/s, p50 {result['latency_ms']['p50']:,.0f} ms, "
                            f"errors {result['errors']}",
                            flush=True,
                        )
        finally:
            for brokers in clusters.values():
                for broker in brokers:
                    broker.stop()
            zookeeper.stop()
    load = os.getloadavg()[0]
    print(f"median of {args.rounds} rounds, {args.partitions} partitions, load average {load:.1f}:")
    for (name, acks), results in runs.items():
        rate = statistics.median(r["records_per_second"] for r in results)
        p50 = statistics.median(r["latency_ms"]["p50"] for r in results)
        print(f"  {name} acks={acks}: {rate:,.0f} records/s, p50 {p50:,.0f} ms")


if __name__ == "__main__":
    main()
