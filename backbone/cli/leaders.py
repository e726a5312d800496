"""`backbone leaders elect`: move partition leadership, modelled on kafka-leader-election.sh.

A preferred election gives each partition back to the first replica of its assignment (after a broker came
back, leadership stays where failover put it until then); an unclean election gives a leaderless partition
to any live replica, accepting the loss of records it never got.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from backbone.cli import UsageError
from backbone.cli.connect import admin_session, connection_options, int_at_least, reports_failures

if TYPE_CHECKING:
    from backbone.client import TopicPartition


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("leaders", help="elect partition leaders (preferred or unclean)")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    elect = actions.add_parser(
        "elect", parents=[connection_options()], help="run a preferred or unclean leader election"
    )
    elect.add_argument("--type", choices=["preferred", "unclean"], default="preferred", dest="election_type")
    which = elect.add_mutually_exclusive_group(required=True)
    which.add_argument("--all-topic-partitions", action="store_true", help="every partition of the cluster")
    which.add_argument("--topic", help="one topic (all its partitions unless --partition is given)")
    which.add_argument(
        "--path-to-json-file",
        type=Path,
        help='partitions as JSON: {"partitions": [{"topic": T, "partition": P}, ...]}',
    )
    elect.add_argument(
        "--partition", type=int_at_least(0), action="append", help="with --topic: this partition (repeatable)"
    )
    elect.set_defaults(handler=elect_leaders)


@reports_failures
def elect_leaders(args: argparse.Namespace) -> int:
    from backbone.client import TopicPartition
    from backbone.protocol.errors import ElectionNotNeededError

    if args.partition and not args.topic:
        raise UsageError("--partition needs --topic")
    # A bad file is a usage error, found before connecting.
    partitions = _partitions_from_file(args.path_to_json_file) if args.path_to_json_file else None
    with admin_session(args) as admin:
        if args.topic:
            numbers = args.partition or [
                p.partition for p in admin.describe_topics([args.topic])[args.topic].partitions
            ]
            partitions = [TopicPartition(args.topic, p) for p in numbers]
        results = admin.elect_leaders(args.election_type, partitions)
    failed = 0
    internal_fine = 0  # with --all-topic-partitions: internal partitions that needed nothing, summed up
    for tp, error in sorted(results.items()):
        if error is None:
            print(f"{tp.topic}-{tp.partition}: new {args.election_type} leader elected")
        elif (
            isinstance(error, ElectionNotNeededError)
            and args.all_topic_partitions
            and tp.topic.startswith("__")
        ):
            internal_fine += 1
        elif isinstance(error, ElectionNotNeededError):
            print(f"{tp.topic}-{tp.partition}: election not needed: {error.message or 'it has its leader'}")
        else:
            failed += 1
            print(f"{tp.topic}-{tp.partition}: {error}", file=sys.stderr)
    if internal_fine:
        print(f"{internal_fine} internal partitions (__*): election not needed")
    return 1 if failed else 0


def _partitions_from_file(path: Path) -> list[TopicPartition]:
    from backbone.client import TopicPartition

    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        return [TopicPartition(str(p["topic"]), int(p["partition"])) for p in document["partitions"]]
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(
            f'{path} must hold {{"partitions": [{{"topic": "name", "partition": 0}}, ...]}} ({exc!r})'
        ) from None
