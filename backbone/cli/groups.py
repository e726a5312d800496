"""`backbone groups list|describe|reset-offsets|delete`: consumer groups and their lag, modelled on
kafka-consumer-groups.sh.

    backbone groups list [--state [STATE,...]]
    backbone groups describe --group G [--group G2 | --all-groups] [--members [--verbose] | --state]
    backbone groups reset-offsets --group G (--topic T[:P,...] | --all-topics) --to-... [--execute]
    backbone groups delete --group G [--group G2] [--topic T[:P,...]]

`describe` shows, per partition the group committed or has assigned, the committed offset, the log end
offset and the lag between them (end minus committed), with the member owning the partition. Tables go to
stdout with "-" for what is unknown or missing; notes (a group without members) go to stderr.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from backbone.cli import UsageError
from backbone.cli.connect import CommandFailed, admin_session, connection_options, reports_failures
from backbone.cli.group_reset import parse_topic_partitions
from backbone.cli.group_reset import register_action as register_reset
from backbone.protocol.errors import (
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    KafkaError,
    NonEmptyGroupError,
    UnknownTopicOrPartitionError,
)

if TYPE_CHECKING:
    from backbone.client import Admin, BrokerInfo, GroupDescription
    from backbone.wire.groups.lag import PartitionLag

_MISSING = "-"
LAG_HEADER = [
    "GROUP",
    "TOPIC",
    "PARTITION",
    "CURRENT-OFFSET",
    "LOG-END-OFFSET",
    "LAG",
    "CONSUMER-ID",
    "HOST",
    "CLIENT-ID",
]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "groups",
        help="list, describe (with lag), reset offsets of and delete consumer groups",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    common = [connection_options()]

    listing = actions.add_parser("list", parents=common, help="list consumer group ids, one a line")
    listing.add_argument(
        "--state",
        nargs="?",
        const="",
        metavar="STATE,...",
        help="also show each group's state; with states (e.g. Stable,Empty) list only groups in them",
    )
    listing.set_defaults(handler=list_groups)

    describe = actions.add_parser(
        "describe", parents=common, help="offsets and lag per partition, or members, or state"
    )
    which = describe.add_mutually_exclusive_group(required=True)
    which.add_argument("--group", action="append", help="a group to describe (repeatable)")
    which.add_argument("--all-groups", action="store_true", help="describe every consumer group")
    view = describe.add_mutually_exclusive_group()
    view.add_argument("--offsets", action="store_true", help="offsets and lag per partition (the default)")
    view.add_argument("--members", action="store_true", help="the members and how many partitions each has")
    view.add_argument(
        "--state", action="store_true", help="coordinator, assignor, state and member count of each group"
    )
    describe.add_argument(
        "--verbose", action="store_true", help="with --members: list each member's partitions"
    )
    describe.set_defaults(handler=describe_groups)

    register_reset(actions, common)

    delete = actions.add_parser(
        "delete", parents=common, help="delete groups, or (with --topic) some of a group's committed offsets"
    )
    delete.add_argument("--group", action="append", required=True, help="a group to delete (repeatable)")
    delete.add_argument(
        "--topic",
        action="append",
        metavar="TOPIC[:P,...]",
        help="delete only the group's committed offsets of this topic or these partitions (repeatable)",
    )
    delete.set_defaults(handler=delete_groups)


def print_table(rows: Sequence[Sequence[str]]) -> None:
    """Rows (header first) as left-aligned columns, two spaces apart; cells never contain spaces."""
    if not rows:
        return
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def counted(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _cell(value: object) -> str:
    return _MISSING if value is None or value == "" else str(value)


def require_inactive(admin: Admin, group_id: str, doing: str) -> GroupDescription:
    """The group's description; CommandFailed when members are in it (their commits would undo ours)."""
    description = admin.describe_consumer_groups([group_id])[group_id]
    if description.is_active:
        raise CommandFailed(
            f"group {group_id!r} has {counted(len(description.members), 'active member')} "
            f"(state {description.state}); "
            f"stop its consumers before you {doing}"
        )
    return description


def _no_such_groups(group_ids: Iterable[str]) -> CommandFailed:
    listed = ", ".join(repr(g) for g in group_ids)
    return CommandFailed(
        f"no consumer group named {listed}; `backbone groups list` shows the groups there are"
    )


# -- list ----------------------------------------------------------------------------------------------


@reports_failures
def list_groups(args: argparse.Namespace) -> int:
    states = [s.strip() for s in args.state.split(",") if s.strip()] if args.state else None
    with admin_session(args) as admin:
        groups = admin.list_consumer_groups(states)
    if args.state is None:
        for group in groups:
            print(group.group_id)
        return 0
    print_table([["GROUP", "STATE"], *([g.group_id, _cell(g.state)] for g in groups)])
    return 0


# -- describe ------------------------------------------------------------------------------------------


