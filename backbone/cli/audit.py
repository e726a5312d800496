"""`backbone audit`: count a cluster's records for the completeness audit, and report on completeness.

    backbone audit count --bootstrap-server DC1 --tier dc1 --publish-to AGGREGATE
    backbone audit count --bootstrap-server AGGREGATE --tier aggregate
    backbone audit report --bootstrap-server AGGREGATE [--topic T] [--since 2h] [--json]

`count` runs until stopped (SIGTERM/Ctrl-C), publishing every --interval-ms. `report` exits 0 when the
aggregate holds every record the baseline tiers (the audited producers by default) counted, 1 when some are
missing (naming the buckets), 2 for a usage error, and 3 when it cannot judge: a bucket no baseline tier
counted, a baseline tier that published nothing, or no counts at all.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
import sys
import time

from backbone.cli import UsageError
from backbone.cli.connect import (
    CommandFailed,
    admin_session,
    client_config,
    connection_options,
    dev_topology,
    int_at_least,
    reports_failures,
)
from backbone.stopping import stop_on_signals
from backbone.times import time_ms

_DEFAULT_TOPIC = "__audit"  # backbone.client.audit.DEFAULT_TOPIC (not imported: the client loads slowly)
CANNOT_JUDGE = 3  # exit status of a report without baseline counts to judge by
_UNITS_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("audit", help="completeness audit: count records per tier, report")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    common = [connection_options()]

    count = actions.add_parser(
        "count", parents=common, help="count a cluster's records per topic and time bucket, until stopped"
    )
    count.add_argument("--tier", required=True, help="this cluster's tier name, e.g. dc1 or aggregate")
    count.add_argument(
        "--publish-to", metavar="HOST:PORT,..", help="the cluster holding the audit topic (default: this one)"
    )
    count.add_argument(
        "--publish-command-config",
        metavar="FILE",
        help="client properties for the --publish-to cluster (default: those of --command-config)",
    )
    count.add_argument("--audit-topic", default=_DEFAULT_TOPIC, help=f"default {_DEFAULT_TOPIC}")
    count.add_argument(
        "--bucket-ms", type=int_at_least(1), default=600_000, help="time bucket (default 600000: 10 min)"
    )
    count.add_argument(
        "--interval-ms", type=int_at_least(1), default=10_000, help="how often counts are published"
    )
    count.add_argument("--group", help="consumer group id (default audit-TIER)")
    count.add_argument(
        "--exclude", default=r"__.*|_schemas", help="topics not counted (default __.*|_schemas, internal)"
    )
    count.set_defaults(handler=reports_failures(_count))

    report = actions.add_parser(
        "report", parents=[connection_options("aggregate")], help="compare the tiers' counts: completeness"
    )
    report.add_argument("--audit-topic", default=_DEFAULT_TOPIC, help=f"default {_DEFAULT_TOPIC}")
    report.add_argument("--topic", action="append", default=[], help="only this topic (repeatable)")
    report.add_argument(
        "--since", help="only buckets ending after this: 2h, 30m, an ISO time or epoch milliseconds"
    )
    report.add_argument(
        "--baseline-tier",
        help="tiers whose sum is expected in the aggregate, comma separated (default: the datacenter "
        "clusters of the local dev topology when there is one, else producer)",
    )
    report.add_argument("--aggregate-tier", default="aggregate", help="the tier checked (default aggregate)")
    report.add_argument("--json", action="store_true", help="print the report as JSON")
    report.set_defaults(handler=reports_failures(_report))


def parse_since(text: str, now_ms: int | None = None) -> int:
    """`2h`/`30m`/`45s`/`1d` before now, an ISO 8601 time (UTC unless it says), or epoch milliseconds."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    relative = re.fullmatch(r"(\d+)([smhd])", text.strip())
    if relative:
        return now_ms - int(relative[1]) * _UNITS_MS[relative[2]]
    try:
        return time_ms(text)
    except ValueError:
        raise UsageError(
            f"--since {text!r}: use a duration (30m, 2h, 1d), an ISO time (2026-01-31T10:00) or epoch ms"
        ) from None


def _default_baseline() -> str:
    """The local dev topology's datacenter clusters (each counted by `dev up`), else the audited producers."""
    clusters = (dev_topology() or {}).get("clusters", {})
    datacenters = [name for name in clusters if name != "aggregate"]
    return ",".join(datacenters) if datacenters and "aggregate" in clusters else "producer"


def _count(args: argparse.Namespace) -> int:
    from backbone.client.config import security_settings
    from backbone.mirror.audit import AuditorSettings, ClusterAuditor

    try:
        re.compile(args.exclude)
    except re.error as error:
        raise UsageError(f"--exclude {args.exclude!r} is not a valid regular expression: {error}") from None
    # Fail at once, naming the cause, when the counted cluster or the one publishing to does not answer.
    with admin_session(args):
        pass
    publish_args = argparse.Namespace(
        **{
            **vars(args),
            "bootstrap_server": args.publish_to or args.bootstrap_server,
            "command_config": args.publish_command_config or args.command_config,
        }
    )
    if vars(publish_args) != vars(args):
        with admin_session(publish_args):
            pass
    settings = AuditorSettings(
        bootstrap_servers=args.bootstrap_server,
        tier=args.tier,
        publish_to=args.publish_to or args.bootstrap_server,
        audit_topic=args.audit_topic,
        bucket_ms=args.bucket_ms,
        interval_ms=args.interval_ms,
        group_id=args.group or "",
        exclude_regex=args.exclude,
    )
    logging.getLogger("backbone.mirror").setLevel(min(logging.INFO, logging.getLogger().level))

    async def main() -> None:
        stop = stop_on_signals()
        await ClusterAuditor(
            settings, security_settings(client_config(args)), security_settings(client_config(publish_args))
        ).run(stop)

    asyncio.run(main())
    return 0


def _report(args: argparse.Namespace) -> int:
    from backbone.client.audit import read_audit_counts
    from backbone.client.audit.report import render_text, summarize, to_json
    from backbone.client.config import security_settings

    since = parse_since(args.since) if args.since else None
    baseline = [
        tier.strip() for tier in (args.baseline_tier or _default_baseline()).split(",") if tier.strip()
    ]
    if not baseline:
        raise UsageError("--baseline-tier names no tier")
    with admin_session(args):
        pass
    try:
        messages, malformed = read_audit_counts(
            args.bootstrap_server, args.audit_topic, client_config=security_settings(client_config(args))
        )
    except LookupError:
        raise CommandFailed(
            f"the cluster at {args.bootstrap_server} has no audit topic {args.audit_topic!r} yet: run "
            "`backbone audit count` (or an audited producer or mirror) publishing to it"
        ) from None
    except TimeoutError as error:
        raise CommandFailed(str(error)) from None
    if malformed:
        print(f"backbone audit: skipped {malformed} records that are not audit counts", file=sys.stderr)
    report = summarize(messages, baseline, args.aggregate_tier, args.topic or None, since)
    if args.json:
        print(json.dumps(to_json(report), indent=2))
    else:
        sys.stdout.write(render_text(report))
    return {"complete": 0, "incomplete": 1}.get(report.verdict, CANNOT_JUDGE)
