"""Storage engine benchmarks; prints a markdown table.

    python ops/bench/log_bench.py [--dir DIR] [--append-mb 128] [--rounds 5] [--read-mb 512]
                                  [--recovery-mb 1024] [--lookups 20000]

1. Appends of 16 KB batches of 200-byte records through Log.append, against plain sequential os.write of the
   same 16 KB buffers to a file in the same directory; they take turns for --rounds rounds and the median
   ratio is reported: once into the page cache only, once ending each run with an fsync (durable). A third
   contender, plain writes each after check_batch (header and CRC-32C), is the least any append that
   validates what it stores does: its ratio is the ceiling for the log on this machine.
2. Reads: Log.read by offset (1 MiB per fetch, Kafka's default max.partition.fetch.bytes), each region sent
   to a loopback TCP socket with os.sendfile, and the same through one reused buffer (readinto + sendall);
   a thread drains the other end. The log has just been written, so it is in the page cache.
3. Recovery: a log without its clean-shutdown marker and with its recovery point at 0, reopened: every
   batch is checked (CRC-32C included) and the indexes rebuilt. Reported as MB/s of log scanned.
4. Offset lookups (Log.read of one batch at random offsets) in a log of 10 segments and one of 10,000
   segments of the same small size, after one warm-up pass; for the large log also with offsets in only
   10 of its segments, which shows the lookup's own cost apart from the larger cache footprint.

Batches come from the tests' batch builder (independent of the producer's encoder).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from backbone.log import Log, LogConfig
from backbone.log.files import write_offset_checkpoint
from backbone.log.recovery import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_FILE
from backbone.protocol.record_batch import check_batch, read_header
from tests.helpers.batches import batch_of_size

MiB = 1024 * 1024
BATCH_SIZE = 16 * 1024
FETCH_BYTES = MiB


def time_plain_writes(
    directory: Path, batch: bytes, count: int, durable: bool, checked: bool = False
) -> float:
    """Seconds to write `batch` `count` times with os.write; `checked`: each one after check_batch (header
    and CRC-32C), the least an append that validates what it stores must do besides the write."""
    plain = directory / "plain.bin"
    fd = os.open(plain, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    write = os.write
    started = time.perf_counter()
    if checked:
        for _ in range(count):
            check_batch(batch)
            write(fd, batch)
    else:
        for _ in range(count):
            write(fd, batch)
    if durable:
        os.fsync(fd)
    seconds = time.perf_counter() - started
    os.close(fd)
    plain.unlink()  # drops its dirty pages, so the next run starts from the same state
    return seconds


def time_log_appends(directory: Path, batch: bytes, count: int, durable: bool) -> float:
    log = Log(directory / "append-0", LogConfig())
    append = log.append
    started = time.perf_counter()
    for _ in range(count):
        append(batch)
    if durable:
        log.flush()
    seconds = time.perf_counter() - started
    log.delete()
    return seconds


def bench_append(root: Path, megabytes: int, rounds: int, durable: bool) -> dict[str, Any]:
    """Medians over rounds of plain writes, log appends and checked writes; each round starts with a different
    one, so none always meets another's write-back. With `durable`, each ends with an fsync inside the timing
    (bytes on disk)."""
    batch = batch_of_size(BATCH_SIZE, record_size=200)
    count = megabytes * MiB // len(batch)
    contenders: dict[str, Callable[[], float]] = {
        "plain": lambda: time_plain_writes(root, batch, count, durable),
        "log": lambda: time_log_appends(root, batch, count, durable),
        "checked": lambda: time_plain_writes(root, batch, count, durable, checked=True),
    }
    names = list(contenders)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for round_number in range(rounds):
        turn = round_number % len(names)
        for name in names[turn:] + names[:turn]:
            seconds[name].append(contenders[name]())
    ratios = [plain / log for plain, log in zip(seconds["plain"], seconds["log"], strict=True)]
    checked_ratios = [
        plain / checked for plain, checked in zip(seconds["plain"], seconds["checked"], strict=True)
    ]
    # Per batch, in microseconds.
    per_batch = {name: statistics.median(times) / count * 1e6 for name, times in seconds.items()}
    return {
        "ratio": statistics.median(ratios),
        "ratios": ", ".join(f"{ratio:.0%}" for ratio in ratios),
        "checked_ratio": statistics.median(checked_ratios),
        "plain_gbps": len(batch) / per_batch["plain"] / 1e3,
        "log_gbps": len(batch) / per_batch["log"] / 1e3,
        "plain_us": per_batch["plain"],
        "log_us": per_batch["log"],
        "checked_us": per_batch["checked"],
    }


def filled_log(directory: Path, megabytes: int, config: LogConfig, batch: bytes) -> Log:
    log = Log(directory, config)
    for _ in range(megabytes * MiB // len(batch)):
        log.append(batch)
    return log


def drain(sock: socket.socket, expected: int, done: list[int]) -> None:
    buffer = bytearray(4 * MiB)
    received = 0
    while received < expected:
        n = sock.recv_into(buffer)
        if n == 0:
            break
        received += n
    done.append(received)


def send_all_regions(log: Log, per_batch: int, send: Callable[[socket.socket, object], None]) -> Callable:
    def run(sock: socket.socket) -> None:
        offset = 0
        while offset < log.log_end_offset:
            result = log.read(offset, FETCH_BYTES)
            for region in result.regions:
                send(sock, region)
            offset += result.size // BATCH_SIZE * per_batch

    return run


def send_with_sendfile(sock: socket.socket, region) -> None:  # type: ignore[no-untyped-def]
    out, source = sock.fileno(), region.fileno()
    sent = 0
    while sent < region.length:
        sent += os.sendfile(out, source, region.position + sent, region.length - sent)


_BUFFER = bytearray(FETCH_BYTES)


def send_with_buffer(sock: socket.socket, region) -> None:  # type: ignore[no-untyped-def]
    view = memoryview(_BUFFER)
    done = 0
    while done < region.length:
        n = region.readinto(_BUFFER, done)
        sock.sendall(view[:n])
        done += n


def timed_transfer(total: int, sender: Callable[[socket.socket], None]) -> float:
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        conn, _ = server.accept()
        done: list[int] = []
        reader = threading.Thread(target=drain, args=(client, total, done))
        reader.start()
        try:
            started = time.perf_counter()
            sender(conn)
            reader.join(timeout=120)
            seconds = time.perf_counter() - started
        finally:
            conn.close()
            reader.join(timeout=10)
            client.close()
        if done != [total]:
            raise RuntimeError(f"reader got {done} bytes, expected {total}")
        return seconds


def bench_read(root: Path, megabytes: int, rounds: int) -> dict[str, float]:
    batch = batch_of_size(BATCH_SIZE, record_size=200)
    per_batch = read_header(batch).last_offset_delta + 1
    log = filled_log(root / "read-0", megabytes, LogConfig(segment_bytes=256 * MiB), batch)
    total = log.size_in_bytes
    try:
        results = {}
        for name, send in (("sendfile", send_with_sendfile), ("readinto", send_with_buffer)):
            seconds = [timed_transfer(total, send_all_regions(log, per_batch, send)) for _ in range(rounds)]
            results[name] = total / statistics.median(seconds) / 1e9
        return results
    finally:
        log.delete()


def bench_recovery(root: Path, megabytes: int) -> dict[str, float]:
    batch = batch_of_size(BATCH_SIZE, record_size=200)
    directory = root / "recovery-0"
    log = filled_log(directory, megabytes, LogConfig(segment_bytes=256 * MiB), batch)
    size = log.size_in_bytes
    log.close()
    # Pretend the broker crashed before ever flushing: everything is scanned again.
    (directory / CLEAN_SHUTDOWN_FILE).unlink()
    write_offset_checkpoint(directory / RECOVERY_POINT_FILE, "recovery", 0, 0)
    started = time.perf_counter()
    reopened = Log(directory, LogConfig(segment_bytes=256 * MiB))
    seconds = time.perf_counter() - started
    if reopened.had_clean_shutdown or reopened.size_in_bytes != size:
        raise RuntimeError("recovery benchmark did not run a full recovery")
    reopened.delete()
    return {"mbps": size / seconds / 1e6, "megabytes": size / 1e6, "seconds": seconds}


def bench_lookup(root: Path, segments: int, lookups: int) -> tuple[float, float]:
    """Lookups per second at random offsets over the whole log, and over only its first 10 segments.

    The second figure separates the algorithm (bisect, index search, header scan) from memory locality:
    random reads over 10,000 segments also touch 1,000 times more page-cache and CPU-cache lines.
    """
    batch = batch_of_size(1024, record_size=200)
    per_segment = 16
    config = LogConfig(segment_bytes=per_segment * len(batch), index_interval_bytes=4096)
    log = filled_log(root / f"lookup{segments}-0", 0, config, batch)
    for _ in range(segments * per_segment):
        log.append(batch)
    if len(log.segment_base_offsets()) != segments:
        raise RuntimeError(f"expected {segments} segments, got {len(log.segment_base_offsets())}")
    rng = random.Random(7)
    hot_end = log.segment_base_offsets()[min(10, segments - 1)] if segments > 10 else log.log_end_offset
    spread = [rng.randrange(log.log_end_offset) for _ in range(lookups)]
    hot = [rng.randrange(hot_end) for _ in range(lookups)]
    try:
        for offset in range(0, log.log_end_offset, log.log_end_offset // segments):
            log.read(offset, 1)  # warm-up: loads every segment's index once
        return _lookup_rate(log, spread), _lookup_rate(log, hot)
    finally:
        log.delete()


def _lookup_rate(log: Log, offsets: list[int]) -> float:
    read = log.read
    rates = []
    for _ in range(3):
        started = time.perf_counter()
        for offset in offsets:
            read(offset, 1)
        rates.append(len(offsets) / (time.perf_counter() - started))
    return statistics.median(rates)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir in /work)")
    parser.add_argument("--append-mb", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--read-mb", type=int, default=512)
    parser.add_argument("--recovery-mb", type=int, default=1024)
    parser.add_argument("--lookups", type=int, default=20000)
    args = parser.parse_args()
    parent = args.dir or ("/work" if os.path.isdir("/work") else None)
    root = Path(tempfile.mkdtemp(prefix="log-bench-", dir=parent))
    try:
        append = bench_append(root, args.append_mb, args.rounds, durable=False)
        durable = bench_append(root, args.append_mb, args.rounds, durable=True)
        read = bench_read(root, args.read_mb, 3)
        recovery = bench_recovery(root, args.recovery_mb)
        few, _ = bench_lookup(root, 10, args.lookups)
        many, many_hot = bench_lookup(root, 10_000, args.lookups)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    rows = [
        (
            f"append 16 KB batches into the page cache, {args.append_mb} MiB x {args.rounds} rounds",
            f"log {append['log_gbps']:.2f} GB/s, plain write {append['plain_gbps']:.2f} GB/s: "
            f"median ratio {append['ratio']:.0%} ({append['ratios']})",
            ">= 80%",
        ),
        (
            "the same, each run ending with fsync (durable)",
            f"log {durable['log_gbps']:.2f} GB/s, plain write {durable['plain_gbps']:.2f} GB/s: "
            f"median ratio {durable['ratio']:.0%} ({durable['ratios']})",
            ">= 80%",
        ),
        (
            "per 16 KB batch, page cache (medians)",
            f"plain write {append['plain_us']:.1f} us, log append {append['log_us']:.1f} us: the log spends "
            f"{append['log_us'] - append['plain_us']:.1f} us besides the write",
            f"80% allows {append['plain_us'] / 4:.1f} us",
        ),
        (
            "the least a validating append does: check_batch (header, CRC-32C) + plain write, page cache",
            f"{append['checked_us']:.1f} us per batch: median ratio {append['checked_ratio']:.0%} "
            "of plain writes",
            "(the ceiling)",
        ),
        (
            "the same, ending with fsync",
            f"median ratio {durable['checked_ratio']:.0%} of plain writes",
            "(the ceiling)",
        ),
        (
            f"read by offset + sendfile to loopback TCP, {args.read_mb} MiB",
            f"{read['sendfile']:.2f} GB/s",
            ">= 1 GB/s",
        ),
        ("read by offset + readinto reused buffer + send", f"{read['readinto']:.2f} GB/s", "(compare)"),
        (
            f"recovery scan (CRC + index rebuild), {recovery['megabytes']:.0f} MB",
            f"{recovery['mbps']:.0f} MB/s ({recovery['seconds']:.2f} s)",
            ">= 500 MB/s",
        ),
        ("offset lookup, 10 segments", f"{few:,.0f} lookups/s", ""),
        ("offset lookup, 10,000 segments", f"{many:,.0f} lookups/s ({many / few:.0%} of 10)", "about equal"),
        (
            "offset lookup, 10,000 segments, offsets in 10 of them",
            f"{many_hot:,.0f} lookups/s ({many_hot / few:.0%} of 10)",
            "(same cache footprint)",
        ),
    ]
    print(f"Storage engine benchmark ({root.parent}, python {sys.version.split()[0]})\n")
    print("| benchmark | result | target |")
    print("| --- | --- | --- |")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
