"""Produce at one record per request: kcat (librdkafka's C producer, acks=1) against one broker.

    python ops/bench/batch1_bench.py [--rounds 3] [--seconds 10] [--baseline DIR] [--write]

Each run is `profile_broker.py run --loads kcat-1 --profile none` (its docstring has the details: one
broker flushing every 10,000 messages, a fresh one-partition topic, 200-byte records, `batch.num.messages=1`,
`linger.ms=0`, two seconds of warm-up, then a measured window): requests/s is what the broker stored in
the window (one record a request), and the broker's CPU time per request (user + system, from /proc), a
figure less moved than the rate by other work on a shared machine.

`--baseline DIR` runs the broker from another checkout (e.g. `git worktree add /tmp/before main`) in turns
with this one's, `--rounds` times each: before and after, side by side in one run.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import report

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## Produce at one record per request"
NAME = "batch-1"
RESULT = re.compile(r"kcat-1: ([\d,]+) records/s over .*?broker CPU (\d+)% = ([\d.]+) us/record")


def one_run(code: Path, seconds: float) -> tuple[float, float, float]:
    """(requests/s, broker CPU µs per request, the broker's share of a core in %) of one kcat-1 run against
    a broker running `code`.

    Run from `code`'s directory: `python -m backbone` (the broker) puts its working directory first on the
    path."""
    command = [
        sys.executable, str(ROOT / "ops/bench/profile_broker.py"), "run", "--loads", "kcat-1",
        "--profile", "none", "--seconds", str(seconds), "--code", str(code),
    ]  # fmt: skip
    completed = subprocess.run(command, cwd=code, capture_output=True, text=True, timeout=seconds + 240)
    found = RESULT.search(completed.stdout)
    if completed.returncode != 0 or found is None:
        raise RuntimeError(
            f"kcat-1 run failed ({completed.returncode}):\n{completed.stdout}{completed.stderr}"
        )
    return float(found.group(1).replace(",", "")), float(found.group(3)), float(found.group(2))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0, help="each run's measured window")
    parser.add_argument("--baseline", type=Path, help="a checkout whose broker runs in turns with this one's")
    parser.add_argument("--write", action="store_true", help="write the figures into docs/benchmarks.md")
    args = parser.parse_args()
    when = report.started()
    codes = {"this checkout": ROOT}
    if args.baseline is not None:
        codes = {"baseline": args.baseline.resolve(), **codes}
    runs: dict[str, list[tuple[float, float, float]]] = {label: [] for label in codes}
    for r in range(args.rounds):
        for label, code in codes.items():
            runs[label].append(one_run(code, args.seconds))
            rate, cost, share = runs[label][-1]
            print(
                f"round {r + 1}: {label}: {rate:,.0f} requests/s, broker {cost:.1f} µs/request "
                f"({share:.0f}% of a core)",
                file=sys.stderr,
            )
    rows = []
    for label, results in runs.items():
        rates, costs = [run[0] for run in results], [run[1] for run in results]
        shares = [run[2] for run in results]
        rows.append(
            [
                label,
                f"{statistics.median(rates):,.0f} ({', '.join(f'{rate:,.0f}' for rate in rates)})",
                f"{statistics.median(costs):.1f} ({', '.join(f'{cost:.1f}' for cost in costs)})",
                f"{statistics.median(shares):.0f}% ({', '.join(f'{share:.0f}' for share in shares)})",
            ]
        )
    about = (
        "kcat (librdkafka's C producer) sending one 200-byte record per Produce request, acks=1, to one "
        f"broker and one partition; {args.seconds:g} s windows, medians of {args.rounds} runs (all runs in "
        "brackets)" + (", the two brokers taking turns." if args.baseline else ".")
    )
    header = ["broker", "requests/s", "broker CPU µs per request", "broker's share of a core"]
    report.publish(NAME, SECTION, report.figures("batch1_bench.py", when, about, header, rows), args.write)


if __name__ == "__main__":
    main()
