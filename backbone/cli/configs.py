"""`backbone configs describe|alter`: dynamic broker configs, one broker's (`--broker ID`) or the cluster-wide
defaults (`--broker-defaults`), as kafka-configs.sh `--entity-type brokers --entity-name ID|--entity-default`
shows and changes them. Topic configs are `backbone topics describe|alter`'s."""

from __future__ import annotations

import argparse

from backbone.cli import UsageError
from backbone.cli.connect import (
    admin_session,
    config_change_options,
    config_changes,
    connection_options,
    described_changes,
    int_at_least,
    reports_failures,
)

# DescribeConfigs' config_source values, by Kafka's names.
SOURCES = {
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
}
_DYNAMIC = (2, 3)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("configs", help="describe and alter dynamic broker configs")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    target = argparse.ArgumentParser(add_help=False)
    which = target.add_mutually_exclusive_group(required=True)
    which.add_argument("--broker", type=int_at_least(0), metavar="ID", help="this broker's own configs")
    which.add_argument("--broker-defaults", action="store_true", help="the cluster-wide defaults")
    common = [connection_options(), target]

    describe = actions.add_parser(
        "describe", parents=common, help="the dynamic configs set, one a line: KEY=VALUE (SOURCE)"
    )
    describe.add_argument(
        "--all",
        action="store_true",
        help="every key of the broker with its source, not only the dynamic ones",
    )
    describe.set_defaults(handler=describe_configs)

    alter = actions.add_parser("alter", parents=common, help="set or remove dynamic broker configs")
    config_change_options(
        alter,
        "set a dynamic config (repeatable), e.g. log.retention.ms=86400000",
        "remove a dynamic config, so the next level down applies (repeatable)",
    )
    alter.set_defaults(handler=alter_configs)


def _resource_name(args: argparse.Namespace) -> str:
    """The broker resource's name: the broker id, or empty for the cluster-wide defaults (Kafka's)."""
    return "" if args.broker_defaults else str(args.broker)


def _what(args: argparse.Namespace) -> str:
    return "the cluster-wide defaults" if args.broker_defaults else f"broker {args.broker}"


@reports_failures
def describe_configs(args: argparse.Namespace) -> int:
    from backbone.client import ConfigResource, ConfigResourceType

    resource = ConfigResource(ConfigResourceType.BROKER, _resource_name(args))
    with admin_session(args) as admin:
        entries = admin.describe_configs([resource])[resource]
    shown = [e for _, e in sorted(entries.items()) if args.all or e.source in _DYNAMIC]
    if not shown:
        print(f"{_what(args)}: no dynamic configs set")
    for entry in shown:
        value = "(sensitive)" if entry.is_sensitive else entry.value
        print(f"{entry.name}={'' if value is None else value} ({SOURCES.get(entry.source, entry.source)})")
    return 0


@reports_failures
def alter_configs(args: argparse.Namespace) -> int:
    from backbone.client import ConfigResource, ConfigResourceType

    changes = config_changes(args)
    if not changes:
        raise UsageError("say what to change: --config KEY=VALUE or --delete-config KEY")
    resource = ConfigResource(ConfigResourceType.BROKER, _resource_name(args))
    with admin_session(args) as admin:
        admin.alter_configs({resource: changes})
    print(f"altered {_what(args)}: {', '.join(described_changes(changes))}")
    return 0
