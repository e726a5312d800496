"""Schema registry benchmarks on loopback: cached lookups and registrations.

    python ops/bench/registry_bench.py [--schemas 2000] [--lookups 5000] [--clients 8] [--write]
        [--before GIT_REF [--rounds 3]]

Starts ZooKeeper, one broker and a registry (`_schemas` on that broker), then measures, bounded in count:
- lookups by id (`GET /schemas/ids/{id}`, what a deserializer asks) and by schema under a subject
  (`POST /subjects/{s}`), one keep-alive connection, one request at a time: median and p99;
- registrations of distinct schemas under distinct subjects (each acknowledged by the broker with
  acks=all and read back from `_schemas` before the answer), from one client and from `--clients` at once.

With `--before REF`, a second registry runs the `backbone` package of that commit (exported from git) on
the same broker (its schemas in `_schemas_before`), and the registrations from `--clients` are measured
on both in turn, `--rounds` times, so a change is judged against the same machine load.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import report
from local_cluster import one_broker, stop_on_termination

from backbone.coordination import find_free_port
from backbone.dev import registry
from backbone.dev.processes import start_until_line, stop_child

SECTION = "## Schema registry"
NAME = "schema-registry"


def schema(number: int) -> str:
    fields = [{"name": "member", "type": "long"}, {"name": f"field{number}", "type": "string"}]
    return json.dumps({"type": "record", "name": f"Event{number}", "fields": fields})


class Client:
    def __init__(self, port: int) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def call(self, method: str, path: str, body: object = None) -> object:
        data = None if body is None else json.dumps(body)
        self.connection.request(method, path, data, {"Content-Type": "application/json"})
        answer = self.connection.getresponse()
        payload = json.loads(answer.read())
        if answer.status != 200:
            raise RuntimeError(f"{method} {path}: {answer.status} {payload}")
        return payload


def register_range(port: int, numbers: range) -> None:
    client = Client(port)
    for number in numbers:
        client.call("POST", f"/subjects/s{number}-value/versions", {"schema": schema(number)})


def registrations(port: int, first: int, count: int, clients: int) -> float:
    """Registrations per second of `count` new schemas from `clients` connections at once."""
    share = count // clients
    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        ranges = [range(first + i * share, first + (i + 1) * share) for i in range(clients)]
        list(pool.map(lambda numbers: register_range(port, numbers), ranges))
    return share * clients / (time.perf_counter() - started)


def export_package(ref: str, directory: Path) -> Path:
    """The `backbone` package as commit `ref` has it, under `directory`."""
    directory.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(report.ROOT), "archive", ref, "backbone"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(directory)], input=archive, check=True)
    return directory


def start_before(directory: Path, code: Path, bootstrap: str, started: list[subprocess.Popen[bytes]]) -> int:
    """A registry running the package under `code`, its schemas in `_schemas_before`; returns its port."""
    port = find_free_port()
    config = directory / "before" / "registry.properties"
    config.parent.mkdir(parents=True)
    config.write_text(
        f"listeners=http://127.0.0.1:{port}\nkafkastore.bootstrap.servers={bootstrap}\n"
        "kafkastore.topic=_schemas_before\n",
        encoding="utf-8",
    )
    command = ["env", f"PYTHONPATH={code}", *registry.command(config)]
    process = start_until_line(
        command,
        directory / "before" / "registry.out",
        registry.READY_LINE,
        "schema registry (before)",
        timeout=registry.READY_TIMEOUT_S,
        cwd=os.fspath(code),
    )
    started.append(process)
    return port


def latencies(client: Client, count: int, method: str, path: str, body: object = None) -> tuple[float, float]:
    """(median, p99) in milliseconds of `count` requests, after 100 to warm up."""
    for _ in range(100):
        client.call(method, path, body)
    times = []
    for _ in range(count):
        started = time.perf_counter()
        client.call(method, path, body)
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.99) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schemas", type=int, default=2000, help="registrations per measurement")
    parser.add_argument("--lookups", type=int, default=5000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--before", metavar="GIT_REF", help="also measure the registry of this commit")
    parser.add_argument("--rounds", type=int, default=3, help="turns of before and now, with --before")
    parser.add_argument("--write", action="store_true", help="record the figures in docs/benchmarks.md")
    args = parser.parse_args()
    stop_on_termination()
    when = report.started()
    with tempfile.TemporaryDirectory(prefix="registry-bench-") as tmp, one_broker(Path(tmp)) as broker:
        started: list[subprocess.Popen[bytes]] = []
        port = find_free_port()
        try:
            registry.start(Path(tmp), broker.bootstrap, "127.0.0.1", port, started)
            one = registrations(port, 0, args.schemas, 1)
            many = registrations(port, args.schemas, args.schemas, args.clients)
            client = Client(port)
            by_id = latencies(client, args.lookups, "GET", "/schemas/ids/1")
            by_schema = latencies(client, args.lookups, "POST", "/subjects/s1-value", {"schema": schema(1)})
            if args.before:
                before_port = start_before(
                    Path(tmp), export_package(args.before, Path(tmp) / "code"), broker.bootstrap, started
                )
                turns: dict[str, list[float]] = {"before": [], "now": []}
                first = 2 * args.schemas
                for _ in range(args.rounds):
                    for name, target in (("before", before_port), ("now", port)):
                        turns[name].append(registrations(target, first, args.schemas, args.clients))
                        first += args.schemas
        finally:
            for process in started:
                stop_child(process, timeout=15)
    rows = [
        ["lookup by id (GET /schemas/ids/1), median / p99", f"{by_id[0]:.3f} ms / {by_id[1]:.3f} ms"],
        [
            "lookup under a subject (POST /subjects/s), median / p99",
            f"{by_schema[0]:.3f} ms / {by_schema[1]:.3f} ms",
        ],
        [f"registrations, 1 client ({args.schemas} schemas)", f"{one:,.0f} /s"],
        [f"registrations, {args.clients} clients ({args.schemas} schemas)", f"{many:,.0f} /s"],
    ]
    if args.before:
        for name, label in (("before", f"commit {args.before}"), ("now", "this code")):
            rates = ", ".join(f"{r:,.0f}" for r in turns[name])
            rows.append(
                [
                    f"registrations, {args.clients} clients, {label} (rounds: {rates})",
                    f"{statistics.median(turns[name]):,.0f} /s",
                ]
            )
    about = (
        "One broker (acks=all on a one-replica `_schemas`), one registry instance; lookups over one "
        "keep-alive HTTP connection; each registration answered after its record is acknowledged. "
        "Targets: cached lookup median under 1 ms, at least 500 registrations/s."
    )
    body = report.figures("registry_bench.py", when, about, ["measure", "figure"], rows)
    report.publish(NAME, SECTION, body, args.write)


if __name__ == "__main__":
    main()
