"""The protocol fuzzer's long run: mutated and malformed frames at a live broker over PLAINTEXT and SASL_SSL.

    python ops/bench/fuzz_broker.py [--frames 1000000] [--secure-frames 250000] [--seconds 3600]
        [--memory-bound-mib 256] [--write]

Starts a real ZooKeeper and one broker with a PLAINTEXT and a SASL_SSL listener (certificates from
ops/dev-ca, a SCRAM user for the SASL PLAIN logins), then sends `--frames` fuzzed frames (tests/helpers/
fuzzer.py: every API the broker speaks, eight kinds of mutation, pipelined on many connections) to the
PLAINTEXT listener and, at the same time, `--secure-frames` to the SASL_SSL one, both bounded by
`--seconds`, while a well-formed client produces and reads back a record every 100 ms. Reports the frames
the broker took and how, frames left unanswered (hangs), the polite client's failures and the broker's
peak resident memory. Exits non-zero if the broker died, hung, misanswered, logged a traceback, failed the
polite client or grew its resident memory by more than `--memory-bound-mib`. `--write` puts the figures
into docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import ssl
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "integration"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import report
from local_cluster import broker_with_sasl_ssl, stop_on_termination
from test_broker_fuzz import PoliteClient

from backbone.client import Admin, NewTopic
from backbone.dev.processes import BrokerProcess
from tests.helpers import fuzzer

NAME = "fuzz"
SECTION = "## Protocol fuzzer"
PASSWORD = "fuzz-secret"


class MemoryWatch(threading.Thread):
    """Samples a process's resident memory every second; keeps the peak."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak, self.stop = pid, fuzzer.rss_bytes(pid), threading.Event()
        self.start_rss = self.peak

    def run(self) -> None:
        while not self.stop.wait(1.0):
            try:
                self.peak = max(self.peak, fuzzer.rss_bytes(self.pid))
            except (OSError, RuntimeError):
                return  # the broker is gone; the run reports it


def fuzz(args: argparse.Namespace, work: Path) -> tuple[list[list[object]], str, bool]:
    with broker_with_sasl_ssl(work, "fuzzer", PASSWORD, "PLAIN,SCRAM-SHA-512") as secure:
        return run_against(args, secure.broker, secure.sasl_port, secure.ca_file)


def run_against(
    args: argparse.Namespace, broker: BrokerProcess, sasl_port: int, ca_file: Path
) -> tuple[list[list[object]], str, bool]:
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        admin.create_topics([NewTopic("polite", 1, 1)])
    assert broker.pid is not None
    memory = MemoryWatch(broker.pid)
    memory.start()
    polite = PoliteClient(broker.bootstrap, "polite")
    polite.start()
    tls = ssl.create_default_context(cafile=ca_file)
    started = time.monotonic()

    async def both() -> list[fuzzer.Outcome]:
        options = {"seconds": args.seconds, "concurrency": args.concurrency}
        return list(
            await asyncio.gather(
                fuzzer.run("127.0.0.1", broker.port, frames=args.frames, seed=args.seed, **options),
                fuzzer.run(
                    "127.0.0.1",
                    sasl_port,
                    frames=args.secure_frames,
                    seed=args.seed + 1,
                    tls=tls,
                    login=("fuzzer", PASSWORD),
                    **options,
                ),
            )
        )

    try:
        outcomes = asyncio.run(both())
    finally:
        elapsed = time.monotonic() - started
        polite.stop.set()
        polite.join(timeout=30)
        memory.stop.set()
    rows = [
        [
            label,
            f"{outcome.frames:,}",
            f"{elapsed:,.0f}",
            f"{outcome.frames / elapsed:,.0f}",
            f"{outcome.connections:,}",
            f"{outcome.answered:,}",
            f"{outcome.closed_by_broker:,}",
            f"{outcome.quiet:,}",
            f"{outcome.unanswered:,}",
            f"{outcome.misanswered:,}",
        ]
        for label, outcome in zip(("PLAINTEXT", "SASL_SSL"), outcomes, strict=True)
    ]
    output = broker.output()  # read once: a long run's log is large
    traceback = "Traceback" in output
    if traceback:  # show the first one: a bug to fix and to keep as a regression test
        at = output.index("Traceback")
        print(output[max(0, output.rfind("\n", 0, at - 300)) : at + 3000], file=sys.stderr)
    for label, outcome in zip(("PLAINTEXT", "SASL_SSL"), outcomes, strict=True):
        for frame in outcome.hung:
            print(f"unanswered {label} frame: {frame}", file=sys.stderr)
    for failure in polite.failures[:5]:
        print(f"polite client: {failure}", file=sys.stderr)
    alive = broker.is_running()
    growth = memory.peak - memory.start_rss
    within = growth <= args.memory_bound_mib * 2**20
    bad = sum(outcome.unanswered + outcome.misanswered for outcome in outcomes)
    healthy = alive and not bad and not polite.failures and not traceback and within
    summary = (
        f"Broker alive at the end: {'yes' if alive else 'NO'}; errors logged with a traceback: "
        f"{'SOME' if traceback else 'none'}. Resident memory {memory.start_rss / 2**20:,.0f} MiB at the "
        f"start, peak {memory.peak / 2**20:,.0f} MiB (growth {growth / 2**20:,.0f} MiB, bound "
        f"{args.memory_bound_mib} MiB: {'within' if within else 'EXCEEDED'}). The polite client made "
        f"{polite.rounds:,} produce-and-read-back rounds meanwhile, {len(polite.failures)} failed."
    )
    return rows, summary, healthy


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--frames", type=int, default=1_000_000, help="frames at the PLAINTEXT listener")
    parser.add_argument("--secure-frames", type=int, default=250_000, help="frames at the SASL_SSL listener")
    parser.add_argument("--seconds", type=float, default=3600, help="time bound of the run")
    parser.add_argument("--concurrency", type=int, default=8, help="connections at a time per listener")
    parser.add_argument(
        "--memory-bound-mib", type=int, default=256, help="the broker's allowed resident memory growth"
    )
    parser.add_argument("--seed", type=int, default=20)
    parser.add_argument("--write", action="store_true", help="write the figures into docs/benchmarks.md")
    args = parser.parse_args()
    stop_on_termination()
    when = report.started()
    with tempfile.TemporaryDirectory(dir=report.ROOT.parent) as work:
        rows, summary, healthy = fuzz(args, Path(work))
    about = (
        "Mutated and malformed frames (every API, eight mutations; tests/helpers/fuzzer.py) at one broker's "
        "PLAINTEXT and SASL_SSL listeners at once, pipelined on many connections, while a well-formed client "
        "produces and reads back a record every 100 ms. Most frames mutate the body of a request whose "
        "answer carries an error code; a share are wild (any mutation of any API) and end their connection. "
        "A frame is answered, or the broker closes the connection (Kafka's answer to a request it cannot "
        "read), or it stays quiet as the protocol allows (Produce acks=0, a long Fetch or JoinGroup wait); "
        "unanswered means neither within 10 s; misanswered, an answer to another request. " + summary
    )
    header = [
        "listener",
        "frames",
        "seconds",
        "frames/s",
        "connections",
        "answered",
        "closed by broker",
        "quiet",
        "unanswered",
        "misanswered",
    ]
    report.publish(NAME, SECTION, report.figures("fuzz_broker.py", when, about, header, rows), args.write)
    sys.exit(0 if healthy else 1)


if __name__ == "__main__":
    main()
