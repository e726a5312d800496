"""The benchmark suite: each benchmark in turn on loopback, each writing its figures into docs/benchmarks.md.

    ops/bench/run [--quick] [--only NAME[,NAME]] [--no-write] [--list]

Steps, in order (`--list` shows each one's command): the seed's comparison (after `install-brokers`), the
broker with each client, TLS and SASL cost (SASL_SSL against PLAINTEXT), kcat consuming at librdkafka's
default fetch size and at 10 MiB, kcat producing one record per request, replication (RF3 acks=all against
RF1 acks=1, and failover), end-to-end latency at 1,000, 10,000 and 100,000 records/s, the mirror, and the
machine's limit for the same bytes. `--quick`
runs each with small counts, to check the suite works in a few minutes; its figures mean little.

Every step runs under a time limit, in a process group of its own. A step that overruns gets SIGTERM
(the benchmarks then stop what they started), and SIGKILL a minute later. This process is a "child
subreaper": whatever a step leaves running (ZooKeeper and message brokers run in sessions of their own)
is handed to it when the step's process ends, and is stopped too. The same happens when the suite is
interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = Path(__file__).resolve().parent
PYTHON = str(ROOT / ".venv" / "bin" / "python")
PR_SET_CHILD_SUBREAPER = 36
STOP_GRACE_SECONDS = 60.0


@dataclass(frozen=True)
class Step:
    name: str
    script: str
    full: tuple[str, ...]
    quick: tuple[str, ...]
    timeout: float  # seconds, full run; a quick run gets a third of it
    prepare: tuple[str, ...] = ()  # a command to run first (from the repository root)

    def command(self, quick: bool, write: bool) -> list[str]:
        arguments = self.quick if quick else self.full
        return [PYTHON, str(BENCH / self.script), *arguments, *(["--write"] if write else [])]


STEPS = (
    Step(
        "seed",
        "seed_comparison.py",
        ("--records", "100000", "--rounds", "3", "--seconds", "60"),
        ("--records", "5000", "--rounds", "1", "--seconds", "20"),
        timeout=2400,
        prepare=("ops/bench/install-brokers",),
    ),
    Step(
        "broker",
        "broker_bench.py",
        ("--records", "1000000", "--rounds", "3"),
        ("--records", "50000", "--rounds", "1"),
        timeout=1200,
        prepare=("ops/bench/install-brokers",),  # confluent-kafka
    ),
    Step(
        "tls",
        "tls_bench.py",
        ("--records", "200000", "--rounds", "3"),
        ("--records", "20000", "--rounds", "1"),
        timeout=1200,
        prepare=("ops/bench/install-brokers",),  # confluent-kafka
    ),
    Step(
        "fetch-size",
        "fetch_size_bench.py",
        ("--records", "2000000", "--rounds", "3"),
        ("--records", "100000", "--rounds", "1"),
        timeout=900,
    ),
    Step(
        "fetch-sessions",
        "fetch_session_bench.py",
        ("--partitions", "200", "--rate", "2000", "--seconds", "15", "--rounds", "3"),
        ("--partitions", "50", "--rate", "500", "--seconds", "2", "--rounds", "1"),
        timeout=600,
    ),
    Step(
        "batch-1",
        "batch1_bench.py",
        ("--rounds", "3", "--seconds", "10"),
        ("--rounds", "1", "--seconds", "2"),
        timeout=600,
    ),
    Step(
        "replication",
        "replication_bench.py",
        ("--records", "300000", "--rounds", "3", "--kills", "20"),
        ("--records", "30000", "--rounds", "1", "--kills", "2"),
        timeout=1800,
    ),
    Step(
        "latency",
        "latency_bench.py",
        ("--rates", "1000,10000,100000", "--seconds", "10"),
        ("--rates", "1000,10000,100000", "--seconds", "2"),
        timeout=900,
    ),
    Step(
        "mirror",
        "mirror_bench.py",
        ("--records", "500000", "--seconds", "20"),
        ("--records", "100000", "--seconds", "3"),
        timeout=1200,
    ),
    Step(
        "broker-metrics",
        "metrics_bench.py",
        ("--records", "200000", "--rounds", "6"),
        ("--records", "20000", "--rounds", "2"),
        timeout=1200,
    ),
    Step(
        "client-quotas",
        "quota_bench.py",
        (),
        ("--span", "30", "--pairs", "2", "--seconds", "4"),
        timeout=1200,
    ),
    Step(
        "topology",
        "topology_bench.py",
        (
            "--records",
            "200000",
        ),
        (
            "--records",
            "20000",
        ),
        timeout=1200,
    ),
    Step(
        "machine",
        "machine_bench.py",
        (),
        ("--megabytes", "32", "--rounds", "2", "--loopback-megabytes", "32", "--loopback-rounds", "2"),
        timeout=900,
    ),
)


def say(line: str) -> None:
    print(f"[suite {time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


def become_subreaper() -> None:
    """Orphaned descendants become this process's children rather than init's (Linux only)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        say(f"cannot become a child subreaper (errno {ctypes.get_errno()}): leftovers are not swept")


