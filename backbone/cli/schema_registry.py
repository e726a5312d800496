"""`backbone schema-registry --config FILE`: a Confluent-compatible schema registry in the foreground."""

from __future__ import annotations

import argparse
import asyncio
import sys

from backbone.properties import ConfigError, parse_overrides, read_properties_file


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "schema-registry", help="serve a Confluent-compatible schema registry (schemas kept in a topic)"
    )
    parser.add_argument("--config", required=True, help="a .properties or .toml file (see the docs)")
    parser.add_argument(
        "--override", action="append", default=[], metavar="KEY=VALUE", help="set a property (repeatable)"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from backbone.schema_registry.server import RegistryConfig, serve

    try:
        raw = read_properties_file(args.config)
        raw.update(parse_overrides(args.override))
        config = RegistryConfig.from_properties(raw)
    except (ConfigError, OSError) as exc:
        print(f"backbone schema-registry: configuration error: {exc}", file=sys.stderr)
        return 2
    asyncio.run(serve(config))
    return 0
