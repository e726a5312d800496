"""Copies of a uniform run with one header added: the same bytes as encoding each record with the header."""

from __future__ import annotations

import random

import pytest

from backbone.client.producer.batch_builder import new_batch_builder
from backbone.protocol.compression import Codec
from backbone.protocol.record_copy import HeaderedRun
from backbone.protocol.record_runs import UniformRun
from backbone.protocol.records import RecordBatchBuilder, decode_batch

pytestmark = pytest.mark.unit

HEADER = "backbone.provenance"
PREFIX = b"dc1:2:"


def source_runs(
    rnd: random.Random, base_offset: int, count: int, key: bytes | None, value: bytes | None
) -> list[UniformRun]:
    builder = RecordBatchBuilder()
    base = 1_700_000_000_000
    # A run's timestamp deltas are all one byte wide, or all two.
    deltas = rnd.choice([(0, 0, 1, -5), (-300, 90, 300)])
    builder.append(key, value, (), base)
    for _ in range(count - 1):
        builder.append(key, value, (), base + rnd.choice(deltas))
    data = bytearray(builder.build())
    data[:8] = base_offset.to_bytes(8, "big")  # the base offset is outside the CRC
    records = decode_batch(bytes(data), lazy=True).records
    runs = [part for part in records.parts if isinstance(part, UniformRun)]  # type: ignore[attr-defined]
    assert sum(map(len, runs)) >= count // 2, "the test wants runs to copy"
    return runs


def expected_copies(run: UniformRun, start: int, stop: int, first_delta: int, base: int) -> bytes:
    """What the mirror's record-by-record path writes: try_append with the header added."""
    builder = RecordBatchBuilder()
    if first_delta:
        # A batch that already holds `first_delta` records, the first at `base`.
        builder.try_append(None, b"x", (), base)
        for _ in range(first_delta - 1):
            builder.try_append(None, b"x", (), base)
    before = builder.size_in_bytes
    for offset, timestamp, key, value, _ in list(run)[start:stop]:
        builder.try_append(key, value, [(HEADER, PREFIX + b"%d" % offset)], timestamp)
    return builder.build()[before:]  # the batch's bytes after the records it held before


@pytest.mark.parametrize("seed", range(30))
def test_copies_are_the_bytes_of_each_record_encoded_with_the_header(seed: int) -> None:
    rnd = random.Random(seed)
    # Offsets crossing a power of ten (the digits widen), offset deltas crossing 64 and 8192.
    base_offset = rnd.choice([0, 985, 99_960, 10**12 - 50])
    key = rnd.choice([None, b"", b"k" * rnd.randint(1, 70)])
    value = rnd.choice([None, b"v" * 200, b"w" * rnd.randint(0, 900)])
    for run in source_runs(rnd, base_offset, rnd.choice([40, 300]), key, value):
        copies = HeaderedRun(run, HEADER, PREFIX)
        start = rnd.randint(0, len(run) - 1)
        first_delta = rnd.choice([0, 1, 50, 8180])
        base = run.timestamps[next(iter(run.timestamps))] + rnd.choice([0, -7, 20_000, 10**9])
        if first_delta == 0:
            base = copies.timestamps(start, start + 1)[0]
        chunks, timestamps = copies.encode(start, first_delta, base, 10**9, at_least_one=False)
        assert timestamps == [r[1] for r in list(run)[start:]]
        assert b"".join(chunks) == expected_copies(run, start, len(run), first_delta, base)


def test_copies_stop_at_the_room_given_but_take_one_when_told() -> None:
    run = source_runs(random.Random(1), 0, 100, None, b"v" * 200)[0]
    copies = HeaderedRun(run, HEADER, PREFIX)
    base = copies.timestamps(0, 1)[0]
    chunks, timestamps = copies.encode(0, 0, base, 5_000, at_least_one=False)
    assert 0 < len(timestamps) < 100 and len(b"".join(chunks)) <= 5_000
    assert b"".join(chunks) == expected_copies(run, 0, len(timestamps), 0, base)
    assert copies.encode(0, 0, base, 10, at_least_one=False) == ([], [])
    chunks, timestamps = copies.encode(0, 0, base, 10, at_least_one=True)
    assert len(timestamps) == 1 and len(b"".join(chunks)) <= copies.max_record_size


def test_a_batch_of_copies_is_the_batch_the_compiled_builder_writes() -> None:
    run = source_runs(random.Random(2), 5_000, 500, b"key", b"v" * 200)[0]
    copies = HeaderedRun(run, HEADER, PREFIX)
    ours = RecordBatchBuilder()
    base = copies.timestamps(0, 1)[0]
    chunks, timestamps = copies.encode(0, 0, base, 10**9, at_least_one=True)
    ours.append_encoded(b"".join(chunks), len(timestamps), base, max(timestamps))
    ours.set_producer(12_345, 2, 700)
    compiled = new_batch_builder(Codec.NONE, None, 10**9)
    for index, (offset, timestamp, key, value, _) in enumerate(run):
        compiled.append(index, timestamp, key, value, [(HEADER, PREFIX + b"%d" % offset)])
    compiled.set_producer_state(12_345, 2, 700)
    assert ours.build() == bytes(compiled.build())
