"""`backbone generate`: realistic Avro tracking traffic into one datacenter's cluster (see
backbone/tracking/generator.py)."""

from __future__ import annotations

import argparse
import signal
from datetime import UTC, datetime

from backbone.cli import UsageError
from backbone.cli.connect import add_command_config, int_at_least, read_command_config, reports_failures


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("generate", help="produce tracking events (Avro, via the schema registry)")
    parser.add_argument(
        "--bootstrap-server", required=True, metavar="HOST:PORT,..", help="the datacenter's cluster"
    )
    parser.add_argument("--schema-registry", required=True, metavar="URL", help="e.g. http://127.0.0.1:8081")
    parser.add_argument("--datacenter", required=True, help="this datacenter's name, written in each event")
    parser.add_argument("--rate", type=float, default=100.0, help="events per second (default 100)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds to run; 0: until stopped")
    parser.add_argument("--rising", default="", metavar="PAGE", help="a page whose views rise over the run")
    parser.add_argument("--rising-share", type=float, default=0.3, help="its share of page views at the end")
    parser.add_argument("--members", type=int_at_least(1), default=10_000)
    parser.add_argument("--pages", type=int_at_least(1), default=500)
    parser.add_argument("--skew", type=float, default=1.1, help="Zipf exponent of members and pages")
    parser.add_argument("--start-time", help="event time of the first event (ISO 8601, UTC); default now")
    parser.add_argument("--time-scale", type=float, default=1.0, help="event time runs this much faster")
    parser.add_argument("--audit-bootstrap", metavar="HOST:PORT,..", help="the audit topic's cluster")
    parser.add_argument("--audit-interval-ms", type=int_at_least(1), default=10_000)
    parser.add_argument("--audit-bucket-ms", type=int_at_least(1), default=600_000)
    parser.add_argument("--seed", type=int, help="random seed (repeatable traffic)")
    add_command_config(parser)
    parser.add_argument(
        "--acked-log", metavar="FILE", help="append each acknowledged event's id (JSON lines)"
    )
    parser.set_defaults(handler=reports_failures(run))


def run(args: argparse.Namespace) -> int:
    from backbone.tracking.generator import GeneratorSettings, TrafficGenerator
    from backbone.tracking.serde import RegistryError

    if args.rate <= 0 or args.duration < 0 or args.time_scale <= 0 or not 0 <= args.rising_share <= 1:
        raise UsageError("--rate and --time-scale must be above 0, --duration 0 or more, --rising-share 0..1")
    start_ms = 0
    if args.start_time:
        try:
            start = datetime.fromisoformat(args.start_time)
        except ValueError:
            raise UsageError(
                f"--start-time {args.start_time!r}: give an ISO time such as 2026-01-01T10:00"
            ) from None
        if start.tzinfo is None:
            start = start.replace(tzinfo=UTC)
        start_ms = int(start.timestamp() * 1000)
    settings = GeneratorSettings(
        bootstrap=args.bootstrap_server,
        registry_url=args.schema_registry,
        datacenter=args.datacenter,
        rate=args.rate,
        duration_s=args.duration,
        audit_bootstrap=args.audit_bootstrap or "",
        audit_interval_ms=args.audit_interval_ms,
        audit_bucket_ms=args.audit_bucket_ms,
        members=args.members,
        pages=args.pages,
        skew=args.skew,
        rising=args.rising,
        rising_share=args.rising_share,
        start_ms=start_ms,
        time_scale=args.time_scale,
        seed=args.seed,
        acked_path=args.acked_log or "",
        client=read_command_config(args.command_config),
    )
    stopping = []
    for number in (signal.SIGTERM, signal.SIGINT):  # stop sending, then flush what was sent
        signal.signal(number, lambda *_: stopping.append(True))
    try:
        generator = TrafficGenerator(settings)
    except RegistryError as error:
        raise UsageError(
            f"{error} (start one with `backbone schema-registry` or `backbone dev up`)"
        ) from None
    generator.run(stop=lambda: bool(stopping))
    return 1 if generator.failed else 0
