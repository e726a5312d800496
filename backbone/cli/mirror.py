"""`backbone mirror`: copy a source cluster's topics into a target cluster until stopped (SIGTERM/Ctrl-C).

Settings come from `--config FILE` (properties or TOML; see backbone/mirror/config.py for the keys) and
flags, flags winning. Several mirror processes with the same group share the partitions. A progress line
is logged every `progress.interval.ms`; `metrics.port` serves Prometheus metrics.
"""

from __future__ import annotations

import argparse
import asyncio
import logging

from backbone.cli import UsageError
from backbone.cli.connect import CommandFailed, probe, reports_failures
from backbone.properties import ConfigError, parse_overrides, read_properties_file
from backbone.stopping import stop_on_signals

_CHECK_TIMEOUT_MS = 10_000
_FLAGS = {
    "source_bootstrap": "source.bootstrap.servers",
    "target_bootstrap": "target.bootstrap.servers",
    "source_alias": "source.alias",
    "target_alias": "target.alias",
    "topics": "topics",
    "topics_regex": "topics.regex",
    "exclude": "topics.exclude",
    "group": "group.id",
    "instance_id": "instance.id",
    "naming": "topic.naming",
    "metrics_port": "metrics.port",
}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("mirror", help="copy topics from a source cluster into a target cluster")
    parser.add_argument("--config", metavar="FILE", help="mirror settings (properties or .toml)")
    parser.add_argument("--source-bootstrap", metavar="HOST:PORT,..", help="source.bootstrap.servers")
    parser.add_argument("--target-bootstrap", metavar="HOST:PORT,..", help="target.bootstrap.servers")
    parser.add_argument("--source-alias", help="the source cluster's name, e.g. dc1")
    parser.add_argument("--target-alias", help="the target cluster's name (default aggregate)")
    parser.add_argument("--topics", help="topics to mirror, comma separated")
    parser.add_argument("--topics-regex", metavar="REGEX", help="mirror every topic whose whole name matches")
    parser.add_argument("--exclude", metavar="REGEX", help="never mirror these (default __.*|_schemas)")
    parser.add_argument("--group", help="consumer group id (default mirror-SOURCE-TARGET)")
    parser.add_argument("--instance-id", help="static group membership: a restarted mirror resumes at once")
    parser.add_argument(
        "--naming", choices=["identity", "prefix"], help="target topic names (default identity)"
    )
    parser.add_argument("--metrics-port", type=int, help="serve Prometheus metrics on this port")
    parser.add_argument(
        "--property", action="append", default=[], metavar="KEY=VALUE", help="any other setting (repeatable)"
    )
    parser.set_defaults(handler=reports_failures(_run))


def settings(args: argparse.Namespace) -> dict[str, object]:
    raw: dict[str, object] = dict(read_properties_file(args.config)) if args.config else {}
    raw.update(parse_overrides(args.property))
    for option, key in _FLAGS.items():
        value = getattr(args, option)
        if value is not None:
            raw[key] = value
    return raw


def _check_reachable(side: str, servers: str, security: dict[str, object]) -> None:
    """Fail at start, naming the cluster and the cause, rather than retry silently against nothing."""
    from backbone.client import Admin, KafkaClientError

    with Admin(
        security,
        bootstrap_servers=servers,
        request_timeout_ms=_CHECK_TIMEOUT_MS,
        default_api_timeout_ms=_CHECK_TIMEOUT_MS,
    ) as admin:
        try:
            admin.describe_cluster()
        except KafkaClientError:
            raise CommandFailed(
                f"the {side} cluster did not answer at {servers} within {_CHECK_TIMEOUT_MS} ms "
                f"({probe(servers)}); check {side}.bootstrap.servers and that its brokers run"
            ) from None


def _run(args: argparse.Namespace) -> int:
    from backbone.mirror.config import MirrorConfig
    from backbone.mirror.mirror import Mirror

    try:
        config = MirrorConfig.from_properties(settings(args))  # a file, overrides, then flags
    except (ConfigError, ValueError) as error:
        raise UsageError(str(error)) from None
    logging.getLogger("backbone.mirror").setLevel(min(logging.INFO, logging.getLogger().level))
    from backbone.client.config import security_settings

    for side, servers, client in (
        ("source", config.source_bootstrap, config.consumer),
        ("target", config.target_bootstrap, config.producer),
    ):
        _check_reachable(side, servers, security_settings(client))

    async def main() -> None:
        stop = stop_on_signals()
        mirror = Mirror(config)
        if config.metrics_port:
            mirror.metrics.serve(config.metrics_port)
        await mirror.run(stop)

    asyncio.run(main())
    return 0
