"""The `backbone` command: one subcommand module per area, each registering its own parser."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence

from backbone import __version__
from backbone.protocol.errors import KafkaError

# Each entry names a module in this package that defines `register(subparsers)`.
_COMMAND_MODULES = (
    "servers",
    "dev",
    "topics",
    "configs",
    "leaders",
    "produce",
    "consume",
    "groups",
    "perf",
    "mirror",
    "audit",
    "schema_registry",
    "generate",
    "health",
    "console",
    "users",
    "acls",
    "quotas",
)


class UsageError(Exception):
    """A mistake in how the command was called; the message says what to do instead."""


def _load_commands(subparsers: argparse._SubParsersAction) -> None:
    import importlib

    for name in _COMMAND_MODULES:
        module = importlib.import_module(f"backbone.cli.{name}")
        module.register(subparsers)


def _is_client_error(exc: BaseException) -> bool:
    """An error our client raised itself; only possible when a command has loaded the client."""
    errors = sys.modules.get("backbone.wire.errors")
    return errors is not None and isinstance(exc, errors.KafkaClientError)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="backbone",
        description="Backbone: a multi-datacenter event backbone that speaks the Kafka protocol.",
    )
    parser.add_argument("--version", action="version", version=f"backbone {__version__}")
    parser.add_argument(
        "--log-level",
        default="WARNING",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="logging threshold for messages on stderr (default: WARNING)",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    _load_commands(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    handler: Callable[[argparse.Namespace], int | None] = args.handler
    try:
        return handler(args) or 0
    except UsageError as exc:
        parser.exit(2, f"backbone {args.command}: {exc}\n")
    except Exception as exc:
        if not isinstance(exc, KafkaError) and not _is_client_error(exc):
            raise
        print(f"backbone {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
