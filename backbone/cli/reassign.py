"""`backbone topics reassign`: move partitions to other brokers or change their replication factor, in the
modes of kafka-reassign-partitions.sh, with the copy's progress shown while it runs.

    backbone topics reassign --generate --topics-to-move-json-file topics.json --broker-list 1,2,3
    backbone topics reassign --execute --reassignment-json-file plan.json [--wait]
    backbone topics reassign --execute --topic T --partition 0 --replicas 2,3 [--wait]
    backbone topics reassign --verify [--reassignment-json-file plan.json | --topic T --partition 0] [--wait]
    backbone topics reassign --cancel (--reassignment-json-file plan.json | --topic T --partition 0)

The files are Kafka's: topics to move {"version": 1, "topics": [{"topic": "t"}]}, and a plan
{"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [2, 3]}]}. A plan given without a
mode is executed. Progress is the size of each new replica next to the leader's (DescribeLogDirs).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from backbone.cli import UsageError
from backbone.cli.connect import CommandFailed, admin_session, int_at_least, reports_failures

if TYPE_CHECKING:
    from backbone.client import (
        Admin,
        BrokerInfo,
        PartitionInfo,
        PartitionReassignment,
        TopicDescription,
        TopicPartition,
    )

    Plan = Mapping[TopicPartition, tuple[int, ...] | None]  # None: a partition named without a target
_REFRESH_S = 1.0
_SIZE_TIMEOUT_MS = 3000  # a broker that does not say its replica sizes by then is shown as unreachable


def register_action(actions: argparse._SubParsersAction, parents: list[argparse.ArgumentParser]) -> None:
    reassign = actions.add_parser(
        "reassign",
        parents=parents,
        help="move partitions between brokers, change their replication factor",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    mode = reassign.add_mutually_exclusive_group()
    mode.add_argument("--generate", action="store_true", help="propose a plan moving topics to --broker-list")
    mode.add_argument("--execute", action="store_true", help="start the plan (the default when one is given)")
    mode.add_argument("--verify", action="store_true", help="show reassignments in progress and their copy")
    mode.add_argument("--cancel", action="store_true", help="stop reassignments, back to the old replicas")
    reassign.add_argument(
        "--topics-to-move-json-file", type=Path, metavar="FILE", help="--generate: the topics to move"
    )
    reassign.add_argument(
        "--broker-list", metavar="IDS", help="--generate: the brokers to move them to, e.g. 1,2,3"
    )
    reassign.add_argument(
        "--disable-rack-aware", action="store_true", help="--generate: ignore broker.rack when placing"
    )
    reassign.add_argument(
        "--reassignment-json-file", type=Path, metavar="FILE", help="a plan in Kafka's JSON format"
    )
    reassign.add_argument("--topic")
    reassign.add_argument("--partition", type=int_at_least(0), action="append", help="repeatable")
    reassign.add_argument("--replicas", metavar="IDS", help="new replica list, preferred leader first: 2,3,1")
    reassign.add_argument("--wait", action="store_true", help="show progress until the copy is done")
    reassign.add_argument(
        "--timeout", type=int_at_least(1), default=600, help="seconds --wait waits at most (default 600)"
    )
    reassign.set_defaults(handler=reassign_partitions)


@reports_failures
def reassign_partitions(args: argparse.Namespace) -> int:
    if args.generate:
        return _generate(args)
    if args.topics_to_move_json_file or args.broker_list or args.disable_rack_aware:
        raise UsageError(
            "--topics-to-move-json-file, --broker-list and --disable-rack-aware go with --generate"
        )
    if args.cancel and args.wait:
        raise UsageError("--wait goes with --execute or --verify; a cancellation takes effect at once")
    plan = _plan(args)
    with admin_session(args) as admin:
        if args.cancel:
            return _cancel(admin, list(plan))
        if not args.verify:
            failed = _execute(admin, plan)
            if failed or not args.wait:
                return failed
        return _verify(admin, plan, wait=args.wait, timeout=args.timeout)


# -- plans: files and options ----------------------------------------------------------------------------


def _plan(args: argparse.Namespace) -> Plan:
    from backbone.client import TopicPartition

    starting = not (args.verify or args.cancel)
    if args.reassignment_json_file is not None:
        if args.topic or args.partition or args.replicas:
            raise UsageError("give either --reassignment-json-file or --topic/--partition/--replicas")
        return read_plan(_read(args.reassignment_json_file), str(args.reassignment_json_file))
    if args.topic is None:
        if args.partition or args.replicas:
            raise UsageError("--partition and --replicas need --topic")
        if args.verify:
            return {}
        raise UsageError("name the partitions: --topic T --partition P (or --reassignment-json-file)")
    if not args.partition:
        raise UsageError("--topic needs --partition (repeatable)")
    if not starting:
        if args.replicas:
            raise UsageError("--replicas only goes with --execute")
        return dict.fromkeys((TopicPartition(args.topic, p) for p in args.partition), None)
    if not args.replicas:
        raise UsageError("--replicas is required to start a reassignment, e.g. --replicas 2,3,1")
    replicas = parse_broker_list(args.replicas, "--replicas")
    return dict.fromkeys((TopicPartition(args.topic, p) for p in args.partition), replicas)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None


def parse_broker_list(text: str, option: str) -> tuple[int, ...]:
    """`1,2,3` as broker ids (a UsageError saying what is wrong otherwise)."""
    try:
        ids = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise UsageError(
            f"{option} must be broker ids separated by commas, e.g. 1,2,3; got {text!r}"
        ) from None
    if len(set(ids)) != len(ids):
        raise UsageError(f"{option} names a broker twice: {text}")
    return ids


def read_plan(text: str, source: str) -> dict[TopicPartition, tuple[int, ...]]:
    """A reassignment plan in Kafka's JSON format: {partition: target replicas}."""
    from backbone.client import TopicPartition

    example = '{"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2]}]}'
    plan: dict[TopicPartition, tuple[int, ...]] = {}
    try:
        for entry in json.loads(text)["partitions"]:
            tp = TopicPartition(_text(entry["topic"]), _integer(entry["partition"]))
            replicas = tuple(_integer(r) for r in entry["replicas"])
            if any(d != "any" for d in entry.get("log_dirs", ())):
                raise UsageError(
                    f"{source}: {tp} asks for log directories {entry['log_dirs']}; moving replicas between "
                    'log directories is not supported, give "any" or leave log_dirs out'
                )
            if tp in plan:
                raise UsageError(f"{source} lists {tp} twice")
            plan[tp] = replicas
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"{source} must hold {example} ({type(exc).__name__}: {exc})") from None
    if not plan:
        raise UsageError(f"{source} lists no partitions; it must hold {example}")
    return plan


