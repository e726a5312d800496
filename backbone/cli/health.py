"""`backbone health broker`: whether one broker is registered in its cluster and answers Metadata.

A container's health check (docker/compose.yml) runs it against the broker's own listener: an open port
is not enough, the broker must answer a cluster description that lists its own id, which only happens once
it has registered in ZooKeeper and its metadata cache has seen itself. Exit 0 when healthy, 1 (with the
reason on stderr) when not.

    backbone health broker --bootstrap-server 127.0.0.1:9092 --broker-id 1
    python -m backbone.cli.health broker --broker-id 1     # the same, without loading every command

The second form is what the containers run every few seconds: it skips building the whole `backbone`
parser (which imports every command's module) and loads only the client.
"""

from __future__ import annotations

import argparse
import sys

from backbone.cli.connect import (
    CommandFailed,
    add_command_config,
    int_at_least,
    read_command_config,
    reports_failures,
)

_DEFAULT_TIMEOUT_MS = 5_000


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("health", help="health checks for containers and scripts")
    checks = parser.add_subparsers(dest="action", metavar="CHECK", required=True)
    broker = checks.add_parser("broker", help="the broker answers Metadata and lists itself as registered")
    broker.add_argument(
        "--bootstrap-server", default="127.0.0.1:9092", metavar="HOST:PORT", help="the broker's listener"
    )
    broker.add_argument("--broker-id", type=int_at_least(0), required=True, help="the broker's broker.id")
    broker.add_argument(
        "--timeout-ms",
        type=int_at_least(1),
        default=_DEFAULT_TIMEOUT_MS,
        help=f"how long to wait for the answer (default {_DEFAULT_TIMEOUT_MS})",
    )
    add_command_config(broker)
    broker.set_defaults(handler=reports_failures(_broker))


def _broker(args: argparse.Namespace) -> int:
    from backbone.client import Admin

    with Admin(
        read_command_config(args.command_config),
        bootstrap_servers=args.bootstrap_server,
        request_timeout_ms=args.timeout_ms,
        default_api_timeout_ms=args.timeout_ms,
    ) as admin:
        cluster = admin.describe_cluster()
    registered = sorted(b.node_id for b in cluster.brokers)
    if args.broker_id not in registered:
        raise CommandFailed(
            f"{args.bootstrap_server} answers, but broker {args.broker_id} is not registered (yet): "
            f"registered brokers {registered or 'none'}"
        )
    print(f"broker {args.broker_id} healthy: registered, controller {cluster.controller_id}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m backbone.cli.health")
    register(parser.add_subparsers(dest="command", metavar="COMMAND", required=True))
    args = parser.parse_args(["health", *(sys.argv[1:] if argv is None else argv)])
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
