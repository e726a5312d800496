"""`backbone console --config FILE`: the web console; `backbone console hash-password` makes a user's hash."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import sys
from pathlib import Path

from backbone.cli.connect import CommandFailed, reports_failures


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "console", help="the web console: health, lag with history, mirrors and the audit of every cluster"
    )
    parser.add_argument("--config", type=Path, help="the console's TOML file (clusters, mirrors, users, ...)")
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    hashing = actions.add_parser("hash-password", help="print the password.hash of a [[users]] entry")
    hashing.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
    hashing.set_defaults(handler=run_hash)
    parser.set_defaults(handler=reports_failures(run_console))


def run_console(args: argparse.Namespace) -> int:
    from backbone.cli import UsageError
    from backbone.console.config import ConfigError, load
    from backbone.console.history import HistoryUnavailable
    from backbone.console.server import serve

    if args.config is None:
        raise UsageError("give --config FILE (see backbone/console/config.py for its keys)")
    try:
        config = load(args.config)
    except ConfigError as error:
        raise UsageError(str(error)) from None
    try:
        asyncio.run(serve(config))
    except HistoryUnavailable as error:
        raise CommandFailed(str(error)) from None
    except OSError as error:
        raise CommandFailed(f"cannot listen on {config.host}:{config.port}: {error.strerror}") from None
    return 0


def run_hash(args: argparse.Namespace) -> int:
    from backbone.console.auth import hash_password

    password = sys.stdin.readline().rstrip("\n") if args.password_stdin else getpass.getpass("password: ")
    if not password:
        raise CommandFailed("an empty password cannot be used")
    print(hash_password(password))
    return 0
