"""What `topics`, `produce` and `consume` share: where the cluster is, how long to wait, how failures read.

Every client-side command takes `--bootstrap-server` (default: $BACKBONE_BOOTSTRAP, else the dc1 cluster of
`var/dev/topology.json` when run where `backbone dev up` wrote one, else 127.0.0.1:9092) and
`--request-timeout-ms`, and opens the cluster through `admin_session`, which first asks for the cluster's
description. That first request is what tells "nothing answers at this address" apart from later failures,
so only then does the message tell the user to check the address and the brokers.

These modules import the client only inside the functions that run a command: every `backbone` command
loads all command modules to build its parser, and most never need the client (it costs ~0.1 s).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import socket
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backbone.cli import UsageError

if TYPE_CHECKING:
    from backbone.client import Admin

BOOTSTRAP_ENV = "BACKBONE_BOOTSTRAP"
DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_REQUEST_TIMEOUT_MS = 15_000
# Where `backbone dev up` records its topology when run from a checkout (backbone.dev.topology's default;
# not imported: it loads ZooKeeper's client, which most commands never need).
DEV_TOPOLOGY = Path("var/dev/topology.json")
_PROBED_SERVERS = 3  # bootstrap servers `probe` tries, each for at most _PROBE_TIMEOUT_S
_PROBE_TIMEOUT_S = 1.0

Handler = Callable[[argparse.Namespace], int]


class CommandFailed(Exception):
    """The command could not do its job; the message says why and what to check. Exit status 1."""


def int_at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer of at least `low` (argparse reports anything else as a usage error)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value

    return parse


def dev_topology() -> dict[str, Any] | None:
    """The topology `backbone dev up` recorded in this directory's var/dev, if any."""
    try:
        return json.loads(DEV_TOPOLOGY.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def dev_command_config(bootstrap: str) -> str | None:
    """The client settings `backbone dev up --secure` wrote for a cluster of its topology, if `bootstrap` is
    one: commands run from the checkout reach the secure local topology without --command-config."""
    for cluster in (dev_topology() or {}).get("clusters", {}).values():
        security = cluster.get("security")
        if security and cluster.get("bootstrap") == bootstrap:
            return security.get("command_config")
    return None


def default_bootstrap(cluster: str = "dc1") -> str:
    """$BACKBONE_BOOTSTRAP, else `cluster` of the local dev topology, else 127.0.0.1:9092."""
    found = os.environ.get(BOOTSTRAP_ENV)
    if not found:
        found = ((dev_topology() or {}).get("clusters", {}).get(cluster) or {}).get("bootstrap")
    return found or DEFAULT_BOOTSTRAP


def connection_options(cluster: str = "dc1") -> argparse.ArgumentParser:
    """A parent parser with the options every client-side command takes."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument(
        "--bootstrap-server",
        metavar="HOST:PORT[,...]",
        default=default_bootstrap(cluster),
        help=f"brokers to connect to first (default: ${BOOTSTRAP_ENV}, else the {cluster} cluster of "
        f"{DEV_TOPOLOGY} when it exists, else {DEFAULT_BOOTSTRAP})",
    )
    parser.add_argument(
        "--request-timeout-ms",
        type=int_at_least(1),
        default=DEFAULT_REQUEST_TIMEOUT_MS,
        metavar="MS",
        help=f"how long to wait for the cluster to answer (default {DEFAULT_REQUEST_TIMEOUT_MS})",
    )
    add_command_config(parser)
    return parser


def add_command_config(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--command-config",
        metavar="FILE",
        help="client properties (security.protocol, sasl.*, ssl.*, ...) as Kafka's tools take them",
    )


def client_config(args: argparse.Namespace) -> dict[str, Any]:
    """The settings every client of this command gets (Kafka property names)."""
    path = getattr(args, "command_config", None) or dev_command_config(args.bootstrap_server)
    config = read_command_config(path)
    config.update({"bootstrap.servers": args.bootstrap_server, "request.timeout.ms": args.request_timeout_ms})
    return config


def read_command_config(path: str | None) -> dict[str, Any]:
    """The client properties of `--command-config FILE` (none without a file); UsageError if unreadable."""
    if not path:
        return {}
    from backbone.properties import ConfigError, read_properties_file

    try:
        return dict(read_properties_file(path))
    except (OSError, ConfigError) as exc:
        raise UsageError(f"--command-config {path}: {exc}") from None


@contextmanager
def admin_session(args: argparse.Namespace) -> Iterator[Admin]:
    """An Admin client on a cluster known to answer (CommandFailed naming what to check if none does)."""
    from backbone.client import Admin, KafkaClientError

    config = client_config(args)
    with Admin(config, default_api_timeout_ms=args.request_timeout_ms) as admin:
        try:
            admin.describe_cluster()
        except KafkaClientError:
            raise CommandFailed(
                f"no broker answered at {args.bootstrap_server} within {args.request_timeout_ms} ms "
                f"({probe(args.bootstrap_server)}). Check that the brokers are running and that "
                f"--bootstrap-server (or ${BOOTSTRAP_ENV}) names a broker's listener as host:port, reachable "
                "from this machine"
            ) from None
        yield admin


def probe(servers: str) -> str:
    """What a plain TCP connect to each bootstrap server says, to name the cause of a failed first request.

    The client's own timeout error only says that nothing answered; "connection refused" (nothing listens)
    and a name that does not resolve call for different fixes.
    """
    from backbone.client.config import parse_bootstrap

    findings = []
    for server in [s.strip() for s in servers.split(",") if s.strip()][:_PROBED_SERVERS]:
        try:
            with socket.create_connection(parse_bootstrap(server), timeout=_PROBE_TIMEOUT_S):
                findings.append(f"{server}: accepts connections but gave no Kafka answer")
        except (OSError, ValueError) as error:
            reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
            findings.append(f"{server}: {reason}")
    return "; ".join(findings)


def reports_failures(handler: Handler) -> Handler:
    """Print CommandFailed and client-side errors as `backbone COMMAND: message` and exit 1.

    The command's entry point already does this for Kafka error codes (KafkaError); client-side errors
    (timeouts, lost connections) are a separate hierarchy, so they are turned into the same one line here
    rather than ending in a traceback.
    """

    @functools.wraps(handler)
    def run(args: argparse.Namespace) -> int:
        from backbone.client import KafkaClientError

        try:
            return handler(args)
        except (CommandFailed, KafkaClientError) as error:
            print(f"backbone {args.command}: {error}", file=sys.stderr)
            return 1

    return run


def parse_assignments(items: list[str], option: str) -> dict[str, str]:
    """`key=value` strings of a repeatable option as a dict; a malformed or repeated one is a UsageError."""
    result: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"{option} takes key=value, got {item!r}")
        if key in result:
            raise UsageError(f"{option} gives {key!r} twice")
        result[key] = value
    return result


def config_option(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument(
        "--config", action="extend", nargs="+", default=[], metavar="KEY=VALUE", help=help_text
    )


def config_change_options(parser: argparse.ArgumentParser, set_help: str, delete_help: str) -> None:
    """--config KEY=VALUE and --delete-config KEY, which `config_changes` reads as one set of changes."""
    config_option(parser, set_help)
    parser.add_argument(
        "--delete-config", action="extend", nargs="+", default=[], metavar="KEY", help=delete_help
    )


def config_changes(args: argparse.Namespace) -> dict[str, str | None]:
    """--config KEY=VALUE and --delete-config KEY as the changes an incremental alter makes (None: delete)."""
    changes: dict[str, str | None] = dict(parse_assignments(args.config, "--config"))
    for key in args.delete_config:
        if key in changes:
            raise UsageError(f"{key!r} is both set with --config and removed with --delete-config")
        changes[key] = None
    return changes


def described_changes(changes: dict[str, str | None]) -> list[str]:
    """The changes of `config_changes` in words, as the alter commands report them: `set K=V`, `deleted K`."""
    return [f"set {k}={v}" if v is not None else f"deleted {k}" for k, v in changes.items()]
