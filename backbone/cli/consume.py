"""`backbone consume TOPIC`: print a topic's records, modelled on kafka-console-consumer.sh and kcat -C.

Records are written as bytes to stdout through a kcat-style `--format`, so binary keys and values pass
through unchanged; progress and the final count go to stderr. Without `--group` the consumer assigns
partitions itself, so nothing is committed and any number of these can read the same topic; with
`--group G` it joins group G (sharing the partitions with its other members), starts from the group's
committed offsets, and commits what it has written after each chunk, as kcat -G does.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from backbone.cli import UsageError
from backbone.cli.connect import (
    CommandFailed,
    admin_session,
    client_config,
    connection_options,
    int_at_least,
    reports_failures,
)
from backbone.protocol.errors import UnknownTopicOrPartitionError
from backbone.times import time_ms

if TYPE_CHECKING:
    from backbone.client import Admin, Consumer, ConsumerRecord, RecordList, TopicPartition

Field = Callable[["ConsumerRecord"], bytes]

DEFAULT_FORMAT = "%s\\n"
_ESCAPES = {"n": b"\n", "t": b"\t", "r": b"\r", "\\": b"\\"}
_FIELDS: dict[str, Field] = {
    "t": lambda r: r.topic.encode(),
    "p": lambda r: b"%d" % r.partition,
    "o": lambda r: b"%d" % r.offset,
    "T": lambda r: b"%d" % r.timestamp,
    "k": lambda r: bytes(r.key or b""),
    "s": lambda r: bytes(r.value or b""),
    "K": lambda r: b"%d" % (-1 if r.key is None else len(r.key)),
    "S": lambda r: b"%d" % (-1 if r.value is None else len(r.value)),
    "h": lambda r: b",".join(name.encode() + b"=" + (value or b"") for name, value in r.headers),
    "%": lambda r: b"%",
}
_IDLE_POLL_MS = 1000  # poll in slices this long when no --timeout-ms bounds the wait
# Records rendered and written at a time: bounds memory (one poll may otherwise return all that is
# buffered) and keeps output flowing to the reader.
_MAX_POLL_RECORDS = 500


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "consume", parents=[connection_options()], help="print a topic's records on stdout"
    )
    parser.add_argument("topic", metavar="TOPIC")
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true", help="start at the earliest record")
    start.add_argument("--offset", type=int_at_least(0), help="start at this offset (needs --partition)")
    start.add_argument(
        "--from-time",
        metavar="TIME",
        help="start at the first record at or after TIME: ISO 8601 (local time without a zone) or epoch ms",
    )
    parser.add_argument("--partition", type=int_at_least(0), help="read only this partition (default: all)")
    parser.add_argument(
        "--group",
        metavar="GROUP",
        help="join this consumer group: start at its committed offsets (else at the beginning with "
        "--from-beginning, else the end) and commit as records are written",
    )
    parser.add_argument("--max-messages", type=int_at_least(1), help="exit after this many records")
    parser.add_argument(
        "--timeout-ms",
        type=int_at_least(0),
        help="exit when no record arrives for this long (default: wait for ever)",
    )
    parser.add_argument(
        "--format",
        help="kcat-style output: %%t topic, %%p partition, %%o offset, %%k key, %%s value, %%T timestamp "
        "(ms), %%h headers (k=v,...), %%K/%%S key/value length, %%%% a %%; \\n \\t \\r \\\\ escapes "
        "(default %%s\\n)",
    )
    parser.add_argument("--print-key", action="store_true", help="print the key, a tab, then the value")
    parser.add_argument(
        "--print-metadata",
        action="store_true",
        help="prefix each record with its partition, offset, timestamp",
    )
    parser.set_defaults(handler=consume)


def compile_format(text: str) -> list[bytes | Field]:
    """The format as literal bytes and field getters, in order (UsageError for an unknown placeholder)."""
    parts: list[bytes | Field] = []
    literal = bytearray()
    chars = iter(text)
    for char in chars:
        if char not in "%\\":
            literal += char.encode()
            continue
        code = next(chars, "")
        table: dict[str, bytes] | dict[str, Field] = _ESCAPES if char == "\\" else _FIELDS
        if code not in table:
            known = " ".join(char + c for c in table)
            raise UsageError(f"--format: unknown {char}{code!r}; known: {known}")
        found = table[code]
        if isinstance(found, bytes):
            literal += found
            continue
        if literal:
            parts.append(bytes(literal))
            literal.clear()
        parts.append(found)
    if literal:
        parts.append(bytes(literal))
    return parts


def render(parts: list[bytes | Field], record: ConsumerRecord) -> bytes:
    return b"".join(part if isinstance(part, bytes) else part(record) for part in parts)


def _output_format(args: argparse.Namespace) -> str:
    if args.format is not None:
        if args.print_key or args.print_metadata:
            raise UsageError("--format cannot be combined with --print-key or --print-metadata")
        return str(args.format)
    text = "%k\\t%s\\n" if args.print_key else DEFAULT_FORMAT
    return "Partition:%p\\tOffset:%o\\tTimestamp:%T\\t" + text if args.print_metadata else text


def parse_time(text: str) -> int:
    """Milliseconds since the epoch from epoch ms or ISO 8601 (a time without a zone is local time)."""
    try:
        return time_ms(text, local=True)
    except ValueError:
        raise UsageError(
            f"--from-time takes ISO 8601 (e.g. 2024-05-01T12:00:00Z) or milliseconds since the epoch, "
            f"got {text!r}"
        ) from None


def _partitions(admin: Admin, args: argparse.Namespace) -> list[TopicPartition]:
    from backbone.client import TopicPartition

    try:
        topic = admin.describe_topics([args.topic])[args.topic]
    except UnknownTopicOrPartitionError:
        raise CommandFailed(
            f"no topic named {args.topic!r}; `backbone topics list` shows the topics there are"
        ) from None
    ids = [p.partition for p in topic.partitions]
    if args.partition is None:
        return [TopicPartition(args.topic, p) for p in ids]
    if args.partition not in ids:
        raise CommandFailed(f"topic {args.topic!r} has no partition {args.partition} (it has {len(ids)})")
    return [TopicPartition(args.topic, args.partition)]


def _check_offset(admin: Admin, tp: TopicPartition, offset: int) -> None:
    low = admin.list_offsets({tp: "earliest"})[tp].offset
    high = admin.list_offsets({tp: "latest"})[tp].offset
    if not low <= offset <= high:
        raise CommandFailed(
            f"offset {offset} is outside {tp}, which holds offsets {low} to {high - 1} "
            f"(offset {high} waits for the next record)"
        )


def _start(consumer: Consumer, args: argparse.Namespace, partitions: list[TopicPartition]) -> str:
    """Put every partition at its start position; returns where that is, in words."""
    if args.from_beginning:
        consumer.seek_to_beginning()
        return "the beginning"
    if args.offset is not None:
        consumer.seek(partitions[0], args.offset)
        return f"offset {args.offset}"
    if args.from_time is not None:
        stamp = parse_time(args.from_time)
        consumer.seek_to_timestamp(stamp)
        return f"time {stamp} ms"
    consumer.seek_to_end()
    return "the end (new records only)"


@reports_failures
def consume(args: argparse.Namespace) -> int:
    if args.offset is not None and args.partition is None:
        raise UsageError("--offset needs --partition (an offset means something in one partition only)")
    parts = compile_format(_output_format(args))
    if args.from_time is not None:
        parse_time(args.from_time)  # a usage mistake is reported before anything connects
    if args.group is not None and (args.partition is not None or args.from_time is not None):
        raise UsageError(
            "--group shares the topic's partitions through the group: drop --partition/--from-time"
        )
    with admin_session(args) as admin:
        partitions = _partitions(admin, args)
        if args.offset is not None:
            _check_offset(admin, partitions[0], args.offset)
    # Only an explicit --offset should fail when out of range; otherwise follow where the user started.
    reset = "none" if args.offset is not None else "latest" if _from_end(args) else "earliest"
    from backbone.client import Consumer

    if args.group is not None:
        config = client_config(args) | {"group.id": args.group, "enable.auto.commit": False}
        consumer = Consumer(config, auto_offset_reset=reset)
    else:
        consumer = Consumer(client_config(args), auto_offset_reset=reset)
    output = _Output(parts, consumer if args.group is not None else None)
    try:
        if args.group is not None:
            consumer.subscribe([args.topic])
            start = "the beginning" if args.from_beginning else "the end"
            print(
                f"consuming {args.topic!r} in group {args.group!r} from its committed offsets "
                f"(else {start}), committing as it goes",
                file=sys.stderr,
            )
        else:
            consumer.assign(partitions)
            where = _start(consumer, args, partitions)
            positions = ", ".join(f"{tp.partition}:{consumer.position(tp)}" for tp in partitions)
            print(f"consuming {args.topic!r} from {where} (partition:offset {positions})", file=sys.stderr)
        _copy_records(consumer, args, output)
    finally:
        consumer.close()
        print(f"consumed {output.count} record{'' if output.count == 1 else 's'}", file=sys.stderr)
    return 0


def _from_end(args: argparse.Namespace) -> bool:
    return not (args.from_beginning or args.offset is not None or args.from_time is not None)


class _Output:
    """Writes rendered records to stdout as bytes and counts them."""

    def __init__(self, parts: list[bytes | Field], committer: Consumer | None = None) -> None:
        self.parts = parts
        self.count = 0
        self.stream = sys.stdout.buffer
        self.committer = committer  # a group's consumer: commit what was written

    def write(self, batches: dict[TopicPartition, RecordList]) -> bool:
        """Write the records; False when the reader has gone away."""
        chunk = [render(self.parts, record) for records in batches.values() for record in records]
        # Counted before writing: a Ctrl-C arriving just after the write must not report them unread.
        self.count += len(chunk)
        try:
            self.stream.write(b"".join(chunk))
            self.stream.flush()
        except BrokenPipeError:
            # The reader went away (`| head`): that ends the output, as for any Unix filter. stdout now
            # points at /dev/null so the interpreter's final flush does not fail on the closed pipe.
            os.dup2(os.open(os.devnull, os.O_WRONLY), self.stream.fileno())
            return False
        if self.committer is not None:
            self.committer.commit()  # the positions after the records just written
        return True


def _copy_records(consumer: Consumer, args: argparse.Namespace, output: _Output) -> None:
    """Copy records to `output` until --max-messages, --timeout-ms of silence, or the reader goes away."""
    last_record = time.monotonic()
    while args.max_messages is None or output.count < args.max_messages:
        wait_ms = _IDLE_POLL_MS
        if args.timeout_ms is not None:
            wait_ms = int(args.timeout_ms - (time.monotonic() - last_record) * 1000)
            if wait_ms <= 0:
                return
        limit = _MAX_POLL_RECORDS
        if args.max_messages is not None:
            limit = min(limit, args.max_messages - output.count)
        batches = consumer.poll(timeout_ms=wait_ms, max_records=limit)
        if batches:
            last_record = time.monotonic()
            if not output.write(batches):
                return
