"""Profile the broker (or our producer) under produce load with py-spy, and measure the broker's rate.

    python ops/bench/profile_broker.py run [--loads kcat-1 ours-1 ours-50 ours-1mib] [--seconds 10]
        [--profile broker|producer|none] [--flush-every 100000] [--native] [--gil] [--output DIR]
        [--code DIR] [--top 25]
    python ops/bench/profile_broker.py summarise FILE [--seconds 10] [--top 25]

`run` starts ZooKeeper and one broker (as the other benchmarks do, flushing its log every 10,000 messages as
the seed's Kafka did), then, for each load in turn, into a fresh one-partition topic:

- kcat-1: kcat (librdkafka's C producer) with one 200-byte record per request (`batch.num.messages=1`,
  `linger.ms=0`), fed endlessly from `yes`: the broker's own cost per request;
- ours-1: our `Producer`, `batch.size=1`, `linger.ms=0` (one record per request, the seed's "batch 1");
- ours-50: our `Producer` sending 50 records per request (the seed's "batch 50");
- ours-1mib: our `Producer`, 1 MiB batches, `linger.ms=5` (broker_bench.py's setting).

Every load is acks=1 without idempotence and runs in a process of its own; our producers send
`--flush-every` records and flush, over and over (the seed comparison's run is 100,000 records and a flush;
0: never flush, so sends block whenever buffer.memory is full). After two seconds of warm-up the broker's log
end offset and the CPU time of the broker and of the producer process are read, py-spy records the chosen
process for `--seconds` (`py-spy record --threads -r 200 --format raw`, with `--native` or `--gil` if
asked; kcat is never profiled), and both are read again: records/s is what the broker stored in that window,
and CPU microseconds per record (user + system, from /proc) are what each process spent on them, a figure
less moved than the rate by other work on the machine. With `--profile none` nothing is sampled (py-spy
stops the process for each sample: rates meant for comparison are measured without it). The raw profiles go
to `--output`; for each thread busy at least 5% of the window a table gives the functions with the most
samples, on their own (self) and with what they call (inclusive), in percent of the window.

`--code DIR` runs the broker and the producers from another checkout of the package (e.g. a `git worktree`
of an older commit), for side-by-side figures of old and new code.
"""

from __future__ import annotations

import argparse
import collections
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOADS = ("kcat-1", "ours-1", "ours-50", "ours-1mib")
VALUE_SIZE = 200
WARM_UP_S = 2.0
SAMPLE_RATE = 200
SEED_SETTINGS = {"log.flush.interval.messages": 10_000}


def _use_code(code: Path | None) -> None:
    """Import the package from `code` (default: this checkout); child processes inherit the choice."""
    directory = str(code.resolve() if code else ROOT)
    sys.path.insert(0, directory)
    sys.path.insert(1, str(Path(__file__).resolve().parent))
    os.environ["PYTHONPATH"] = directory


# -- the loads -------------------------------------------------------------------------------------------


def producer_settings(load: str) -> dict[str, object]:
    from seed_comparison import batch_size_for

    if load == "ours-1":
        return {"batch_size": 1, "linger_ms": 0}
    if load == "ours-50":  # full at the 50th record; the long linger keeps a half-full batch from leaving
        return {"batch_size": batch_size_for(50), "linger_ms": 1000}
    if load == "ours-1mib":
        return {"batch_size": 1 << 20, "linger_ms": 5}
    raise ValueError(f"unknown load {load!r}")


def drive(load: str, bootstrap: str, topic: str, flush_every: int) -> None:
    """Send 200-byte records to partition 0 until SIGTERM (the `drive` command, a load's own process):
    `flush_every` records, then `flush`, as the seed's comparison does in one run; 0: never flush, `send`
    blocks whenever buffer.memory is full."""
    from local_cluster import stop_on_termination

    from backbone.client import Producer

    stop_on_termination()
    producer = Producer(
        bootstrap_servers=bootstrap, acks=1, enable_idempotence=False, **producer_settings(load)
    )
    send = partial(producer.send, topic, b"v" * VALUE_SIZE, partition=0)
    try:
        while True:
            for _ in range(flush_every or 1_000_000):
                send()
            if flush_every:
                producer.flush()
    finally:
        producer.close(timeout=0)


