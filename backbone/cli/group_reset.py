"""`backbone groups reset-offsets`: move a consumer group's committed offsets, as kafka-consumer-groups.sh
--reset-offsets does.

    backbone groups reset-offsets --group G --topic T[:P,...] --to-earliest            # dry run: the plan
    backbone groups reset-offsets --group G --all-topics --shift-by -100 --execute     # apply it

The partitions are those of `--topic` (every partition, or the listed ones; repeatable), or with
`--all-topics` every partition the group has committed an offset for. The target is one of --to-earliest,
--to-latest, --to-datetime ISO (the first record at or after that time; the log end when none is),
--to-offset N or --shift-by N (from the committed offset, which must exist), always clamped to the
partition's [log start, log end]. Without --execute nothing changes (--dry-run, the default); either way
the plan is printed. A group with members is refused: its consumers would overwrite the reset with their
next commit, so they must be stopped first (Kafka refuses too).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from backbone.cli import UsageError
from backbone.cli.connect import CommandFailed, admin_session, reports_failures
from backbone.client.admin import offset_reset
from backbone.client.admin.offset_reset import PlannedReset, ResetTarget
from backbone.protocol.errors import UnknownTopicOrPartitionError

if TYPE_CHECKING:
    from backbone.client import Admin, TopicPartition


def register_action(actions: argparse._SubParsersAction, parents: list[argparse.ArgumentParser]) -> None:
    reset = actions.add_parser(
        "reset-offsets",
        parents=parents,
        help="move a group's committed offsets (prints the plan; --execute applies it)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    reset.add_argument("--group", required=True, help="the consumer group")
    scope = reset.add_mutually_exclusive_group(required=True)
    scope.add_argument(
        "--topic",
        action="append",
        metavar="TOPIC[:P,...]",
        help="a topic, or some of its partitions, e.g. pageviews:0,2 (repeatable)",
    )
    scope.add_argument(
        "--all-topics", action="store_true", help="every partition the group has committed an offset for"
    )
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="to the log start offset")
    target.add_argument("--to-latest", action="store_true", help="to the log end offset (skip everything)")
    target.add_argument(
        "--to-datetime",
        metavar="TIME",
        help="to the first record at or after TIME: ISO 8601 (local time without a zone) or epoch ms",
    )
    target.add_argument("--to-offset", type=int, metavar="N", help="to offset N (clamped to the log)")
    target.add_argument("--shift-by", type=int, metavar="N", help="move by N from the committed offset (+/-)")
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="only print the plan (the default)")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    reset.set_defaults(handler=reset_offsets)


# -- pure parts: arguments and the plan ----------------------------------------------------------------


def parse_topic_partitions(spec: str) -> tuple[str, list[int] | None]:
    """`topic` -> (topic, None: all partitions); `topic:0,2` -> (topic, [0, 2])."""
    topic, sep, listed = spec.partition(":")
    if not topic:
        raise UsageError(f"--topic takes TOPIC or TOPIC:P,P..., got {spec!r}")
    if not sep:
        return topic, None
    try:
        partitions = sorted({int(p) for p in listed.split(",")})
    except ValueError:
        raise UsageError(
            f"partitions in {spec!r} must be integers separated by commas, e.g. {topic}:0,2"
        ) from None
    if partitions[0] < 0:
        raise UsageError(f"partitions in {spec!r} cannot be negative")
    return topic, partitions


def reset_target(args: argparse.Namespace) -> ResetTarget:
    """The target named by the mutually exclusive --to-*/--shift-by options."""
    from backbone.cli.consume import parse_time

    if args.to_earliest:
        return ResetTarget("earliest")
    if args.to_latest:
        return ResetTarget("latest")
    if args.to_datetime is not None:
        try:
            return ResetTarget("datetime", parse_time(args.to_datetime))
        except UsageError:
            raise UsageError(
                "--to-datetime takes ISO 8601 (e.g. 2024-05-01T12:00:00Z, local time without a zone) or "
                f"milliseconds since the epoch, got {args.to_datetime!r}"
            ) from None
    if args.to_offset is not None:
        return ResetTarget("offset", args.to_offset)
    return ResetTarget("shift", args.shift_by)


def plan_reset(
    target: ResetTarget, partitions: Iterable[TopicPartition], *offsets: Mapping[TopicPartition, int] | None
) -> list[PlannedReset]:
    """The client's plan (`backbone.client.admin.offset_reset.plan_reset`; `offsets` are the committed, log
    start, log end and by-time offsets); shifting a partition without a committed offset is a CommandFailed
    naming it: there is nothing to shift from."""
    try:
        return offset_reset.plan_reset(target, partitions, *offsets)  # type: ignore[arg-type]
    except offset_reset.NothingToShiftError as error:
        raise CommandFailed(
            f"cannot shift {', '.join(map(str, error.partitions))}: the group has no committed offset there "
            "(use --to-offset, --to-earliest, --to-latest or --to-datetime for those)"
        ) from None


def format_plan(group_id: str, plan: Iterable[PlannedReset]) -> list[list[str]]:
    """Table rows (header first) of a plan."""
    rows = [["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"]]
    for step in plan:
        current = "-" if step.current is None else str(step.current)
        rows.append([group_id, step.topic, str(step.partition), current, str(step.new)])
    return rows


# -- the command ---------------------------------------------------------------------------------------


@reports_failures
def reset_offsets(args: argparse.Namespace) -> int:
    from backbone.cli.groups import counted, print_table, require_inactive

    target = reset_target(args)
    specs = [parse_topic_partitions(spec) for spec in args.topic or []]
    with admin_session(args) as admin:
        require_inactive(admin, args.group, "reset its offsets")
        committed = {tp: o.offset for tp, o in admin.list_consumer_group_offsets(args.group).items()}
        partitions = _chosen_partitions(admin, specs, committed) if specs else sorted(committed)
        if not partitions:
            raise CommandFailed(
                f"group {args.group!r} has no committed offsets; name the partitions to reset with --topic"
            )
        plan = plan_reset(target, partitions, committed, *_offsets(admin, partitions, target))
        if not committed:
            verb = "creates it" if args.execute else "would create it"
            print(
                f"warning: group {args.group!r} has no committed offsets (is the name right?): "
                f"this {verb} with the offsets below",
                file=sys.stderr,
            )
        print_table(format_plan(args.group, plan))
        if not args.execute:
            print("dry run: nothing changed (add --execute to commit these offsets)", file=sys.stderr)
            return 0
        admin.alter_consumer_group_offsets(args.group, {(p.topic, p.partition): p.new for p in plan})
    print(f"reset the offsets of {counted(len(plan), 'partition')} of group {args.group!r}", file=sys.stderr)
    return 0


def _chosen_partitions(
    admin: Admin, specs: list[tuple[str, list[int] | None]], committed: Mapping[TopicPartition, int]
) -> list[TopicPartition]:
    from backbone.client import TopicPartition

    topics = list(dict.fromkeys(topic for topic, _ in specs))
    try:
        described = admin.describe_topics(topics)
    except UnknownTopicOrPartitionError as error:
        missing = ", ".join(repr(t) for t in getattr(error, "errors", topics))
        raise CommandFailed(
            f"no topic named {missing}; `backbone topics list` shows the topics there are"
        ) from None
    chosen: set[TopicPartition] = set()
    for topic, listed in specs:
        existing = {p.partition for p in described[topic].partitions}
        unknown = sorted(set(listed or ()) - existing)
        if unknown:
            raise CommandFailed(
                f"topic {topic!r} has no partition {', '.join(map(str, unknown))} "
                f"(it has {len(existing)}: 0..{len(existing) - 1})"
            )
        chosen |= {TopicPartition(topic, p) for p in (listed if listed is not None else existing)}
    return sorted(chosen)


def _offsets(
    admin: Admin, partitions: list[TopicPartition], target: ResetTarget
) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int], dict[TopicPartition, int] | None]:
    """Log start and end offsets of `partitions`, and for a datetime target the offsets at that time."""
    start = {tp: o.offset for tp, o in admin.list_offsets(dict.fromkeys(partitions, "earliest")).items()}
    end = {tp: o.offset for tp, o in admin.list_offsets(dict.fromkeys(partitions, "latest")).items()}
    by_time = None
    if target.kind == "datetime":
        by_time = {
            tp: o.offset for tp, o in admin.list_offsets(dict.fromkeys(partitions, target.value)).items()
        }
    return start, end, by_time
