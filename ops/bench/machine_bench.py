"""The machine's limit for the same bytes, beside Backbone's figures, measured side by side in one run.

    python ops/bench/machine_bench.py [--megabytes 256] [--rounds 5] [--sizes 16K,64K,256K,1M,4M,8M]
                                      [--loopback-megabytes 128] [--loopback-rounds 9] [--write]

1. Writes. Each round, in a rotating order, the same number of bytes (`--megabytes`) is written:
   - plain: sequential `os.write` of a 1 MiB buffer (a record batch's bytes) to a file in a temporary
     directory on the broker's disk, into the page cache; and the same ending with one `fsync`;
   - Backbone, one broker, one partition, acks=1, 1 MiB batches of 200-byte records: (a) pre-built batches
     sent through our client's connection (`BrokerConnection`, 5 requests in flight, as our producer keeps),
     one batch per Produce request; (b) our `Producer` (batch.size 1 MiB, linger.ms 5) sending the same
     number of records one `send` at a time.
   (a) measures the broker: our producer spends microseconds of Python on each record, so (b) is bound by
   the client at a fraction of what the broker takes; both are given. The rate is the bytes of the batches
   the broker stored (read back from its log files) over the time to the last acknowledgement, and each
   round's rate is also given as a fraction of that round's plain writes (the median of those fractions).
2. Reads. After (a), the stored batches are read back with Fetch requests of the largest region size
   (`--sizes`) through one connection, one request at a time, as a consumer does: MB/s of records received,
   and that as a fraction of the fastest loopback send of regions that size (3).
3. Loopback TCP (`machine_loopback.py`): `os.sendfile` against `preadv` into a reused buffer + `sendall`,
   and the broker's own two paths (a `pread` written through the transport, and `loop.sendfile`), for each
   region size in `--sizes`: GB/s, medians of `--loopback-rounds` (more and shorter than the write
   rounds: a short burst of other work on the machine then moves fewer of them). The broker picks its
   path by a size threshold; the result says whether these figures support it.

`--write` replaces the figures in the section "The machine's limit" of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import report  # noqa: E402
from local_cluster import one_broker, stop_on_termination, stored_batches  # noqa: E402
from machine_loopback import (  # noqa: E402
    BROKER_PREAD,
    BROKER_SENDFILE,
    METHODS,
    PLAIN_SENDFILE,
    measure_loopback,
)

from backbone.broker.region_sender import DEFAULT_SENDFILE_THRESHOLD  # noqa: E402
from backbone.client import Admin, NewTopic, Producer  # noqa: E402
from backbone.client.consumer.fetcher import scan_batches  # noqa: E402
from backbone.dev.processes import BrokerProcess  # noqa: E402
from backbone.protocol.api import ApiKey  # noqa: E402
from backbone.protocol.errors import error_for  # noqa: E402
from backbone.protocol.records import RecordBatchBuilder  # noqa: E402
from backbone.wire.connection import BrokerConnection, encode_kio  # noqa: E402
from backbone.wire.fetch import decode_fetch_response  # noqa: E402
from backbone.wire.produce import decode_produce_response, encode_produce_request  # noqa: E402

SECTION = "## The machine's limit"
NAME = "machine"
VALUE_SIZE = 200
BATCH_BYTES = 1 << 20
REQUEST_TIMEOUT_MS = 120_000

PLAIN = "plain `os.write` of 1 MiB buffers, page cache"
PLAIN_FSYNC = "the same, ending with one `fsync`"
BATCHES = "Backbone: pre-built 1 MiB batches, one connection, 5 requests in flight"
PRODUCER = "Backbone: our `Producer`, batch.size 1 MiB, linger.ms 5, the same records"
WRITE_ROWS = (PLAIN, PLAIN_FSYNC, BATCHES, PRODUCER)
SHORT_NAMES = {PLAIN: "plain", PLAIN_FSYNC: "plain+fsync", BATCHES: "batches", PRODUCER: "Producer"}
WARM_UP_BATCHES = 8


def progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def one_batch() -> tuple[bytes, int]:
    """A record batch of 200-byte records as close to 1 MiB as records allow, and its record count."""
    builder = RecordBatchBuilder()
    value = b"v" * VALUE_SIZE
    now = time.time_ns() // 1_000_000
    while builder.try_append(None, value, (), now, max_bytes=BATCH_BYTES):
        pass
    return builder.build(), builder.record_count


def plain_writes(directory: Path, buffer: bytes, count: int, durable: bool) -> float:
    """Seconds to write `buffer` `count` times to a new file (then fsync it when `durable`)."""
    path = directory / "plain-writes.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        started = time.perf_counter()
        for _ in range(count):
            if os.write(fd, buffer) != len(buffer):
                raise OSError(f"short write to {path}")
        if durable:
            os.fsync(fd)
        return time.perf_counter() - started
    finally:
        os.close(fd)
        path.unlink()


def connection(bootstrap: str) -> BrokerConnection:
    host, port = bootstrap.rsplit(":", 1)
    return BrokerConnection(
        host, int(port), -1, client_id="machine-bench", request_timeout_ms=REQUEST_TIMEOUT_MS
    )


async def produce_batches(bootstrap: str, topic: str, batch: bytes, count: int) -> float:
    """Seconds until the broker has acknowledged `count` Produce requests, each carrying `batch`."""
    broker = connection(bootstrap)
    payload = [(topic, [(0, batch)])]

    def encode(version: int) -> list[bytes]:
        return encode_produce_request(version, 1, REQUEST_TIMEOUT_MS, payload)

    async def produce_one() -> None:
        for result in await broker.request(ApiKey.PRODUCE, encode, decode_produce_response):
            if result.error_code:
                raise error_for(result.error_code, f"Produce to {topic}")

    try:
        await broker.connect()
        started = time.perf_counter()
        # The connection keeps 5 requests in flight; the others wait for a slot in order.
        await asyncio.gather(*(produce_one() for _ in range(count)))
        return time.perf_counter() - started
    finally:
        await broker.close()


def produce_records(bootstrap: str, topic: str, records: int) -> float:
    """Seconds for our Producer to send `records` 200-byte records and have them all acknowledged."""
    producer = Producer(
        bootstrap_servers=bootstrap,
        acks=1,
        enable_idempotence=False,
        linger_ms=5,
        batch_size=BATCH_BYTES,
    )
    value = b"v" * VALUE_SIZE
    send = producer.send
    try:
        started = time.perf_counter()
        for _ in range(records):
            send(topic, value, partition=0)
        producer.flush(timeout=REQUEST_TIMEOUT_MS / 1000)
        return time.perf_counter() - started
    finally:
        producer.close()


async def fetch_all(bootstrap: str, topic: str, end_offset: int, max_bytes: int) -> tuple[float, int]:
    """(seconds, bytes) to read the partition from offset 0 to `end_offset`, one Fetch at a time."""
    broker = connection(bootstrap)
    offset = received = 0
    try:
        await broker.connect()
        started = time.perf_counter()
        while offset < end_offset:
            request = encode_kio(
                ApiKey.FETCH,
                replica_id=-1,
                max_wait=500,
                min_bytes=1,
                max_bytes=max_bytes,
                isolation_level=0,
                session_id=0,
                session_epoch=-1,
                topics=[
                    {
                        "topic": topic,
                        "partitions": [
                            {"partition": 0, "fetch_offset": offset, "partition_max_bytes": max_bytes}
                        ],
                    }
                ],
            )
            response = await broker.request(ApiKey.FETCH, request, decode_fetch_response)
            fetched = response.topics[0][1][0]
            if response.error_code or fetched.error_code:
                raise error_for(response.error_code or fetched.error_code, f"Fetch from {topic}")
            records = fetched.records or b""
            next_offset = scan_batches(records)[1]
            if next_offset is None:
                raise RuntimeError(f"a Fetch of {topic} at offset {offset} returned no whole batch")
            received += len(records)
            offset = next_offset
        return time.perf_counter() - started, received
    finally:
        await broker.close()


def stored_bytes(log_dirs: str, topic: str, records: int) -> int:
    """Bytes of the batches stored for the topic, after checking they hold exactly `records` records."""
    headers = list(stored_batches(log_dirs, topic))
    stored = sum(header.record_count for header in headers)
    if stored != records:
        raise RuntimeError(f"{topic}: the log holds {stored:,} records, not {records:,}")
    return sum(header.size for header in headers)


@dataclass(frozen=True)
class Workload:
    """What every write measurement of a round writes: `count` times `batch`, `per_batch` records each."""

    batch: bytes
    per_batch: int
    count: int

    @property
    def records(self) -> int:
        return self.per_batch * self.count


def write_once(row: str, workload: Workload, directory: Path, broker: BrokerProcess, topic: str) -> float:
    """MB/s of one measurement of `row` (Backbone's rows: bytes as stored, counted from its log)."""
    if row in (PLAIN, PLAIN_FSYNC):
        seconds = plain_writes(directory, workload.batch, workload.count, durable=row == PLAIN_FSYNC)
        return len(workload.batch) * workload.count / seconds / 1e6
    if row == BATCHES:
        seconds = asyncio.run(produce_batches(broker.bootstrap, topic, workload.batch, workload.count))
    else:
        seconds = produce_records(broker.bootstrap, topic, workload.records)
    return stored_bytes(broker.properties["log.dirs"], topic, workload.records) / seconds / 1e6


def measure_writes(
    args: argparse.Namespace, directory: Path, fetch_bytes: int
) -> tuple[dict[str, list[float]], list[float]]:
    """MB/s of each write row per round, and MB/s of each round's Fetch of the pre-built batches."""
    batch, per_batch = one_batch()
    workload = Workload(batch, per_batch, max(1, args.megabytes * 2**20 // len(batch)))
    rates: dict[str, list[float]] = {row: [] for row in WRITE_ROWS}
    fetched: list[float] = []
    with one_broker(directory / "backbone") as broker:
        with Admin(bootstrap_servers=broker.bootstrap) as admin:
            admin.create_topics([NewTopic("warm-up", 1, 1)])
        # The broker's first requests pay for imports and first allocations: not part of any figure.
        asyncio.run(produce_batches(broker.bootstrap, "warm-up", batch, WARM_UP_BATCHES))
        for round_number in range(args.rounds):
            topics = {BATCHES: f"batches-{round_number}", PRODUCER: f"records-{round_number}"}
            with Admin(bootstrap_servers=broker.bootstrap) as admin:
                admin.create_topics([NewTopic(topic, 1, 1) for topic in topics.values()])
            turn = round_number % len(WRITE_ROWS)
            for row in WRITE_ROWS[turn:] + WRITE_ROWS[:turn]:
                rates[row].append(write_once(row, workload, directory, broker, topics.get(row, "")))
            read = fetch_all(broker.bootstrap, topics[BATCHES], workload.records, fetch_bytes)
            seconds, size = asyncio.run(read)
            fetched.append(size / seconds / 1e6)
            summary = ", ".join(f"{SHORT_NAMES[row]} {rates[row][-1]:,.0f}" for row in WRITE_ROWS)
            progress(f"round {round_number + 1} of {args.rounds}, MB/s: {summary}; fetch {fetched[-1]:,.0f}")
    return rates, fetched


# -- the report ------------------------------------------------------------------------------------


def size_name(size: int) -> str:
    return f"{size >> 20} MiB" if size >= 1 << 20 and size % (1 << 20) == 0 else f"{size >> 10} KiB"


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20}
    text = text.strip().upper().removesuffix("IB").removesuffix("B")
    return int(text[:-1]) * units[text[-1]] if text[-1:] in units else int(text)


def rate_cell(rates: list[float], unit: str = "MB/s") -> str:
    median = statistics.median(rates)
    if unit == "GB/s":
        return f"{median / 1e3:.2f} GB/s ({', '.join(f'{rate / 1e3:.2f}' for rate in rates)})"
    return f"{median:,.0f} MB/s ({', '.join(f'{rate:,.0f}' for rate in rates)})"


def fraction(ours: list[float], theirs: list[float]) -> float:
    """The median of the rounds' ratios: each round's figures were measured side by side."""
    return statistics.median(mine / other for mine, other in zip(ours, theirs, strict=True))


def fastest_sendfile_from(medians: dict[str, dict[int, float]]) -> int | None:
    """The smallest region size from which the broker's `loop.sendfile` beat its `pread + write` at
    every measured size (None: at no size, or not at the largest)."""
    found = None
    for size in sorted(medians[BROKER_SENDFILE], reverse=True):
        if medians[BROKER_SENDFILE][size] <= medians[BROKER_PREAD][size]:
            break
        found = size
    return found


def threshold_verdict(medians: dict[str, dict[int, float]]) -> str:
    threshold = DEFAULT_SENDFILE_THRESHOLD
    told = (
        f"The broker sends a region of {size_name(threshold)} or more with `loop.sendfile` and reads a "
        "smaller one into memory, a MiB at a time (the broker setting `fetch.sendfile.threshold.bytes`, by "
        f"default {threshold})."
    )
    sizes = sorted(medians[BROKER_SENDFILE])
    best = fastest_sendfile_from(medians)
    if best is None:
        verdict = (
            "the default already reads every measured size into memory"
            if threshold > sizes[-1]
            else f"on this machine, `fetch.sendfile.threshold.bytes={2 * sizes[-1]}` or more"
        )
        return (
            f"{told} In this run `pread + write` was as fast or faster at {size_name(sizes[-1])}, the "
            f"largest size measured: these figures favour no threshold up to there ({verdict})."
        )
    smaller = [size for size in sizes if size < best]
    low = smaller[-1] if smaller else None
    if threshold > best:
        verdict = f"the threshold is above it: regions from {size_name(best)} up were faster with sendfile"
    elif low is not None and threshold <= low:
        verdict = f"the threshold is below it: regions of {size_name(low)} were faster read into memory"
    else:
        verdict = "the threshold is within it"
    crossing = f"between {size_name(low)} and {size_name(best)}" if low else f"at {size_name(best)} or below"
    return (
        f"{told} In this run `loop.sendfile` was the faster broker path at every measured size from "
        f"{size_name(best)} up"
        + (f", `pread + write` at {size_name(low)}" if low else "")
        + f": the crossing lies {crossing}, and {verdict} (for this machine, "
        f"`fetch.sendfile.threshold.bytes={best}`)."
    )


def write_table(
    writes: dict[str, list[float]], fetched: list[float], fetch_limit: float, fetch_bytes: int
) -> str:
    """The write rows, Backbone's as fractions of the plain writes, and the Fetch row."""
    plain, durable = writes[PLAIN], writes[PLAIN_FSYNC]
    rows = [[PLAIN, rate_cell(plain, "GB/s"), "", ""], [PLAIN_FSYNC, rate_cell(durable, "GB/s"), "", ""]]
    for row in (BATCHES, PRODUCER):
        ratios = [f"{fraction(writes[row], plain):.0%}", f"{fraction(writes[row], durable):.0%}"]
        rows.append([row, rate_cell(writes[row]), *ratios])
    of_limit = (
        f"{statistics.median(fetched) / (fetch_limit * 1e3):.0%} of the fastest loopback send of "
        f"{size_name(fetch_bytes)} regions ({fetch_limit:.2f} GB/s)"
    )
    fetch_row = f"Backbone: Fetch of the pre-built batches, {size_name(fetch_bytes)} per request"
    rows.append([fetch_row, rate_cell(fetched), of_limit, ""])
    header = ["measurement", "rate", "fraction of plain writes", "of plain writes + fsync"]
    return report.table(header, rows)


def loopback_table(medians: dict[str, dict[int, float]]) -> str:
    rows = []
    for size in sorted(medians[PLAIN_SENDFILE]):
        sendfile_wins = medians[BROKER_SENDFILE][size] > medians[BROKER_PREAD][size]
        faster = BROKER_SENDFILE if sendfile_wins else BROKER_PREAD
        rows.append(
            [
                size_name(size),
                *(f"{medians[name][size]:.2f}" for name in METHODS),
                faster.removeprefix("broker: "),
            ]
        )
    return report.table(["region", *METHODS, "faster broker path"], rows)


def render(
    args: argparse.Namespace,
    when: str,
    writes: dict[str, list[float]],
    fetched: list[float],
    loopback: dict[str, dict[int, list[float]]],
    fetch_bytes: int,
) -> str:
    medians = {
        name: {size: statistics.median(rates) for size, rates in by_size.items()}
        for name, by_size in loopback.items()
    }
    fetch_limit = max(medians[name][fetch_bytes] for name in METHODS)
    ratio = fraction(writes[BATCHES], writes[PLAIN])
    target = f"**{ratio:.0%}**: " + ("met" if ratio >= 0.5 else "**not met**")
    about = (
        f"{args.megabytes} MiB per measurement, medians of {args.rounds} rounds (all rounds in brackets), "
        "each round's measurements in a rotating order; Backbone: one broker, one partition, acks=1, "
        f"{VALUE_SIZE}-byte records; rates in bytes of the batches stored (MB = 10^6 bytes)."
    )
    loopback_about = (
        f"Loopback TCP from a file in the page cache, GB/s (medians of {args.loopback_rounds}), "
        f"{args.loopback_megabytes} MiB per measurement:"
    )
    return "\n".join(
        [
            report.run_facts(report.command("machine_bench.py"), when),
            "",
            report.wrap(about),
            "",
            write_table(writes, fetched, fetch_limit, fetch_bytes),
            "",
            f"Target: Backbone storing 1 MB batches at 50% of plain sequential writes or more: {target}.",
            "",
            report.wrap(loopback_about),
            "",
            loopback_table(medians),
            "",
            report.wrap(threshold_verdict(medians)),
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--megabytes", type=int, default=256, help="MiB per write measurement (256)")
    parser.add_argument(
        "--rounds", type=int, default=5, help="rounds of the write and Fetch measurements (5)"
    )
    parser.add_argument(
        "--sizes", default="16K,64K,256K,1M,4M,8M", help="loopback region sizes (16K,64K,256K,1M,4M,8M)"
    )
    parser.add_argument("--loopback-megabytes", type=int, default=128, help="MiB per loopback measurement")
    parser.add_argument("--loopback-rounds", type=int, default=9, help="rounds of the loopback part (9)")
    parser.add_argument("--write", action="store_true", help="write the figures into docs/benchmarks.md")
    args = parser.parse_args()
    sizes = sorted({parse_size(size) for size in args.sizes.split(",")})
    if min(args.megabytes, args.rounds, args.loopback_megabytes, args.loopback_rounds) < 1 or not sizes:
        parser.error("the counts must be at least 1 and --sizes not empty")
    stop_on_termination()
    when = report.started()
    with tempfile.TemporaryDirectory(prefix="machine-bench-", dir=ROOT.parent) as work:
        directory = Path(work)
        # Loopback first: its sink process is forked, best before any client thread exists.
        loopback_bytes = args.loopback_megabytes << 20
        loopback = measure_loopback(directory, sizes, loopback_bytes, args.loopback_rounds, progress)
        writes, fetched = measure_writes(args, directory, max(sizes))
    body = render(args, when, writes, fetched, loopback, max(sizes))
    report.publish(NAME, SECTION, body, args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