def start_load(
    load: str, bootstrap: str, topic: str, directory: Path, args: argparse.Namespace
) -> list[subprocess.Popen[bytes]]:
    """The load's processes, the one to profile as a producer last (our producer runs `args.code`)."""
    output = open(directory / f"{topic}.out", "ab")  # noqa: SIM115 - the children hold it open
    if load == "kcat-1":
        lines = subprocess.Popen(["yes", "v" * VALUE_SIZE], stdout=subprocess.PIPE)
        kcat = subprocess.Popen(
            [
                "kcat", "-P", "-b", bootstrap, "-t", topic, "-p", "0",
                "-X", "acks=1", "-X", "linger.ms=0", "-X", "batch.num.messages=1",
                "-X", "enable.idempotence=false",
            ],
            stdin=lines.stdout,
            stdout=output,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        assert lines.stdout is not None
        lines.stdout.close()  # kcat holds the pipe now
        return [lines, kcat]
    command = [sys.executable, __file__, "drive", load, bootstrap, topic, str(args.flush_every)]
    if args.code is not None:
        command += ["--code", str(args.code)]
    return [subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)]


def stop_load(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in reversed(processes):
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# -- one run ---------------------------------------------------------------------------------------------


def measure(args: argparse.Namespace, directory: Path) -> None:
    from local_cluster import one_broker

    from backbone.client import Admin, Consumer, NewTopic, TopicPartition

    with one_broker(directory, SEED_SETTINGS, chroot="/profile") as broker:
        bootstrap = broker.bootstrap
        topics = {load: f"profile-{load}-{os.getpid()}" for load in args.loads}
        with Admin(bootstrap_servers=bootstrap) as admin:
            admin.create_topics([NewTopic(topic, 1, 1) for topic in topics.values()])
        with Consumer(bootstrap_servers=bootstrap) as consumer:
            for load, topic in topics.items():
                partition = TopicPartition(topic, 0)

                def log_end(partition: TopicPartition = partition) -> int:
                    return consumer.end_offsets([partition])[partition]

                processes = start_load(load, bootstrap, topic, directory, args)
                try:
                    time.sleep(WARM_UP_S)
                    target = broker.pid if args.profile == "broker" else processes[-1].pid
                    cpu_pids = {"broker": broker.pid, "producer": processes[-1].pid}
                    first, started, cpu_before = log_end(), time.perf_counter(), cpu_seconds(cpu_pids)
                    profile = args.output / f"{load}-{args.profile}.txt"
                    profiled = args.profile == "broker" or (args.profile == "producer" and load != "kcat-1")
                    sampler = start_sampler(target, profile, args) if profiled else None
                    time.sleep(args.seconds)
                    cpu = cpu_seconds(cpu_pids)
                    last, seconds = log_end(), time.perf_counter() - started
                finally:
                    stop_load(processes)
                if sampler is not None:
                    sampler.wait(60)
                records = last - first
                costs = ", ".join(
                    f"{name} CPU {100 * (cpu[name] - cpu_before[name]) / seconds:.0f}%"
                    f" = {1e6 * (cpu[name] - cpu_before[name]) / max(records, 1):.1f} us/record"
                    for name in cpu_pids
                )
                print(f"{load}: {records / seconds:,.0f} records/s over {seconds:.1f} s; {costs}", flush=True)
                if sampler is not None:
                    print(f"profile of the {args.profile}: {profile}")
                    print(summary_table(summarise(profile), args.seconds, args.top), flush=True)


def cpu_seconds(pids: dict[str, int | None]) -> dict[str, float]:
    """User + system CPU seconds each process has used so far (from /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    used = {}
    for name, pid in pids.items():
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        used[name] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime: fields 14 and 15 of stat
    return used


def start_sampler(pid: int | None, output: Path, args: argparse.Namespace) -> subprocess.Popen[bytes]:
    py_spy = Path(sys.executable).with_name("py-spy")
    command = [
        str(py_spy), "record", "--pid", str(pid), "-r", str(SAMPLE_RATE), "-d", str(int(args.seconds)),
        "--format", "raw", "--threads", "-o", str(output),
    ]  # fmt: skip
    if args.native:
        command.append("--native")
    if args.gil:
        command.append("--gil")
    return subprocess.Popen(command, stdout=subprocess.DEVNULL)


# -- reading a raw profile -------------------------------------------------------------------------------


# Leaf frames of a thread waiting (for I/O, a lock, work) that py-spy's idle detection sometimes lets through.
WAITING = frozenset(
    {
        "EpollSelector.select (selectors.py)",
        "select (selectors.py)",
        "Condition.wait (threading.py)",
        "Event.wait (threading.py)",
        "_worker (thread.py)",  # a pool thread blocked on its queue
        "Queue.get (queue.py)",
    }
)


def function_of(frame: str) -> str:
    """`name (path:line)` -> `name (file.py)`: samples of one function counted together."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    return f"{name} ({path.rsplit('/', 1)[-1]})" if path else name


@dataclass
class ThreadProfile:
    """One thread's busy samples: in all, and per function those it was the leaf of (self) or in."""

    samples: int = 0
    own: collections.Counter[str] = field(default_factory=collections.Counter)
    inclusive: collections.Counter[str] = field(default_factory=collections.Counter)


def summarise(profile: Path) -> dict[str, ThreadProfile]:
    """Per thread name, the busy samples of a py-spy raw profile recorded with --threads."""
    threads: dict[str, ThreadProfile] = collections.defaultdict(ThreadProfile)
    for line in profile.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack.startswith("thread (") or not count_text.isdigit():
            continue
        thread, _, frames = stack.partition(": ")
        name, _, frames = frames.partition(";")
        functions = [function_of(frame) for frame in frames.split(";")] if frames else ["(no Python frame)"]
        if functions[-1] in WAITING:
            continue
        count = int(count_text)
        summary = threads[name or thread]
        summary.samples += count
        summary.own[functions[-1]] += count
        for function in set(functions):
            summary.inclusive[function] += count
    return dict(threads)


def summary_table(threads: dict[str, ThreadProfile], seconds: float, top: int) -> str:
    """The top functions of every thread busy for at least 5% of the window, in percent of the window."""
    window = SAMPLE_RATE * seconds
    lines = []
    for name, thread in sorted(threads.items(), key=lambda item: -item[1].samples):
        if thread.samples < 0.05 * window:
            continue
        lines += [
            f"thread {name}: busy {100 * thread.samples / window:.0f}% of the window",
            "",
            "| self % | function | inclusive % | function |",
            "| ---: | --- | ---: | --- |",
        ]
        by_self, by_inclusive = thread.own.most_common(top), thread.inclusive.most_common(top)
        for i in range(max(len(by_self), len(by_inclusive))):
            cells = []
            for column in (by_self, by_inclusive):
                function, count = column[i] if i < len(column) else ("", 0)
                cells.append(f"{100 * count / window:.1f} | `{function}`" if function else " | ")
            lines.append(f"| {cells[0]} | {cells[1]} |")
        lines.append("")
    return "\n".join(lines) or "(no busy thread)"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="start a broker, run the loads, profile and measure")
    run.add_argument("--loads", nargs="+", choices=LOADS, default=list(LOADS))
    run.add_argument("--seconds", type=float, default=10.0, help="the measured (and profiled) window")
    run.add_argument("--profile", choices=("broker", "producer", "none"), default="broker")
    run.add_argument("--native", action="store_true", help="py-spy --native: C frames too")
    run.add_argument("--gil", action="store_true", help="py-spy --gil: only the thread holding the GIL")
    run.add_argument("--output", type=Path, default=Path("profiles"), help="where the raw profiles go")
    run.add_argument("--code", type=Path, help="the checkout to import backbone from (default: this one)")
    run.add_argument(
        "--flush-every",
        type=int,
        default=100_000,
        help="our producers flush after this many sends (the seed's run); 0: never, sends meet back-pressure",
    )
    run.add_argument("--top", type=int, default=25)
    summary = commands.add_parser("summarise", help="the top functions of a raw profile")
    summary.add_argument("profile", type=Path)
    summary.add_argument("--seconds", type=float, default=10.0, help="how long it was recorded")
    summary.add_argument("--top", type=int, default=25)
    load = commands.add_parser("drive", help="(internal) one load's producer process")
    load.add_argument("load", choices=LOADS[1:])
    load.add_argument("bootstrap")
    load.add_argument("topic")
    load.add_argument("flush_every", type=int)
    load.add_argument("--code", type=Path)
    args = parser.parse_args()
    if args.command == "summarise":
        print(summary_table(summarise(args.profile), args.seconds, args.top))
        return
    _use_code(getattr(args, "code", None))
    if args.command == "drive":
        drive(args.load, args.bootstrap, args.topic, args.flush_every)
        return
    from local_cluster import stop_on_termination

    stop_on_termination()
    args.output.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="profile-broker-", dir=ROOT.parent) as directory:
        measure(args, Path(directory))


if __name__ == "__main__":
    main()
