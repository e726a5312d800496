"""A librdkafka consumer at its default fetch size and at 10 MiB, and the broker's fixed cost per Fetch.

    python ops/bench/fetch_size_bench.py [--records 2000000] [--rounds 3] [--baseline DIR] [--write]

Starts a real ZooKeeper and one broker, writes `--records` records of 200 bytes into one partition with
kcat (librdkafka's C tool, at its default producer settings), then times kcat consuming all of them, at
librdkafka's default `fetch.message.max.bytes` (1 MiB a partition) and at 10 MiB, alternating the two in
every round. Every other client setting is librdkafka's default (`fetch.wait.max.ms` 500,
`fetch.min.bytes` 1).

The fit: a consume's time is its bytes at some rate plus a fixed cost per Fetch, so the two sizes' times
and their Fetch counts (counted from the batches the broker stored, packed as the broker packs a Fetch:
whole batches up to the size, at least one) give the fixed cost per Fetch:
`(time at 1 MiB - time at 10 MiB) / (fetches at 1 MiB - fetches at 10 MiB)`.

`--baseline DIR` also starts a second ZooKeeper and broker running the code in DIR (a checkout of another
commit), fills it the same way, and alternates the two brokers in every round: before and after, side by
side in one run on a shared machine.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import report
from broker_bench import records_file
from local_cluster import one_broker, stop_on_termination, stored_batches

from backbone.client import Admin, NewTopic
from backbone.dev.processes import BrokerProcess

SECTION = "## Consumer fetch size (librdkafka at its defaults)"
NAME = "fetch-size"
TOPIC = "fetch-size"
DEFAULT_FETCH = 1 << 20  # librdkafka's fetch.message.max.bytes
LARGE_FETCH = 10 << 20
SIZES = {"default (1 MiB)": DEFAULT_FETCH, "10 MiB": LARGE_FETCH}


@contextlib.contextmanager
def broker_from(code: Path | None, directory: Path) -> Iterator[BrokerProcess]:
    """One broker running this checkout's code, or `code`'s (another checkout).

    `python -m backbone` puts its working directory first on the path, so the other checkout's broker is
    started from that directory.
    """
    if code is None:
        with one_broker(directory) as broker:
            yield broker
        return
    here = os.getcwd()
    saved = os.environ.get("PYTHONPATH")
    os.chdir(code)
    os.environ["PYTHONPATH"] = str(code)
    try:
        with one_broker(directory) as broker:
            os.chdir(here)
            yield broker
    finally:
        os.chdir(here)
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def fill(bootstrap: str, work: Path, records: int) -> None:
    """`records` records of 200 bytes into partition 0 of TOPIC, by kcat at librdkafka's defaults."""
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic(TOPIC, 1, 1)])
    lines = records_file(work, records)
    command = ["kcat", "-P", "-b", bootstrap, "-t", TOPIC, "-p", "0", "-l", str(lines), "-X", "acks=1"]
    subprocess.run(command, check=True, timeout=600)


def fetch_count(log_dirs: Path, fetch_bytes: int) -> int:
    """Fetches needed to read the partition at `fetch_bytes` a Fetch, packed as the broker packs one."""
    fetches = 0
    taken = None
    for header in stored_batches(str(log_dirs), TOPIC):
        if taken is None or taken + header.size > fetch_bytes:
            fetches += 1
            taken = 0
        taken += header.size
    return fetches


def consume(bootstrap: str, records: int, fetch_bytes: int) -> float:
    """Seconds kcat takes to read `records` records from the beginning at `fetch_bytes` a partition."""
    command = [
        "kcat", "-C", "-b", bootstrap, "-t", TOPIC, "-p", "0", "-o", "beginning", "-c", str(records),
        "-e", "-q", "-f", "%o\\n", "-X", f"fetch.message.max.bytes={fetch_bytes}",
    ]  # fmt: skip
    if fetch_bytes > 50 << 20:
        command += ["-X", f"fetch.max.bytes={fetch_bytes}"]
    started = time.perf_counter()
    completed = subprocess.run(command, stdout=subprocess.PIPE, check=True, timeout=600)
    seconds = time.perf_counter() - started
    read = completed.stdout.count(b"\n")
    if read != records:
        raise RuntimeError(f"kcat read {read} of {records} records")
    return seconds