def read_topics_to_move(text: str, source: str) -> list[str]:
    """The topics of a --topics-to-move-json-file: {"version": 1, "topics": [{"topic": "t"}]}."""
    try:
        topics = [_text(entry["topic"]) for entry in json.loads(text)["topics"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(
            f'{source} must hold {{"version": 1, "topics": [{{"topic": "t"}}]}} ({type(exc).__name__}: {exc})'
        ) from None
    if not topics:
        raise UsageError(f"{source} lists no topics")
    return sorted(set(topics))


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    return value


def _integer(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"expected an integer, got {value!r}")
    return value


def plan_json(replicas: Mapping[TopicPartition, Sequence[int]]) -> str:
    """Kafka's plan format, as kafka-reassign-partitions.sh prints it (one line, log_dirs "any")."""
    partitions = [
        {"topic": tp.topic, "partition": tp.partition, "replicas": list(r), "log_dirs": ["any"] * len(r)}
        for tp, r in sorted(replicas.items())
    ]
    return json.dumps({"version": 1, "partitions": partitions}, separators=(",", ":"))


# -- generate ----------------------------------------------------------------------------------------------


def propose(
    current: Mapping[TopicPartition, Sequence[int]],
    brokers: Sequence[BrokerInfo],
    *,
    ignore_racks: bool = False,
) -> dict[TopicPartition, tuple[int, ...]]:
    """New replicas for every partition of the topics in `current` on `brokers`, keeping each topic's
    partition count and replication factor (Kafka's placement: round-robin, rack-aware when racks are set)."""
    from backbone.client import TopicPartition
    from backbone.coordination import BrokerPlacement, assign_replicas

    placements = [BrokerPlacement(b.node_id, b.rack) for b in brokers]
    by_topic: dict[str, dict[int, Sequence[int]]] = {}
    for tp, replicas in current.items():
        by_topic.setdefault(tp.topic, {})[tp.partition] = replicas
    proposal: dict[TopicPartition, tuple[int, ...]] = {}
    for topic, partitions in sorted(by_topic.items()):
        factor = len(partitions[min(partitions)])
        assigned = assign_replicas(placements, len(partitions), factor, ignore_racks=ignore_racks)
        proposal.update({TopicPartition(topic, p): tuple(r) for p, r in assigned.items()})
    return proposal


def _generate(args: argparse.Namespace) -> int:
    from backbone.client import TopicPartition

    if args.topics_to_move_json_file is None or args.broker_list is None:
        raise UsageError("--generate needs --topics-to-move-json-file and --broker-list")
    if args.reassignment_json_file or args.topic or args.partition or args.replicas or args.wait:
        raise UsageError(
            "--generate takes only --topics-to-move-json-file, --broker-list, --disable-rack-aware"
        )
    topics = read_topics_to_move(_read(args.topics_to_move_json_file), str(args.topics_to_move_json_file))
    wanted = parse_broker_list(args.broker_list, "--broker-list")
    with admin_session(args) as admin:
        cluster = admin.describe_cluster().brokers
        known = sorted(b.node_id for b in cluster)
        unknown = sorted(set(wanted) - set(known))
        if unknown:
            raise CommandFailed(
                f"--broker-list names brokers {unknown} that are not in the cluster ({known})"
            )
        moving = admin.list_partition_reassignments()
        current = {
            TopicPartition(name, p.partition): _target(
                p.replicas, moving.get(TopicPartition(name, p.partition))
            )
            for name, description in admin.describe_topics(topics).items()
            for p in description.partitions
        }
    proposal = propose(
        current, [b for b in cluster if b.node_id in wanted], ignore_racks=args.disable_rack_aware
    )
    print(f"Current partition replica assignment\n{plan_json(current)}\n")
    print(f"Proposed partition reassignment configuration\n{plan_json(proposal)}")
    return 0


def _target(replicas: Sequence[int], moving: PartitionReassignment | None) -> tuple[int, ...]:
    return tuple(replicas) if moving is None else moving.target


# -- execute, cancel, verify -------------------------------------------------------------------------------


def _execute(admin: Admin, plan: Plan) -> int:
    """Start the plan; 1 when any partition was refused (the others still start)."""
    topics = admin.describe_topics()  # all: a topic that does not exist is the broker's to report
    current = {tp: info.replicas for tp in plan if (info := _partition(topics, tp)) is not None}
    print(f"Current partition replica assignment\n\n{plan_json(current)}\n")
    print("Save this to use as the --reassignment-json-file option during rollback")
    failed = 0
    for tp, error in sorted(admin.alter_partition_reassignments(plan).items()):
        if error is None:
            print(f"{tp}: reassignment started: replicas -> {list(plan[tp] or ())}")
        else:
            failed = 1
            print(f"{tp}: not started: {error}", file=sys.stderr)
    return failed


def _cancel(admin: Admin, partitions: list[TopicPartition]) -> int:
    failed = 0
    # What each partition goes back to, read before cancelling: the brokers' metadata may lag right after.
    ongoing = admin.list_partition_reassignments(partitions)
    outcomes = admin.alter_partition_reassignments(dict.fromkeys(partitions, None))
    for tp, error in sorted(outcomes.items()):
        if error is None:
            original = list(ongoing[tp].original) if tp in ongoing else []
            print(f"{tp}: reassignment cancelled, replicas back to {original}")
        else:
            failed = 1
            print(f"{tp}: not cancelled: {error}", file=sys.stderr)
    return failed


def _verify(admin: Admin, plan: Plan, *, wait: bool, timeout: int) -> int:
    """Show each reassignment's progress (once, or until all are done with --wait); then check that the
    partitions of the plan ended on their target replicas (exit 1 when one did not)."""
    deadline = time.monotonic() + timeout
    named = list(plan) or None
    while True:
        ongoing = admin.list_partition_reassignments(named)
        if ongoing:
            _show_progress(admin, ongoing)
        if not ongoing or not wait:
            break
        if time.monotonic() >= deadline:
            raise CommandFailed(
                f"the reassignments did not finish within {timeout} s; they go on in the background "
                "(watch them with --verify, stop them with --cancel)"
            )
        time.sleep(_REFRESH_S)
    finished = [tp for tp in plan if tp not in ongoing]
    mismatched = _show_finished(admin, finished, plan) if finished else 0
    if not ongoing and (not plan or any(target is not None for target in plan.values())):
        print("all reassignments done" if plan else "no reassignment in progress")
    return 1 if mismatched else 0


def _show_finished(admin: Admin, finished: list[TopicPartition], plan: Plan) -> int:
    topics = admin.describe_topics()  # all: a plan may name a topic that does not exist
    mismatched = 0
    for tp in sorted(finished):
        info, target = _partition(topics, tp), plan[tp]
        if info is None:
            mismatched += 1
            print(f"{tp}: no such partition", file=sys.stderr)
            continue
        replicas = info.replicas
        if target is None:
            print(f"{tp}: no reassignment in progress, replicas {list(replicas)}")
        elif tuple(replicas) == tuple(target):
            print(f"{tp}: reassignment complete, replicas {list(replicas)}")
        else:
            mismatched += 1
            print(
                f"{tp}: no reassignment in progress, but the replicas are {list(replicas)} rather than "
                f"{list(target)} (was it cancelled?)",
                file=sys.stderr,
            )
    return mismatched


def _show_progress(admin: Admin, ongoing: Mapping[TopicPartition, PartitionReassignment]) -> None:
    topics = admin.describe_topics(sorted({tp.topic for tp in ongoing}))
    leaders = {tp: info.leader if (info := _partition(topics, tp)) else -1 for tp in ongoing}
    sizes = _sizes(admin, {*leaders.values(), *(r for s in ongoing.values() for r in s.adding)} - {-1})
    for tp, state in sorted(ongoing.items()):
        print(progress_line(tp, state, leaders[tp], sizes))
    sys.stdout.flush()


def _partition(topics: Mapping[str, TopicDescription], tp: TopicPartition) -> PartitionInfo | None:
    description = topics.get(tp.topic)
    if description is None:
        return None
    return next((p for p in description.partitions if p.partition == tp.partition), None)


def _sizes(admin: Admin, brokers: set[int]) -> dict[int, dict[TopicPartition, int] | None]:
    """Each broker's replica sizes; None for a broker that did not answer (it may be down)."""
    from backbone.client import KafkaClientError, KafkaError

    found: dict[int, dict[TopicPartition, int] | None] = {}
    for broker in sorted(brokers):
        try:
            replicas = admin.describe_log_dirs([broker], timeout_ms=_SIZE_TIMEOUT_MS)[broker]
        except (KafkaClientError, KafkaError):
            found[broker] = None  # shown as "unreachable" next to the partition
            continue
        found[broker] = {tp: info.size for tp, info in replicas.items()}
    return found


def progress_line(
    tp: TopicPartition,
    state: PartitionReassignment,
    leader: int,
    sizes: Mapping[int, Mapping[TopicPartition, int] | None],
) -> str:
    """`t-0: replicas [3, 1], adding [3], removing [1]; leader 1 holds 2,000 bytes; broker 3 has 50% ...`"""
    head = (
        f"{tp}: in progress: replicas {list(state.replicas)}, adding {list(state.adding)}, "
        f"removing {list(state.removing)}"
    )
    if leader < 0:
        return f"{head}; no leader right now, nothing is copied"
    leader_sizes = sizes.get(leader)
    if leader_sizes is None:
        return f"{head}; leader {leader} is unreachable"
    total = leader_sizes.get(tp, 0)
    copies = []
    for replica in state.adding:
        held = sizes.get(replica)
        if held is None:
            copies.append(f"broker {replica} unreachable")
        else:
            size = held.get(tp, 0)
            copies.append(f"broker {replica} has {_percent(size, total)} ({size:,} bytes)")
    return f"{head}; leader {leader} holds {total:,} bytes; " + (", ".join(copies) or "nothing to copy")


def _percent(size: int, total: int) -> str:
    return "100%" if total <= 0 or size >= total else f"{size * 100 // total}%"
