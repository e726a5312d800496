"""`backbone produce TOPIC`: one record per line of stdin, modelled on kafka-console-producer.sh and kcat -P.

Lines are read and sent one at a time, so memory stays bounded by the producer's `buffer.memory` however
long the input is: when the buffer is full, `send` waits for the broker to take batches.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, BinaryIO

from backbone.cli import UsageError
from backbone.cli.connect import (
    CommandFailed,
    admin_session,
    client_config,
    connection_options,
    int_at_least,
    reports_failures,
)

if TYPE_CHECKING:
    from backbone.client import RecordFuture

# The longest line one record may hold: the producer's default max.request.size. Reading a line stops
# there, so a huge line without a newline cannot take unbounded memory.
MAX_LINE_BYTES = 1_048_576
_CHECK_EVERY = 1024  # records between collecting outcomes and looking at the clock for progress
CLOSE_AFTER_ERROR_S = 5.0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "produce", parents=[connection_options()], help="send lines of stdin to a topic, one record each"
    )
    parser.add_argument("topic", metavar="TOPIC")
    parser.add_argument(
        "--key-separator", metavar="SEP", help="split each line at the first SEP into key and value"
    )
    parser.add_argument(
        "--allow-missing-key",
        action="store_true",
        help="with --key-separator: send a line without SEP as a value with a null key (default: error)",
    )
    parser.add_argument(
        "--header", action="append", default=[], metavar="KEY=VALUE", help="add a header to every record"
    )
    parser.add_argument("--partition", type=int_at_least(0), help="send every record to this partition")
    parser.add_argument("--acks", choices=["0", "1", "all"], default="all", help="default all")
    parser.add_argument(
        "--compression",
        choices=["none", "gzip", "snappy", "lz4", "zstd"],
        default="none",
        help="default none",
    )
    parser.add_argument("--linger-ms", type=int_at_least(0), default=5, help="default 5")
    parser.add_argument("--batch-size", type=int_at_least(0), default=16_384, help="bytes (default 16384)")
    parser.add_argument(
        "--progress", action="store_true", help="report progress on stderr (default: only when it is a TTY)"
    )
    parser.add_argument("--progress-interval", type=float, default=5.0, metavar="SECONDS", help="default 5")
    parser.set_defaults(handler=produce)


class Outcomes:
    """The futures of records sent, counted as acknowledged or failed once they complete.

    Completed futures are collected oldest first, every so often, on the reading thread: a done-callback
    per record costs about a third of the run's time (a lock and a call on the producer's I/O thread per
    record). The queue holds at most the records still in the producer's buffer, which `buffer.memory`
    bounds.
    """

    def __init__(self) -> None:
        self.pending: collections.deque[RecordFuture] = collections.deque()
        self.sent = 0
        self.acknowledged = 0
        self.failed = 0
        self.first_error: BaseException | None = None

    def add(self, future: RecordFuture) -> None:
        self.pending.append(future)
        self.sent += 1

    def collect(self) -> None:
        pending = self.pending
        while pending and pending[0].done():
            error = pending.popleft().exception(timeout=0)
            if error is None:
                self.acknowledged += 1
                continue
            self.failed += 1
            if self.first_error is None:
                self.first_error = error


def _headers(items: list[str]) -> list[tuple[str, bytes]]:
    # Not a dict: Kafka headers may repeat a name, and their order is kept.
    headers = []
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UsageError(f"--header takes key=value, got {item!r}")
        headers.append((name, value.encode()))
    return headers


def _split(
    line: bytes, separator: bytes | None, allow_missing: bool, number: int
) -> tuple[bytes | None, bytes]:
    if separator is None:
        return None, line
    key, sep, value = line.partition(separator)
    if sep:
        return key, value
    if allow_missing:
        return None, line
    raise CommandFailed(
        f"line {number} has no key separator {separator.decode()!r} (add --allow-missing-key to send "
        "such lines with a null key)"
    )


def _lines(stream: BinaryIO) -> Iterator[tuple[int, bytes | None]]:
    """(line number, line without its line ending), reading one line at a time; None for a line too long
    for a record (the rest of it is read and dropped, in bounded pieces)."""
    number = 0
    while line := stream.readline(MAX_LINE_BYTES + 2):
        number += 1
        if not line.endswith(b"\n") and len(line) > MAX_LINE_BYTES:
            while (rest := stream.readline(MAX_LINE_BYTES)) and not rest.endswith(b"\n"):
                pass
            yield number, None
            continue
        yield number, line.rstrip(b"\n").removesuffix(b"\r")


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


@reports_failures
def produce(args: argparse.Namespace) -> int:
    from backbone.client import Producer
    from backbone.protocol.errors import KafkaError

    if args.key_separator == "":
        raise UsageError("--key-separator must not be empty")
    if args.progress_interval < 0:
        raise UsageError("--progress-interval must not be negative")
    separator = args.key_separator.encode() if args.key_separator is not None else None
    headers = _headers(args.header)
    with admin_session(args):
        pass  # only proves the cluster answers, so an unreachable one is reported as such
    config = client_config(args) | {
        "acks": args.acks,
        "compression.type": args.compression,
        "linger.ms": args.linger_ms,
        "batch.size": args.batch_size,
        "max.request.size": MAX_LINE_BYTES + 1024,  # room for a longest line's key and headers
    }
    outcomes = Outcomes()
    refused = 0
    producer = Producer(config)
    finished = False
    try:
        partitions = producer.partitions_for(args.topic)
        if args.partition is not None and args.partition not in partitions:
            raise CommandFailed(
                f"topic {args.topic!r} has no partition {args.partition} (it has {len(partitions)})"
            )
        progress = _Progress(args, outcomes)
        for number, line in _lines(sys.stdin.buffer):
            if line is None:
                refused += 1
                print(
                    f"backbone produce: line {number} refused (going on): longer than {MAX_LINE_BYTES} "
                    "bytes, too long for a record",
                    file=sys.stderr,
                )
                continue
            key, value = _split(line, separator, args.allow_missing_key, number)
            try:
                future = producer.send(args.topic, value, key=key, headers=headers, partition=args.partition)
            except (ValueError, KafkaError) as error:  # refused before sending: too large, ...
                refused += 1
                print(f"backbone produce: line {number} refused (going on): {error}", file=sys.stderr)
                continue
            outcomes.add(future)
            if outcomes.sent % _CHECK_EVERY == 0:
                outcomes.collect()
                progress.report()
        producer.flush()
        finished = True
    finally:
        # After an error or Ctrl-C, what was sent gets a short while to go out, not the delivery timeout.
        producer.close(timeout=None if finished else CLOSE_AFTER_ERROR_S)
        outcomes.collect()  # every record has its outcome now: close fails those it could not deliver
        print(f"sent {plural(outcomes.acknowledged, 'record')} to {args.topic!r}", file=sys.stderr)
    if outcomes.failed:
        raise CommandFailed(f"{outcomes.failed} of {outcomes.sent} records failed: {outcomes.first_error}")
    if refused:
        raise CommandFailed(f"{plural(refused, 'line')} refused (see above); the others were sent")
    return 0


class _Progress:
    """Reports how far the run got every `--progress-interval` seconds, when asked or on a terminal.

    The first delivery failure is reported as soon as it is seen, so a long run does not hide it until
    the end (the run goes on: later records may still be delivered, and the count comes at the end).
    """

    def __init__(self, args: argparse.Namespace, outcomes: Outcomes) -> None:
        self.enabled = args.progress or sys.stderr.isatty()
        self.interval = args.progress_interval
        self.outcomes = outcomes
        self.started = self.last = time.monotonic()
        self.error_reported = False

    def report(self) -> None:
        outcomes = self.outcomes
        if outcomes.failed and not self.error_reported:
            self.error_reported = True
            print(f"backbone produce: a record failed (going on): {outcomes.first_error}", file=sys.stderr)
        now = time.monotonic()
        if not self.enabled or now - self.last < self.interval:
            return
        self.last = now
        rate = outcomes.sent / max(now - self.started, 1e-9)
        print(
            f"progress: {outcomes.sent} records sent, {outcomes.acknowledged} acknowledged, "
            f"{outcomes.failed} failed ({rate:.0f} records/s)",
            file=sys.stderr,
            flush=True,
        )