@reports_failures
def describe_groups(args: argparse.Namespace) -> int:
    if args.verbose and not args.members:
        raise UsageError("--verbose goes with --members")
    with admin_session(args) as admin:
        group_ids = args.group or [g.group_id for g in admin.list_consumer_groups()]
        group_ids = list(dict.fromkeys(group_ids))
        if not group_ids:
            print("no consumer groups", file=sys.stderr)
            return 0
        descriptions = _described(admin, group_ids)
        lags = {} if args.state or args.members else admin.consumer_group_lag(group_ids)
        # A group named on the command line that its coordinator does not know (and that holds no offsets)
        # is an error; one that vanished between listing and describing (--all-groups) is left out.
        absent = [g for g in group_ids if _absent(descriptions[g]) and not lags.get(g)]
        if absent and args.group:
            raise _no_such_groups(absent)
        known = [g for g in group_ids if g not in absent]
        if args.state:
            brokers = {b.node_id: b for b in admin.describe_cluster().brokers}
            print_table(_state_rows([descriptions[g] for g in known], brokers))
        elif args.members:
            print_table(_member_rows([descriptions[g] for g in known], verbose=args.verbose))
        else:
            print_table([LAG_HEADER, *(lag_row(row) for g in known for row in lags[g])])
    for group_id in known:
        if not descriptions[group_id].members:
            print(f"consumer group {group_id!r} has no active members", file=sys.stderr)
    return 0


def _absent(description: GroupDescription) -> bool:
    """A group the coordinator does not know (DescribeGroups before v6 describes it as Dead)."""
    return description.state == "Dead" and not description.members


def _described(admin: Admin, group_ids: list[str]) -> dict[str, GroupDescription]:
    try:
        return admin.describe_consumer_groups(group_ids)
    except GroupIdNotFoundError as error:
        raise _no_such_groups(getattr(error, "errors", group_ids)) from None


def lag_row(row: PartitionLag) -> list[str]:
    owner = row.owner
    return [
        row.group_id,
        row.topic,
        str(row.partition),
        _cell(row.committed_offset),
        _cell(row.log_end_offset),
        _cell(row.lag),
        _cell(owner and owner.member_id),
        _cell(owner and owner.host),
        _cell(owner and owner.client_id),
    ]


def _member_rows(descriptions: Iterable[GroupDescription], *, verbose: bool) -> list[list[str]]:
    header = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"] + (
        ["ASSIGNMENT"] if verbose else []
    )
    rows = [header]
    for d in descriptions:
        for m in sorted(d.members):
            row = [d.group_id, m.member_id, _cell(m.host), _cell(m.client_id), str(len(m.assignment))]
            if verbose:
                row.append(",".join(str(tp) for tp in m.assignment) or _MISSING)
            rows.append(row)
    return rows


def _state_rows(descriptions: Iterable[GroupDescription], brokers: dict[int, BrokerInfo]) -> list[list[str]]:
    rows = [["GROUP", "COORDINATOR", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]]
    for d in descriptions:
        broker = brokers.get(d.coordinator)
        where = f"{broker.host}:{broker.port}({d.coordinator})" if broker else f"({d.coordinator})"
        rows.append([d.group_id, where, _cell(d.protocol), _cell(d.state), str(len(d.members))])
    return rows


# -- delete --------------------------------------------------------------------------------------------


@reports_failures
def delete_groups(args: argparse.Namespace) -> int:
    group_ids = list(dict.fromkeys(args.group))
    with admin_session(args) as admin:
        if args.topic:
            if len(group_ids) > 1:
                raise UsageError("--topic deletes the offsets of one group; name one --group")
            return _delete_offsets(admin, group_ids[0], [parse_topic_partitions(t) for t in args.topic])
        errors: dict[str, Exception] = {}
        try:
            deleted = admin.delete_consumer_groups(group_ids)
        except KafkaError as error:
            per_group = getattr(error, "errors", None)  # a partial failure names each group's error
            if per_group is None:
                raise
            deleted, errors = getattr(error, "results", {}), per_group
    for group_id in group_ids:
        if group_id in deleted:
            print(f"deleted consumer group {group_id!r}")
    problems = []
    for group_id, failure in errors.items():
        if isinstance(failure, GroupIdNotFoundError):
            problems.append(f"no consumer group named {group_id!r}")
        elif isinstance(failure, NonEmptyGroupError):
            problems.append(f"group {group_id!r} has active members; stop its consumers first")
        else:
            problems.append(f"group {group_id!r}: {failure}")
    if problems:
        raise CommandFailed("; ".join(problems))
    return 0


def _delete_offsets(admin: Admin, group_id: str, specs: list[tuple[str, list[int] | None]]) -> int:
    from backbone.client import TopicPartition

    whole = [topic for topic, listed in specs if listed is None]
    partitions = {TopicPartition(topic, p) for topic, listed in specs for p in listed or ()}
    if whole:
        try:
            described = admin.describe_topics(whole)
        except UnknownTopicOrPartitionError:
            raise CommandFailed(f"no topic named {', '.join(map(repr, whole))}") from None
        partitions |= {TopicPartition(t, p.partition) for t in whole for p in described[t].partitions}
    try:
        admin.delete_consumer_group_offsets(group_id, sorted(partitions))
    except GroupIdNotFoundError:
        raise _no_such_groups([group_id]) from None
    except GroupSubscribedToTopicError as error:
        failed = sorted({tp.topic for tp in getattr(error, "errors", {})})
        raise CommandFailed(
            f"group {group_id!r} has members subscribed to {', '.join(map(repr, failed))}; stop them first"
        ) from None
    print(f"deleted the committed offsets of {counted(len(partitions), 'partition')} from group {group_id!r}")
    return 0
