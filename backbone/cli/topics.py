"""`backbone topics create|list|describe|alter|delete`: manage topics, modelled on kafka-topics.sh."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING

from backbone.cli import UsageError
from backbone.cli.connect import (
    CommandFailed,
    admin_session,
    config_change_options,
    config_changes,
    config_option,
    connection_options,
    described_changes,
    int_at_least,
    parse_assignments,
    reports_failures,
)
from backbone.cli.reassign import register_action as register_reassign
from backbone.protocol.errors import KafkaError, TopicAlreadyExistsError, UnknownTopicOrPartitionError

if TYPE_CHECKING:
    from backbone.client import Admin, PartitionInfo, TopicDescription, TopicPartition

# DescribeConfigs' config_source for a value set on the topic itself: what `describe` lists as the topic's
# configs, as kafka-topics.sh does (everything else is a broker or built-in default).
_TOPIC_OVERRIDE = 1
_NONE = "none"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("topics", help="create, list, describe, alter and delete topics")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    common = [connection_options()]

    create = actions.add_parser("create", parents=common, help="create a topic")
    create.add_argument("name", metavar="NAME")
    create.add_argument("--partitions", type=int_at_least(1), help="default: the broker's num.partitions")
    create.add_argument(
        "--replication-factor", type=int_at_least(1), help="default: the broker's default.replication.factor"
    )
    config_option(create, "a topic config (repeatable), e.g. retention.ms=86400000")
    create.add_argument("--if-not-exists", action="store_true", help="succeed if the topic already exists")
    create.set_defaults(handler=create_topic)

    listing = actions.add_parser("list", parents=common, help="list topic names, one a line")
    listing.add_argument("--include-internal", action="store_true", help="also list internal topics")
    listing.set_defaults(handler=list_topics)

    describe = actions.add_parser(
        "describe", parents=common, help="partitions (leader, replicas, ISR, watermarks) and configs"
    )
    describe.add_argument("names", nargs="*", metavar="NAME", help="topics to describe (default: all)")
    describe.set_defaults(handler=describe_topics)

    register_reassign(actions, common)

    alter = actions.add_parser("alter", parents=common, help="change a topic's configs or add partitions")
    alter.add_argument("name", metavar="NAME")
    config_change_options(
        alter,
        "set a topic config (repeatable)",
        "remove a topic config, so the default applies again (repeatable)",
    )
    alter.add_argument("--partitions", type=int_at_least(1), help="grow the topic to this many partitions")
    alter.set_defaults(handler=alter_topic)

    delete = actions.add_parser("delete", parents=common, help="delete topics")
    delete.add_argument("names", nargs="+", metavar="NAME")
    delete.add_argument("--if-exists", action="store_true", help="succeed for topics that do not exist")
    delete.set_defaults(handler=delete_topics)


def _no_such_topics(names: Iterable[str]) -> CommandFailed:
    listed = ", ".join(repr(name) for name in names)
    return CommandFailed(f"no topic named {listed}; `backbone topics list` shows the topics there are")


def _failures(error: KafkaError) -> dict[str, KafkaError]:
    """Per-topic failures of a batch admin call (the admin client attaches them), or re-raise `error`."""
    errors: dict[str, KafkaError] | None = getattr(error, "errors", None)
    if errors is None:
        raise error
    return errors


# -- create and list -----------------------------------------------------------------------------------


@reports_failures
def create_topic(args: argparse.Namespace) -> int:
    from backbone.client import NewTopic

    configs = parse_assignments(args.config, "--config")
    topic = NewTopic(args.name, args.partitions or -1, args.replication_factor or -1, configs=configs)
    with admin_session(args) as admin:
        try:
            admin.create_topics([topic])
        except TopicAlreadyExistsError:
            if not args.if_not_exists:
                raise CommandFailed(
                    f"topic {args.name!r} already exists (add --if-not-exists to accept that)"
                ) from None
            print(f"topic {args.name!r} already exists")
            return 0
    print(f"created topic {args.name!r}")
    return 0


@reports_failures
def list_topics(args: argparse.Namespace) -> int:
    with admin_session(args) as admin:
        names = admin.list_topics(include_internal=args.include_internal)
    for name in sorted(names):
        print(name)
    return 0


# -- describe ------------------------------------------------------------------------------------------


@reports_failures
def describe_topics(args: argparse.Namespace) -> int:
    from backbone.client import ConfigResource, ConfigResourceType, TopicPartition

    names = list(dict.fromkeys(args.names))
    with admin_session(args) as admin:
        try:
            topics = admin.describe_topics(names or None)
        except UnknownTopicOrPartitionError as error:
            raise _no_such_topics(_failures(error)) from None
        if not names:
            topics = {name: t for name, t in topics.items() if not t.is_internal}
        resources = [ConfigResource(ConfigResourceType.TOPIC, name) for name in topics]
        configs = admin.describe_configs(resources) if resources else {}
        watermarks = _watermarks(admin, topics.values())
    for name in names or sorted(topics):
        topic = topics[name]
        overrides = configs.get(ConfigResource(ConfigResourceType.TOPIC, name), {}).values()
        shown = ",".join(
            f"{c.name}={'(sensitive)' if c.is_sensitive else c.value}"
            for c in sorted(overrides)
            if c.source == _TOPIC_OVERRIDE
        )
        factor = len(topic.partitions[0].replicas) if topic.partitions else 0
        print(
            f"Topic: {name}\tPartitionCount: {len(topic.partitions)}\tReplicationFactor: {factor}\t"
            f"Configs: {shown}"
        )
        for p in topic.partitions:
            low, high = watermarks.get(TopicPartition(name, p.partition), ("?", "?"))
            print(
                f"\tTopic: {name}\tPartition: {p.partition}\tLeader: {p.leader if p.leader >= 0 else _NONE}\t"
                f"PreferredLeader: {_preferred(p)}\t"
                f"Replicas: {_ids(p.replicas)}\tIsr: {_ids(p.isr)}\tOffline: {_ids(p.offline_replicas)}\t"
                f"LowWatermark: {low}\tHighWatermark: {high}"
            )
    return 0


def _preferred(partition: PartitionInfo) -> str:
    """Whether the first replica leads: after a failover it does not until a preferred election
    (`backbone leaders elect`, or the controller's automatic rebalance) gives leadership back."""
    return "yes" if partition.replicas and partition.leader == partition.replicas[0] else "no"


def _ids(nodes: Iterable[int]) -> str:
    return ",".join(str(node) for node in nodes) or _NONE


def _watermarks(admin: Admin, topics: Iterable[TopicDescription]) -> dict[TopicPartition, tuple[int, int]]:
    """Low and high watermark of every partition that has a leader (only a leader can tell them)."""
    from backbone.client import TopicPartition

    led = [TopicPartition(t.name, p.partition) for t in topics for p in t.partitions if p.leader >= 0]
    if not led:
        return {}
    found = {}
    for spec in ("earliest", "latest"):
        try:
            found[spec] = admin.list_offsets(dict.fromkeys(led, spec))
        except KafkaError as error:
            # One partition's failure should not hide the others: describe still shows them, with "?".
            failed = _failures(error)
            print(
                f"backbone topics: {spec} offsets unavailable for {', '.join(map(str, failed))}: {error}",
                file=sys.stderr,
            )
            found[spec] = getattr(error, "results", {})
    return {
        tp: (found["earliest"][tp].offset, found["latest"][tp].offset)
        for tp in led
        if tp in found["earliest"] and tp in found["latest"]
    }


# -- alter and delete ----------------------------------------------------------------------------------


@reports_failures
def alter_topic(args: argparse.Namespace) -> int:
    from backbone.client import ConfigResource, ConfigResourceType

    changes = config_changes(args)
    if not changes and args.partitions is None:
        raise UsageError("say what to change: --config KEY=VALUE, --delete-config KEY or --partitions N")
    done = []
    with admin_session(args) as admin:
        try:
            if changes:
                admin.alter_configs({ConfigResource(ConfigResourceType.TOPIC, args.name): changes})
                done += described_changes(changes)
            if args.partitions is not None:
                admin.create_partitions({args.name: args.partitions})
                done.append(f"partitions now {args.partitions}")
        except UnknownTopicOrPartitionError:
            raise _no_such_topics([args.name]) from None
    print(f"altered topic {args.name!r}: {', '.join(done)}")
    return 0


@reports_failures
def delete_topics(args: argparse.Namespace) -> int:
    names = list(dict.fromkeys(args.names))
    with admin_session(args) as admin:
        try:
            deleted, errors = admin.delete_topics(names), {}
        except KafkaError as error:
            deleted, errors = getattr(error, "results", {}), _failures(error)
    for name in names:
        if name in deleted:
            print(f"deleted topic {name!r}")
    missing = [name for name, error in errors.items() if isinstance(error, UnknownTopicOrPartitionError)]
    for failure in errors.values():
        if not isinstance(failure, UnknownTopicOrPartitionError):
            raise failure
    if missing and not args.if_exists:
        raise CommandFailed(f"{_no_such_topics(missing)} (add --if-exists to accept that)")
    return 0
