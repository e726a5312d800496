"""rskafka (a pure-Rust Kafka client, its own protocol code) against a live Backbone cluster.

    ops/conformance.d/rskafka [--bootstrap HOST:PORT,...]

Builds ops/client_suites/rust with cargo (crates from crates.io, pinned by its Cargo.lock) into a target
directory in the cache ($BACKBONE_CACHE_DIR, default ~/.cache/backbone), so that later runs only relink
when the program changed, then runs it against the given cluster or a throw-away 3-broker one and checks
every line it prints against what Kafka's semantics make certain.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from ops.client_suites.cluster import running_cluster

PROJECT = Path(__file__).resolve().parent / "rust"
PROGRAM = "backbone-rust-conformance"
CLIENT_VERSION = "0.6.0"  # rskafka, as pinned in rust/Cargo.toml
RUN_TIMEOUT_S = 120


def cache_root() -> Path:
    return Path(os.environ.get("BACKBONE_CACHE_DIR", Path.home() / ".cache" / "backbone")).expanduser()


def build() -> Path:
    """The program's binary, built (or brought up to date) by cargo in the cached target directory."""
    if shutil.which("cargo") is None:
        raise SystemExit("cargo is missing: run ops/setup (it installs Debian's cargo)")
    target = cache_root() / "rust-conformance-target"
    manifest = str(PROJECT / "Cargo.toml")
    subprocess.run(
        ["cargo", "build", "--release", "--locked", "--quiet", "--manifest-path", manifest],
        check=True,
        env={**os.environ, "CARGO_TARGET_DIR": str(target)},
    )
    return target / "release" / PROGRAM


def expected_lines(topic: str) -> list[str]:
    """What the program prints when every answer is Kafka's: 20 records, 4 per codec, on partition 1."""
    codecs = ("none", "gzip", "lz4", "snappy", "zstd")
    return [
        f"created topic={topic} partitions=3 replication_factor=3",
        f"listed topic={topic} partitions=3",
        *(f"produced codec={codec} offsets={4 * i}..{4 * i + 3}" for i, codec in enumerate(codecs)),
        "consumed records=20 verified=key,value,headers,timestamp",
        "offsets earliest=0 latest=20 at_timestamp_of_10=10",
        "deleted before=5 earliest=5 fetch_below_refused=true remaining=15",
        f"deleted topic={topic}",
    ]


def run(binary: Path, bootstrap: str, topic: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binary), bootstrap, topic], capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ops/conformance.d/rskafka", description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap", help="an existing cluster (default: start a throw-away one)")
    parser.add_argument("--result", type=Path, help="write the figures here as JSON")
    args = parser.parse_args(argv)
    started = time.monotonic()
    binary = build()
    print(f"rust: built {binary} in {time.monotonic() - started:.0f} s", flush=True)
    topic = f"rskafka-{uuid.uuid4().hex[:8]}"
    if args.bootstrap:
        completed = run(binary, args.bootstrap, topic)
    else:
        with (
            tempfile.TemporaryDirectory(prefix="rust-conformance-") as work,
            running_cluster(Path(work)) as cluster,
        ):
            completed = run(binary, cluster.bootstrap, topic)
    print(completed.stdout, end="")
    print(completed.stderr, end="", file=sys.stderr)
    due = expected_lines(topic)
    got = completed.stdout.splitlines()
    # Each printed line is one step (create, list, produce per codec, ...): passed when exactly as due.
    passed = sum(1 for index, line in enumerate(due) if index < len(got) and got[index] == line)
    failed = len(due) - passed
    seconds = time.monotonic() - started
    if args.result:
        figures = {
            "client": "rskafka",
            "version": CLIENT_VERSION,
            "suite": "backbone",
            "command": "ops/conformance.d/rskafka",
            "seconds": round(seconds),
            "passed": passed,
            "failed": failed,
            "skipped": 0,
            "left_out": [],
        }
        args.result.parent.mkdir(parents=True, exist_ok=True)
        args.result.write_text(json.dumps(figures, indent=2) + "\n")
    if completed.returncode or failed:
        print(f"rust: rskafka {CLIENT_VERSION} FAILED (exit {completed.returncode}); due:", file=sys.stderr)
        print("\n".join(due), file=sys.stderr)
        return 1
    print(f"rust: rskafka {CLIENT_VERSION}: {passed} passed, 0 failed in {seconds:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