def cpu_seconds(pid: int) -> float:
    """User and system CPU a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fixed_cost_ms(seconds: dict[int, float], fetches: dict[int, int]) -> float:
    """Milliseconds per Fetch beyond its bytes (NaN when both sizes take as many Fetches: too few records)."""
    extra_fetches = fetches[DEFAULT_FETCH] - fetches[LARGE_FETCH]
    if extra_fetches <= 0:
        return float("nan")
    return (seconds[DEFAULT_FETCH] - seconds[LARGE_FETCH]) / extra_fetches * 1e3


@dataclass
class Runs:
    """One broker's runs: seconds and broker CPU seconds per fetch size, and its Fetch count per size."""

    fetches: dict[int, int]
    seconds: dict[int, list[float]] = field(default_factory=lambda: {size: [] for size in SIZES.values()})
    cpu: dict[int, list[float]] = field(default_factory=lambda: {size: [] for size in SIZES.values()})


def measure(args: argparse.Namespace, work: Path) -> dict[str, Runs]:
    """Per broker ("this checkout", and "baseline" with --baseline), every size in every round."""
    brokers: dict[str, Path | None] = {"this checkout": None}
    if args.baseline is not None:
        brokers = {"baseline": args.baseline, **brokers}
    results: dict[str, Runs] = {}
    running: dict[str, BrokerProcess] = {}
    with contextlib.ExitStack() as stack:
        for label, code in brokers.items():
            directory = work / label.replace(" ", "-")
            running[label] = stack.enter_context(broker_from(code, directory))
            fill(running[label].bootstrap, work, args.records)
            logs = directory / "broker" / "logs"
            results[label] = Runs({size: fetch_count(logs, size) for size in SIZES.values()})
        for r in range(args.rounds):
            for label, broker in running.items():
                assert broker.pid is not None
                for name, size in SIZES.items():
                    cpu_before = cpu_seconds(broker.pid)
                    seconds = consume(broker.bootstrap, args.records, size)
                    results[label].seconds[size].append(seconds)
                    results[label].cpu[size].append(cpu_seconds(broker.pid) - cpu_before)
                    print(
                        f"round {r + 1}: {label}: {name}: {args.records / seconds:,.0f} records/s, "
                        f"broker CPU {results[label].cpu[size][-1]:.2f} s",
                        file=sys.stderr,
                    )
    return results


def fitted(runs: dict[int, list[float]], fetches: dict[int, int], rounds: int) -> str:
    """The fixed cost per Fetch in ms from the medians, and per round in brackets."""
    medians = {size: statistics.median(values) for size, values in runs.items()}
    per_round = [
        fixed_cost_ms({size: values[r] for size, values in runs.items()}, fetches) for r in range(rounds)
    ]
    return f"{fixed_cost_ms(medians, fetches):.2f} ({', '.join(f'{cost:.2f}' for cost in per_round)})"


def render(args: argparse.Namespace, when: str, results: dict[str, Runs]) -> str:
    rows = []
    for label, runs in results.items():
        rates = [f"{args.records / statistics.median(runs.seconds[size]):,.0f}" for size in SIZES.values()]
        counts = f"{runs.fetches[DEFAULT_FETCH]:,} / {runs.fetches[LARGE_FETCH]:,}"
        wall = fitted(runs.seconds, runs.fetches, args.rounds)
        cpu = fitted(runs.cpu, runs.fetches, args.rounds)
        rows.append([label, *rates, counts, wall, cpu])
    about = (
        f"One broker, one partition, {args.records:,} records of 200 bytes written by kcat; kcat consumes "
        f"them all at librdkafka's defaults but for `fetch.message.max.bytes`; medians of {args.rounds} "
        "rounds, the sizes (and the brokers, with a baseline) alternating in every round. The fixed cost per "
        "Fetch is fitted from the two sizes' times, in wall-clock time and in the broker's CPU time (per "
        "round in brackets)."
    )
    header = [
        "broker",
        *(f"records/s at {name}" for name in SIZES),
        "Fetches (1 MiB / 10 MiB)",
        "ms per Fetch (wall)",
        "broker CPU ms per Fetch",
    ]
    return report.figures("fetch_size_bench.py", when, about, header, rows)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=3, help="runs per size; the median is reported")
    parser.add_argument("--baseline", type=Path, help="a checkout whose broker runs beside this one's")
    parser.add_argument("--write", action="store_true", help="write the figures into docs/benchmarks.md")
    args = parser.parse_args()
    if shutil.which("kcat") is None:
        parser.error("kcat is not installed (Debian: apt-get install kcat)")
    if args.baseline is not None:
        args.baseline = args.baseline.resolve()
    stop_on_termination()
    when = report.started()
    with tempfile.TemporaryDirectory(dir=report.ROOT.parent) as work:
        results = measure(args, Path(work))
    report.publish(NAME, SECTION, render(args, when, results), args.write)


if __name__ == "__main__":
    main()
