"""`backbone storage`: inspect a partition directory on disk."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("storage", help="inspect partition logs on disk")
    parser.set_defaults(handler=lambda args: parser.print_help())
