"""kill -9 a writing process at random moments, again and again, and check what the log recovers.

Each round forks a writer (the modules are already imported, so a round costs milliseconds) that opens
the log (recovering it after the previous kill), appends batches of random sizes and flushes now and then,
reporting every flushed offset to this process through a pipe. This process kills it with SIGKILL after a
random delay (sometimes at once, while it is still recovering), then opens the log itself and checks: every
batch passes its CRC, offsets are dense from 0, each batch still holds the bytes written for its offsets,
and everything reported flushed is there.
"""

from __future__ import annotations

import os
import random
import select
import signal
import struct
import time
from pathlib import Path

import pytest

from backbone.log import Log, LogConfig
from backbone.protocol.record_batch import check_batch
from tests.helpers.batches import build_batch, iter_batches, read_header_fields

pytestmark = pytest.mark.integration

ROUNDS = 120
TIME_LIMIT_S = 50.0
CONFIG = LogConfig(segment_bytes=64 * 1024, index_interval_bytes=1024)
_MESSAGE = struct.Struct(">cq")  # kind, value
STARTED, FLUSHED, FAILED = b"S", b"F", b"E"


def fill_for(base_offset: int) -> int:
    """The byte a batch's record values are made of: derived from its first offset."""
    return base_offset % 251 + 1


def writer(directory: Path, pipe: int, seed: int) -> None:
    """The child: recover, then append and flush until killed (or a safety limit ends it)."""
    rng = random.Random(seed)
    log = Log(directory, CONFIG)
    os.write(pipe, _MESSAGE.pack(STARTED, log.log_end_offset))
    deadline = time.monotonic() + 10  # never outlive a parent that failed to kill us
    while time.monotonic() < deadline:
        first = log.log_end_offset  # the only writer: the next append starts here
        count = rng.randint(1, 20)
        size = rng.choice((20, 60, 120, 250, 400))  # encoded record sizes that exist
        log.append(build_batch(count, record_size=size, fill=fill_for(first)))
        if rng.random() < 0.1:
            log.flush()
            os.write(pipe, _MESSAGE.pack(FLUSHED, log.recovery_point))


def run_writer(directory: Path, seed: int) -> tuple[int, int]:
    """Fork a writer; return its pid and the read end of its pipe."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child never returns into pytest
        os.close(read_end)
        code = 0
        try:
            writer(directory, write_end, seed)
        except BaseException as exc:  # reported to the parent, which fails the test with it
            message = repr(exc).encode()[:400]
            os.write(write_end, _MESSAGE.pack(FAILED, len(message)) + message)
            code = 1
        finally:
            os._exit(code)
    os.close(write_end)
    return pid, read_end


def collect(read_end: int) -> list[tuple[bytes, int]]:
    """Every message the (dead) writer sent."""
    data = b""
    while chunk := os.read(read_end, 65536):
        data += chunk
    os.close(read_end)
    messages = []
    position = 0
    while position + _MESSAGE.size <= len(data):
        kind, value = _MESSAGE.unpack_from(data, position)
        position += _MESSAGE.size
        if kind == FAILED:
            pytest.fail(f"writer failed: {data[position : position + value].decode(errors='replace')}")
        messages.append((kind, value))
    return messages


def wait_started(read_end: int, timeout: float) -> bytes:
    """The first bytes the writer sent, or b'' if it sent none within `timeout` (it stays in the pipe)."""
    ready, _, _ = select.select([read_end], [], [], timeout)
    return os.read(read_end, _MESSAGE.size) if ready else b""


def verify(directory: Path, flushed: int) -> int:
    """Open the log as the broker would after the crash and check it; return its end offset."""
    log = Log(directory, CONFIG)
    data = log.read(0, 1 << 31).to_bytes() if log.log_end_offset else b""
    expected = 0
    for _, batch in iter_batches(data):
        check_batch(batch)  # size, magic, CRC
        base, last_delta = read_header_fields(batch)[0], read_header_fields(batch)[6]
        assert base == expected, f"offsets not dense: batch at {base}, expected {expected}"
        # The first record's value starts 8 bytes into it (length, attributes, deltas, key, value length).
        assert batch[61 + 8] == fill_for(base), f"batch at {base} holds another batch's bytes"
        expected = base + last_delta + 1
    assert expected == log.log_end_offset
    assert log.log_end_offset >= flushed, f"flushed offset {flushed} lost: log ends at {log.log_end_offset}"
    return log.log_end_offset  # the log is dropped unclosed: the next writer recovers it again


@pytest.mark.timeout(120)
def test_kill_minus_nine_at_random_moments_never_corrupts_the_log(tmp_path: Path) -> None:
    directory = tmp_path / "crash-0"
    rng = random.Random(20240611)
    started = time.monotonic()
    flushed = 0
    ends = []
    for round_number in range(ROUNDS):
        assert time.monotonic() - started < TIME_LIMIT_S, f"only {round_number} rounds in {TIME_LIMIT_S}s"
        pid, read_end = run_writer(directory, seed=round_number)
        first = b""
        try:
            if rng.random() < 0.8:  # else kill at once, possibly in the middle of recovery
                first = wait_started(read_end, timeout=10)
                assert first, "writer did not start within 10 s"
                time.sleep(rng.uniform(0, 0.03))  # the random moment of the crash
            os.kill(pid, signal.SIGKILL)
        finally:
            _, status = os.waitpid(pid, 0)
        messages = ([_MESSAGE.unpack(first)] if first else []) + collect(read_end)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, f"writer exited: {status}"
        flushed = max([flushed, *(value for kind, value in messages if kind == FLUSHED)])
        ends.append((verify(directory, flushed), flushed))
    assert len(ends) == ROUNDS and ends[-1][0] > 0 and flushed > 0
    # Each round's end against what was flushed by then: `flushed` only grows, so comparing every round with
    # its final value asked it of the rounds after the last flush alone.
    assert any(end > flushed_then for end, flushed_then in ends), (
        "no round ever had unflushed data to recover"
    )
    assert len(list(directory.glob("*.log"))) > 1, "the writers never rolled a segment"