def children() -> list[int]:
    """Process ids whose parent is this process."""
    mine = str(os.getpid())
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            # The command name (field 2) is in parentheses and may hold spaces: split after it.
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if fields[1] == mine:
                found.append(int(entry.name))
    return found


def reap() -> None:
    """Collect the exit status of every child that has ended."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


def sweep() -> None:
    """Stop whatever a step left running: SIGTERM, then SIGKILL after the grace period."""
    reap()
    leftovers = children()
    if not leftovers:
        return
    say(f"stopping processes a step left running: {leftovers}")
    for pid in leftovers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    while time.monotonic() < deadline:
        reap()
        if not children():
            return
        time.sleep(0.5)
    for pid in children():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    time.sleep(0.5)
    reap()


def stop_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the step's process group, SIGKILL to what is left of it after the grace period."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(STOP_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        say("the step did not stop on SIGTERM: SIGKILL")
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def run_bounded(command: list[str], timeout: float) -> str:
    """Run `command` from the repository root, its output passed through; 'ok', 'failed (...)' or
    'timed out'. Whatever it leaves running is stopped before this returns."""
    process = subprocess.Popen(command, cwd=ROOT, start_new_session=True)
    try:
        status = process.wait(timeout)
        return "ok" if status == 0 else f"failed (exit status {status})"
    except subprocess.TimeoutExpired:
        say(f"time limit of {timeout:.0f} s reached: stopping the step")
        stop_group(process)
        return "timed out"
    finally:
        if process.poll() is None:  # interrupted while waiting
            stop_group(process)
        sweep()


def run_step(step: Step, number: int, total: int, quick: bool, write: bool) -> tuple[str, float]:
    timeout = step.timeout / 3 if quick else step.timeout
    started = time.monotonic()
    if step.prepare:
        say(f"[{number}/{total}] {step.name}: {shlex.join(step.prepare)}")
        status = run_bounded([str(ROOT / step.prepare[0]), *step.prepare[1:]], timeout)
        if status != "ok":
            return f"{shlex.join(step.prepare)} {status}", time.monotonic() - started
    command = step.command(quick, write)
    shown = shlex.join(["python", f"ops/bench/{step.script}", *command[2:]])
    say(f"[{number}/{total}] {step.name}: {shown} (time limit {timeout:.0f} s)")
    status = run_bounded(command, max(1.0, timeout - (time.monotonic() - started)))
    seconds = time.monotonic() - started
    say(f"[{number}/{total}] {step.name}: {status} after {seconds:.0f} s")
    return status, seconds


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="ops/bench/run", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small counts: checks that the suite works")
    parser.add_argument("--only", help="comma-separated steps to run: " + ", ".join(s.name for s in STEPS))
    parser.add_argument("--no-write", action="store_true", help="leave docs/benchmarks.md as it is")
    parser.add_argument("--list", action="store_true", help="print each step's command and exit")
    args = parser.parse_args()
    steps = list(STEPS)
    if args.only:
        wanted = [name.strip() for name in args.only.split(",") if name.strip()]
        unknown = sorted(set(wanted) - {step.name for step in STEPS})
        if unknown:
            parser.error(f"unknown steps {unknown}; the steps are {[step.name for step in STEPS]}")
        steps = [step for step in STEPS if step.name in wanted]
    if args.list:
        for step in steps:
            command = step.command(args.quick, not args.no_write)
            print(f"{step.name}: {shlex.join(['python', f'ops/bench/{step.script}', *command[2:]])}")
        return 0

    become_subreaper()
    # SIGTERM, SIGHUP or Ctrl-C: unwind, so the running step and its leftovers are stopped.
    for number in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, lambda received, _frame: sys.exit(128 + received))
    results: dict[str, tuple[str, float]] = {}
    try:
        for number, step in enumerate(steps, 1):
            results[step.name] = run_step(step, number, len(steps), args.quick, not args.no_write)
    except (KeyboardInterrupt, SystemExit):
        say("interrupted: stopping")
        sweep()
        raise
    say("summary:")
    for name, (status, seconds) in results.items():
        say(f"  {name:<12} {status} ({seconds:.0f} s)")
    if not args.no_write:
        say(f"figures written to {ROOT / 'docs' / 'benchmarks.md'}")
    return 0 if all(status == "ok" for status, _ in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
