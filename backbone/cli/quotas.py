"""`backbone quotas alter|describe`: client quotas in the cluster's ZooKeeper, the entities Kafka's
`kafka-configs --entity-type users|clients --alter --add-config producer_byte_rate=...` writes (same nodes,
same change notifications). Brokers apply a change within moments of it."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from backbone.cli import UsageError
from backbone.cli.connect import parse_assignments
from backbone.cli.users import open_store, zookeeper_options

if TYPE_CHECKING:
    from backbone.coordination.quotas import QuotaEntity

DEFAULT = "<default>"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("quotas", help="set and show client quotas (byte rates, request time)")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    common = zookeeper_options()
    entity = argparse.ArgumentParser(add_help=False)
    who = entity.add_mutually_exclusive_group()
    who.add_argument("--user", metavar="NAME", help="a user (its SASL or certificate principal name)")
    who.add_argument("--user-default", action="store_true", help="the default of every user")
    client = entity.add_mutually_exclusive_group()
    client.add_argument("--client-id", metavar="ID", help="a client id")
    client.add_argument("--client-default", action="store_true", help="the default of every client id")

    alter = actions.add_parser("alter", parents=[common, entity], help="set or remove quotas of one entity")
    alter.add_argument(
        "--add",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="producer_byte_rate, consumer_byte_rate (bytes/s) or request_percentage; repeatable",
    )
    alter.add_argument(
        "--delete", action="append", default=[], metavar="KEY", help="remove a quota; repeatable"
    )
    alter.set_defaults(handler=alter_quotas)

    describe = actions.add_parser(
        "describe", parents=[common, entity], help="quotas set, one entity a line (all when none is named)"
    )
    describe.set_defaults(handler=describe_quotas)


def _entity(args: argparse.Namespace) -> QuotaEntity | None:
    from backbone.coordination.quotas import CLIENT_ID, USER, make_quota_entity
    from backbone.protocol.errors import KafkaError

    components: list[tuple[str, str | None]] = []
    if args.user is not None or args.user_default:
        components.append((USER, None if args.user_default else args.user))
    if args.client_id is not None or args.client_default:
        components.append((CLIENT_ID, None if args.client_default else args.client_id))
    if not components:
        return None
    try:
        return make_quota_entity(components)
    except KafkaError as exc:
        raise UsageError(exc.message) from None


def _describe(entity: QuotaEntity) -> str:
    return " ".join(f"{kind}={DEFAULT if name is None else name}" for kind, name in entity)


def alter_quotas(args: argparse.Namespace) -> int:
    from backbone.coordination.quotas import check_quota_value
    from backbone.protocol.errors import KafkaError

    entity = _entity(args)
    if entity is None:
        raise UsageError(
            "name the entity: --user NAME or --user-default, and/or --client-id ID or --client-default"
        )
    if not args.add and not args.delete:
        raise UsageError("say what to change: --add KEY=VALUE and/or --delete KEY")
    values: dict[str, float] = {}
    try:
        for key, text in parse_assignments(args.add, "--add").items():
            try:
                number = float(text)
            except ValueError:
                raise UsageError(f"--add {key}={text}: the value must be a number") from None
            values[key] = check_quota_value(key, number)
        for key in args.delete:
            check_quota_value(key, 1.0)
    except KafkaError as exc:
        raise UsageError(exc.message) from None
    with open_store(args) as store:
        store.alter_client_quota(entity, values, args.delete)
    print(f"quotas of {_describe(entity)} updated")
    return 0


def describe_quotas(args: argparse.Namespace) -> int:
    entity = _entity(args)
    with open_store(args) as store:
        found = {entity: store.client_quota(entity)} if entity is not None else store.client_quotas()
    for each, values in found.items():
        if values:
            shown = ",".join(f"{key}={_number(value)}" for key, value in sorted(values.items()))
            print(f"{_describe(each)}\t{shown}")
    return 0


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else str(value)
