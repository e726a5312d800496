"""docs/compatibility.md, generated: every Kafka API with the versions the broker serves (or why not), and
what each client's conformance run passed, failed and left out.

    python -m backbone.protocol.compat_doc            # rewrite docs/compatibility.md
    python -m backbone.protocol.compat_doc --check    # exit 1 if the committed file is stale

The API rows come from `SUPPORTED_VERSIONS` (the ranges the broker registers and advertises; a live test
checks the ApiVersions answer against them) and from kio's schemas (Apache Kafka's own, for the newest
version of each API). The client rows come from result files `docs/conformance/*.json`, one per client run,
which the conformance runners write (`ops/conformance`); their format is described in the document itself.
A unit test regenerates the document and fails if the committed one differs, so it cannot drift.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kio.schema.index import api_key_map

from backbone.protocol.api import ADVERTISED_MIN_VERSION, SUPPORTED_VERSIONS, ApiKey, kio_versions

__all__ = ["LEFT_OUT", "main", "render"]

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "compatibility.md"
RESULTS = ROOT / "docs" / "conformance"

_TXN = "transactions are not offered yet (idempotent producers are)"
_TOKENS = "delegation tokens are not offered; clients authenticate with SASL (PLAIN, SCRAM) or TLS"
_KRAFT = "KRaft and inter-controller RPC; Backbone coordinates through ZooKeeper"
_KIP848 = "the KIP-848 consumer group protocol; the classic group protocol is served"
_SHARE = "share groups (KIP-932) are not offered"
_STREAMS = "streams groups (KIP-1071) are not offered"
_TELEMETRY = "client telemetry (KIP-714) is not collected"

LEFT_OUT: Mapping[str, str] = {
    "create_delegation_token": _TOKENS,
    "renew_delegation_token": _TOKENS,
    "expire_delegation_token": _TOKENS,
    "describe_delegation_token": _TOKENS,
    "add_partitions_to_txn": _TXN,
    "add_offsets_to_txn": _TXN,
    "end_txn": _TXN,
    "write_txn_markers": _TXN,
    "txn_offset_commit": _TXN,
    "describe_transactions": _TXN,
    "list_transactions": _TXN,
    "describe_producers": _TXN,
    "vote": _KRAFT,
    "begin_quorum_epoch": _KRAFT,
    "end_quorum_epoch": _KRAFT,
    "describe_quorum": _KRAFT,
    "alter_partition": _KRAFT,
    "update_features": _KRAFT,
    "envelope": _KRAFT,
    "fetch_snapshot": _KRAFT,
    "broker_registration": _KRAFT,
    "broker_heartbeat": _KRAFT,
    "unregister_broker": _KRAFT,
    "allocate_producer_ids": _KRAFT,
    "controller_registration": _KRAFT,
    "assign_replicas_to_dirs": _KRAFT,
    "add_raft_voter": _KRAFT,
    "remove_raft_voter": _KRAFT,
    "update_raft_voter": _KRAFT,
    "consumer_group_heartbeat": _KIP848,
    "consumer_group_describe": _KIP848,
    "share_group_heartbeat": _SHARE,
    "share_group_describe": _SHARE,
    "share_fetch": _SHARE,
    "share_acknowledge": _SHARE,
    "initialize_share_group_state": _SHARE,
    "read_share_group_state": _SHARE,
    "write_share_group_state": _SHARE,
    "delete_share_group_state": _SHARE,
    "read_share_group_state_summary": _SHARE,
    "describe_share_group_offsets": _SHARE,
    "alter_share_group_offsets": _SHARE,
    "delete_share_group_offsets": _SHARE,
    "streams_group_heartbeat": _STREAMS,
    "streams_group_describe": _STREAMS,
    "get_telemetry_subscriptions": _TELEMETRY,
    "push_telemetry": _TELEMETRY,
    "alter_replica_log_dirs": "moving replicas between log directories of one broker is not offered",
    "list_config_resources": "client-metrics and group config resources are not offered",
    "describe_topic_partitions": "paged topic description (KIP-966) is not offered; Metadata serves it",
}
"""Why each Kafka API the broker does not serve is left out (the API is then absent from ApiVersions)."""

FORMAT = """\
Each conformance runner writes one JSON file per client run into `docs/conformance/` (any file name ending
in `.json`); `ops/conformance` runs every runner and then this generator. Fields:

