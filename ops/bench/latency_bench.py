"""End-to-end latency at fixed rates: `backbone perf e2e` against one local broker.

    python ops/bench/latency_bench.py [--rates 1000,10000,100000] [--seconds 10] [--write]

Starts ZooKeeper and one broker, then for each rate runs `backbone perf e2e --json` on a fresh topic with
one partition: our producer (acks=1, linger.ms=0) sends 200-byte records at the rate for `--seconds`, and
our consumer in the same process measures, for every record, the time from just before `send` to the
moment `poll` returned it. Prints a table of percentiles; `--write` puts it into docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import report
from local_cluster import one_broker, stop_on_termination

SECTION = "## End-to-end latency"
NAME = "latency"
RECORD_SIZE = 200
GRACE_SECONDS = 120  # start-up, and records still arriving after the last send


def end_to_end(bootstrap: str, rate: int, seconds: float) -> dict:
    """`backbone perf e2e`'s JSON result at `rate` records/s for `seconds`."""
    command = [
        sys.executable, "-m", "backbone", "perf", "e2e", "--bootstrap-server", bootstrap,
        "--topic", f"e2e-{rate}", "--partitions", "1", "--replication-factor", "1",
        "--num-records", str(int(rate * seconds)), "--throughput", str(rate),
        "--record-size", str(RECORD_SIZE), "--acks", "1",
        "--max-seconds", str(seconds + GRACE_SECONDS / 2), "--json",
    ]  # fmt: skip
    done = subprocess.run(
        command, stdout=subprocess.PIPE, text=True, timeout=seconds + GRACE_SECONDS, check=False
    )
    if not done.stdout.strip():
        raise RuntimeError(
            f"backbone perf e2e at {rate:,}/s printed no result (exit status {done.returncode})"
        )
    return json.loads(done.stdout.strip().splitlines()[-1])


def render(args: argparse.Namespace, when: str, results: dict[int, dict]) -> str:
    rows = []
    for rate, result in results.items():
        latency = result.get("latency_ms", {})
        marks = [
            f"{latency[mark]:,.1f}" if mark in latency else "" for mark in ("p50", "p99", "p99.9", "max")
        ]
        received = f"{result['records']:,} ({result['records_per_second']:,.0f}/s)"
        failed = f", {result['errors']:,} failed" if result["errors"] else ""
        rows.append([f"{rate:,}", received + failed, *marks])
    about = (
        f"One broker, one partition, {RECORD_SIZE}-byte records, acks=1, linger.ms=0; at each rate for "
        f"{args.seconds:g} s; latency from just before `send` to `poll` returning the record, every record "
        "measured (ms)."
    )
    header = ["records/s sent", "records received (rate)", "p50", "p99", "p99.9", "max"]
    return report.figures("latency_bench.py", when, about, header, rows)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rates", default="1000,10000,100000", help="records/s, comma-separated")
    parser.add_argument("--seconds", type=float, default=10.0, help="how long each rate runs (10)")
    parser.add_argument("--write", action="store_true", help="write the figures into docs/benchmarks.md")
    args = parser.parse_args()
    rates = [int(rate) for rate in args.rates.split(",")]
    if args.seconds <= 0 or not rates or min(rates) < 1:
        parser.error("--seconds must be positive and every rate at least 1")
    stop_on_termination()
    when = report.started()
    results: dict[int, dict] = {}
    with (
        tempfile.TemporaryDirectory(prefix="latency-bench-", dir=report.ROOT.parent) as work,
        one_broker(Path(work)) as broker,
    ):
        for rate in rates:
            results[rate] = end_to_end(broker.bootstrap, rate, args.seconds)
            print(f"{rate:,} records/s: {json.dumps(results[rate])}", file=sys.stderr, flush=True)
    body = render(args, when, results)
    report.publish(NAME, SECTION, body, args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