| field | type | meaning |
| --- | --- | --- |
| `client` | string | the client, e.g. `confluent-kafka (librdkafka)`, `rdkafka (Rust crate)` |
| `version` | string | the exact version run (pinned), with the native library's where there is one |
| `suite` | string | whose tests ran: `backbone` (tests/conformance) or the client's own, e.g. `librdkafka` |
| `command` | string | the command that produced the file |
| `passed`, `failed`, `skipped` | integer | test counts of the run |
| `left_out` | list of `{test, reason}` | tests of features Backbone leaves out, and why (not failures) |
| `failures` | list of `{test, reason}` | optional: the tests that failed, with the error |
| `passed_tests` | list of strings | optional: the passed tests' names (a rerun merges by them, `--update`) |
"""


def _api_rows() -> list[str]:
    rows = ["| key | API | Kafka versions | Backbone versions | notes |", "| ---: | --- | --- | --- | --- |"]
    for key, name in sorted(api_key_map.items()):
        kafka = kio_versions(key)
        label = name.replace("_", " ").title().replace(" ", "")
        try:
            served = SUPPORTED_VERSIONS.get(ApiKey(key))
        except ValueError:
            served = None
        if served is None:
            reason = LEFT_OUT.get(name, "not implemented yet")
            rows.append(f"| {key} | {label} | {kafka.min}-{kafka.max} | not supported | {reason} |")
            continue
        note = ""
        listed_min = ADVERTISED_MIN_VERSION.get(ApiKey(key))
        if listed_min is not None and listed_min < served.min:
            note = f"listed from v{listed_min} for librdkafka, versions below {served.min} refused"
        rows.append(f"| {key} | {label} | {kafka.min}-{kafka.max} | {served.min}-{served.max} | {note} |")
    return rows


def _load_results(directory: Path) -> list[dict[str, Any]]:
    results = []
    for path in sorted(directory.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        data["_file"] = path.name
        results.append(data)
    return sorted(results, key=lambda r: (r.get("suite", ""), r["client"]))


def _client_rows(results: list[dict[str, Any]], missing: str) -> list[str]:
    if not results:
        return [missing]
    rows = [
        "| client | version | suite | passed | failed | skipped | left out |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        rows.append(
            f"| {r['client']} | {r['version']} | {r.get('suite', '')} | {r['passed']} | {r['failed']} | "
            f"{r['skipped']} | {len(r.get('left_out', []))} |"
        )
    for r in results:
        lines = [f"- `{item['test']}`: {item['reason']}" for item in r.get("left_out", [])]
        lines += [f"- FAILED `{item['test']}`: {item['reason']}" for item in r.get("failures", [])]
        if lines:
            command = f", `{r['command']}`" if r.get("command") else ""
            rows += [
                "",
                f"**{r['client']} {r['version']}** ({r.get('suite', '')} suite{command}):",
                "",
                *lines,
            ]
    return rows


def render(results_dir: Path = RESULTS) -> str:
    """The whole document, from the API table and the result files in `results_dir`."""
    results = _load_results(results_dir) if results_dir.is_dir() else []
    ours = [r for r in results if r.get("suite", "backbone") == "backbone"]
    theirs = [r for r in results if r.get("suite", "backbone") != "backbone"]
    parts = [
        "# Kafka compatibility",
        "",
        "Generated by `python -m backbone.protocol.compat_doc` (run by `ops/conformance`) from the broker's",
        "API table and the conformance results in `docs/conformance/`; do not edit by hand (a unit test",
        "compares).",
        "",
        "## APIs",
        "",
        "Every Kafka API key (from Apache Kafka's message schemas), the versions Kafka defines, and the",
        "versions Backbone's brokers serve and list in their ApiVersions answer. A request for an API or",
        "version not served is answered with UNSUPPORTED_VERSION where its response has a top-level error",
        "field, else the connection closes, as Kafka closes it; clients pick versions from ApiVersions and",
        "never meet either.",
        "",
        *_api_rows(),
        "",
        "## Clients (Backbone's conformance tests)",
        "",
        "The clients people use, at pinned versions, driven through their whole admin, producer and consumer",
        "APIs against a live 3-broker cluster (`pytest -m conformance`, `tests/conformance/`). Features",
        "Backbone leaves out are asserted to fail as a Kafka broker without them fails them.",
        "",
        *_client_rows(ours, "No results recorded yet: run `ops/conformance`."),
        "",
        "## Clients' own test suites (librdkafka, Rust clients)",
        "",
        "<!-- Filled from the result files of runners that run a client's own test suite (suite other than",
        '"backbone"), e.g. librdkafka\'s integration tests and a Rust client; see the format below. -->',
        "",
        *_client_rows(theirs, "No results recorded yet: a runner in `ops/conformance.d/` writes them."),
        "",
        "## Result file format",
        "",
        FORMAT,
    ]
    return "\n".join(parts).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the document is not up to date")
    parser.add_argument("--output", type=Path, default=DOC)
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    text = render(args.results)
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is stale: run python -m backbone.protocol.compat_doc", file=sys.stderr)
            return 1
        return 0
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
