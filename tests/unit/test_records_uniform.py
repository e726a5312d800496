"""The record decoder's fast path for uniform runs gives exactly what the general loop gives.

`record_runs.uniform_run` finds runs of records laid out alike (same sizes, no headers) a column at a
time, and their records are made straight from a struct; the general loop decodes one record at a time.
Every test here decodes the same bytes both ways (the general way by raising the minimum run length out
of reach) and checks that the fast path really took the records it should, so a fast path that silently
declined everything would fail too. Lazily decoded batches (`LazyRecords`) must read the same as well.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from crc32c import crc32c

from backbone.protocol import record_runs
from backbone.protocol.compression import Codec
from backbone.protocol.errors import CorruptMessageError
from backbone.protocol.record_batch import (
    CRC_OFFSET,
    CRC_START,
    HEADER_SIZE,
    HEADER_STRUCT,
    LENGTH_FIELD_END,
    set_log_append_time,
)
from backbone.protocol.records import (
    Header,
    LazyRecords,
    Record,
    RecordBatchBuilder,
    decode_batch,
    decode_batches,
)
from backbone.protocol.varint import encode_varint

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_000
Sample = tuple[bytes | None, bytes | None, tuple[Header, ...], int]


# Off while `decode_fast` decodes a second time (lazily), so that `fast_taken` counts one decoding.
_counting = [True]


@pytest.fixture
def fast_taken(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many records each run the fast path found held, in order."""
    taken: list[int] = []
    original = record_runs.uniform_run

    def spy(*args: Any) -> Any:
        run = original(*args)
        if run is not None and _counting[0]:
            taken.append(len(run))
        return run

    monkeypatch.setattr(record_runs, "uniform_run", spy)
    return taken


def decode_general(data: bytes | bytearray, *, verify_crc: bool = True) -> list[list[Record]]:
    """The records of every batch in `data` as the general loop alone decodes them."""
    saved = record_runs.MIN_RUN
    record_runs.MIN_RUN = 1 << 62  # no run is ever long enough: every record goes through the general loop
    try:
        return [batch.records for batch in decode_batches(data, verify_crc=verify_crc)]
    finally:
        record_runs.MIN_RUN = saved


def decode_fast(data: bytes | bytearray, *, verify_crc: bool = True) -> list[list[Record]]:
    """Decoded eagerly and lazily: both must agree before the eager lists are returned."""
    eager = [batch.records for batch in decode_batches(data, verify_crc=verify_crc)]
    _counting[0] = False
    try:
        lazy = [batch.records for batch in decode_batches(data, verify_crc=verify_crc, lazy=True)]
    finally:
        _counting[0] = True
    assert all(isinstance(records, LazyRecords) for records in lazy)
    assert [list(records) for records in lazy] == eager
    return eager  # type: ignore[return-value]


def build(samples: Sequence[Sample], codec: int = Codec.NONE) -> bytes:
    builder = RecordBatchBuilder(codec)
    for key, value, headers, timestamp in samples:
        builder.append(key, value, headers, timestamp)
    return builder.build()


def expected(samples: Sequence[Sample], base_offset: int = 0) -> list[Record]:
    return [(base_offset + i, ts, key, value, tuple(h)) for i, (key, value, h, ts) in enumerate(samples)]


def raw_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    *,
    varint: object = encode_varint,
) -> bytes:
    """One record without headers, its varints but the header count written by `varint` (to try odd
    encodings)."""
    encode = varint if callable(varint) else encode_varint
    body = b"".join(
        (
            b"\x00",
            encode(timestamp_delta),
            encode(offset_delta),
            encode(-1) if key is None else encode(len(key)) + key,
            encode(-1) if value is None else encode(len(value)) + value,
            b"\x00",
        )
    )
    return encode(len(body)) + body


def raw_batch(bodies: Sequence[bytes], last_offset_delta: int, count: int | None = None) -> bytes:
    """A batch (base offset 0, base timestamp T0) around hand-made records, with a right CRC."""
    payload = b"".join(bodies)
    header = bytearray(
        HEADER_STRUCT.pack(
            0,
            HEADER_SIZE - LENGTH_FIELD_END + len(payload),
            -1,
            2,
            0,
            0,
            last_offset_delta,
            T0,
            T0,
            -1,
            -1,
            -1,
            len(bodies) if count is None else count,
        )
    )
    struct.pack_into(">I", header, CRC_OFFSET, crc32c(payload, crc32c(memoryview(header)[CRC_START:])))
    return bytes(header) + payload


def uniform(count: int, key: bytes | None, value: bytes | None, step_ms: float = 0.01) -> list[Sample]:
    return [(key, value, (), T0 + int(i * step_ms)) for i in range(count)]


def two_byte_varint(value: int) -> bytes:
    """A zigzag varint forced to two bytes even when one would do (the decoders must accept it)."""
    zigzag = (value << 1) ^ (value >> 63)
    assert zigzag < 1 << 14
    return bytes((zigzag & 0x7F | 0x80, zigzag >> 7))


# -- uniform batches go through the fast path ----------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (None, b"v" * 200),  # what the client benchmark produces
        (b"user-00000042", b"j" * 200),  # what records_bench produces
        (b"k" * 70, None),  # tombstones
        (None, None),
        (b"", b""),
        (None, b"s" * 10),  # every varint one byte
        (b"key", bytes(range(256)) * 30),  # a two-byte value length at its top (7680 bytes)
    ],
)
@pytest.mark.parametrize("count", [16, 64, 65, 300, 5000])
def test_uniform_batches_decode_fast_and_exactly(
    fast_taken: list[int], key: bytes | None, value: bytes | None, count: int
) -> None:
    samples = uniform(count, key, value)
    batch = build(samples)
    assert decode_fast(batch) == [expected(samples)]
    # A run ends where the offset delta's varint widens (64); a tail of fewer than 16 records after it
    # is left to the general loop.
    tail = count - 64
    assert sum(fast_taken) == (count if tail <= 0 or tail >= record_runs.MIN_RUN else 64)
    assert decode_general(batch) == [expected(samples)]


@pytest.mark.parametrize("codec", list(Codec))
def test_compressed_uniform_batches_decode_fast(fast_taken: list[int], codec: Codec) -> None:
    samples = uniform(300, None, b"c" * 200)
    batch = build(samples, codec)
    assert decode_fast(batch) == [expected(samples)] == decode_general(batch)
    assert sum(fast_taken) == 300


@pytest.mark.parametrize(
    "deltas",
    [
        [0] + [-(i % 64) for i in range(1, 200)],  # negative one-byte deltas
        [0] + [64 + i % 500 for i in range(1, 200)],  # two-byte deltas after the first record
        [0] + [-64 - 37 * i for i in range(1, 200)],  # negative two-byte deltas
        [0] + [3 * i for i in range(1, 200)],  # one byte up to 63 ms, then two bytes: runs split
        [0] + [(-1) ** i * 100 for i in range(1, 200)],  # two bytes throughout, alternating signs
        [0] + [100 + i for i in range(1, 100)] + [9000 + i for i in range(100)],  # then three-byte deltas
    ],
)
def test_timestamp_deltas_of_every_sign_and_width(fast_taken: list[int], deltas: list[int]) -> None:
    samples = [(None, b"t" * 150, (), T0 + delta) for delta in deltas]
    batch = build(samples)
    assert decode_fast(batch) == [expected(samples)] == decode_general(batch)
    assert fast_taken, "runs of equal timestamp widths should go the fast way"


def test_log_append_time_stands_for_every_record(fast_taken: list[int]) -> None:
    samples = uniform(300, None, b"a" * 200)
    batch = bytearray(build(samples))
    set_log_append_time(batch, 0, T0 + 42)
    [decoded] = decode_fast(batch)
    assert decoded == [(o, T0 + 42, k, v, h) for o, _, k, v, h in expected(samples)]
    assert sum(fast_taken) == 300


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_any_buffer_type(fast_taken: list[int], kind: type) -> None:
    samples = uniform(300, b"key", b"b" * 200)
    data = build(samples) + build(samples, Codec.LZ4)
    buffer = memoryview(bytearray(data)) if kind is memoryview else kind(data)
    decoded = decode_fast(buffer)
    assert decoded == [expected(samples), expected(samples)]
    assert all(type(record[3]) is bytes and type(record[2]) is bytes for record in decoded[0])
    assert sum(fast_taken) == 600


# -- what the fast path leaves to the general loop -----------------------------------------------


def test_headers_break_runs(fast_taken: list[int]) -> None:
    samples = uniform(300, None, b"h" * 100)
    samples[150] = (None, b"h" * 100, (("trace", b"x"),), T0)
    samples[151] = (None, b"h" * 100, (("t", b""),), T0)  # ends with a 0 byte like a record without headers
    batch = build(samples)
    assert decode_fast(batch) == [expected(samples)] == decode_general(batch)
    assert 0 < sum(fast_taken) < 298


def test_records_of_different_sizes(fast_taken: list[int]) -> None:
    rng = random.Random(7)
    samples = [(b"k%d" % i, b"x" * rng.randrange(100, 300), (), T0 + i) for i in range(300)]
    batch = build(samples)
    assert decode_fast(batch) == [expected(samples)] == decode_general(batch)
    assert fast_taken == []


def test_long_varints_are_left_to_the_general_loop(fast_taken: list[int]) -> None:
    samples = uniform(40, None, b"L" * 9000)  # three-byte value lengths
    samples += uniform(40, b"k" * 9000, b"v")  # three-byte key lengths
    batch = build(samples)
    assert decode_fast(batch) == [expected(samples)] == decode_general(batch)
    assert fast_taken == []


def test_more_than_8192_records(fast_taken: list[int]) -> None:
    # Offset deltas from 8192 on take three bytes: the general loop decodes those.
    samples = uniform(9000, None, b"s")
    batch = build(samples)
    assert decode_fast(batch) == [expected(samples)] == decode_general(batch)
    assert sum(fast_taken) == 8192


def test_gaps_in_offset_deltas(fast_taken: list[int]) -> None:
    # Compaction keeps offsets: records 0-29, 31-99 and 150-349 are left of a batch of 350 offsets.
    kept = [*range(30), *range(31, 100), *range(150, 350)]
    bodies = [raw_record(delta, delta % 50, None, b"g" * 120) for delta in kept]
    batch = raw_batch(bodies, last_offset_delta=349)
    want = [[(delta, T0 + delta % 50, None, b"g" * 120, ()) for delta in kept]]
    assert decode_fast(batch) == want == decode_general(batch)
    # Runs stop at gaps and where the offset delta's varint widens (64).
    assert fast_taken == [30, 33, 36, 200]


def test_two_byte_encodings_of_small_numbers(fast_taken: list[int]) -> None:
    # Non-canonical but valid varints: every field two bytes long (Java's readVarint accepts these).
    bodies = [raw_record(i, i % 7, b"key", b"w" * 30, varint=two_byte_varint) for i in range(64)]
    batch = raw_batch(bodies, last_offset_delta=63)
    want = [[(i, T0 + i % 7, b"key", b"w" * 30, ()) for i in range(64)]]
    assert decode_fast(batch) == want == decode_general(batch)
    assert fast_taken == [64]


def test_a_control_batch_decodes_as_before(fast_taken: list[int]) -> None:
    builder = RecordBatchBuilder(control=True, transactional=True, producer_id=9, producer_epoch=1)
    builder.append(struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 5), (), T0)
    batch = builder.build()
    [decoded] = decode_fast(batch)
    assert decoded == [(0, T0, struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 5), ())]
    assert decode_general(batch) == [decoded]


# -- mixtures and damage: both ways agree, record for record or error for error -------------------


def mixed_samples(rng: random.Random) -> Iterator[Sample]:
    """Stretches of alike records of random shapes, with odd records among them."""
    timestamp = T0
    while True:
        key = rng.choice([None, b"", b"key-%d" % rng.randrange(1000)])
        value = rng.choice([None, b"", b"v" * rng.randrange(1, 400)])
        for _ in range(rng.choice([1, 5, 16, 40, 100])):
            timestamp += rng.choice([0, 0, 1, 2, 70, -3])
            headers = (("h", b"x"),) if rng.random() < 0.02 else ()
            yield key, value, headers, timestamp


def test_random_mixtures_decode_the_same_both_ways(fast_taken: list[int]) -> None:
    rng = random.Random(1234)
    source = mixed_samples(rng)
    for _ in range(40):
        samples = [next(source) for _ in range(rng.randrange(1, 700))]
        batch = build(samples, rng.choice([Codec.NONE, Codec.NONE, Codec.LZ4]))
        assert decode_fast(batch) == [expected(samples)] == decode_general(batch)
    assert sum(fast_taken) > 1000


def outcome(decode: object, data: bytes) -> object:
    try:
        return decode(data, verify_crc=False)  # type: ignore[operator]
    except CorruptMessageError:
        return CorruptMessageError


def test_damaged_batches_fail_or_decode_the_same_both_ways() -> None:
    # Corruption the CRC would catch is let through here (verify_crc=False), so both decoders see bytes
    # no producer wrote: they must fail alike or agree on every record.
    rng = random.Random(99)
    samples = [(None, b"d" * 40, (), T0 + i // 10) for i in range(120)]
    pristine = build(samples)
    for _ in range(400):
        batch = bytearray(pristine)
        for _ in range(rng.choice([1, 1, 2, 3])):
            batch[rng.randrange(HEADER_SIZE, len(batch))] = rng.choice(
                [0, 1, 2, 0x7F, 0x80, 0xFF, rng.randrange(256)]
            )
        assert outcome(decode_fast, bytes(batch)) == outcome(decode_general, bytes(batch))


def test_a_record_count_beyond_the_records_is_corrupt() -> None:
    bodies = [raw_record(i, 0, None, b"c" * 50) for i in range(100)]
    batch = raw_batch(bodies, last_offset_delta=100, count=101)
    with pytest.raises(CorruptMessageError):
        decode_fast(batch)
    with pytest.raises(CorruptMessageError):
        decode_general(batch)


def test_records_beyond_the_record_count_are_corrupt() -> None:
    bodies = [raw_record(i, 0, None, b"c" * 50) for i in range(100)]
    batch = raw_batch(bodies, last_offset_delta=99, count=99)
    with pytest.raises(CorruptMessageError, match="records end at byte"):
        decode_fast(batch)
    with pytest.raises(CorruptMessageError, match="records end at byte"):
        decode_general(batch)


def test_decode_batch_at_a_position_in_a_larger_buffer(fast_taken: list[int]) -> None:
    first, second = uniform(100, None, b"1" * 60), uniform(100, b"k", b"2" * 60)
    data = build(first) + build(second)
    assert decode_batch(data, len(build(first))).records == expected(second)
    assert sum(fast_taken) == 100


def test_offset_delta_columns_match_the_varint_encoder() -> None:
    assert b"".join(encode_varint(i) for i in range(64)) == record_runs._OFFSET_DELTAS_1
    for i in range(64, 8192):
        assert encode_varint(i) == bytes(
            (record_runs._OFFSET_DELTAS_2_LOW[i], record_runs._OFFSET_DELTAS_2_HIGH[i])
        ), i


# -- lazily decoded batches ----------------------------------------------------------------------


def lazy_mixture() -> tuple[LazyRecords, list[Record]]:
    """A batch of runs and odd records between them, decoded lazily, and its records as a list."""
    samples = uniform(100, None, b"a" * 80)
    samples += [(b"odd", b"x" * n, (), T0) for n in range(1, 6)]
    samples += uniform(40, b"key", None)
    samples += [(None, b"last", (("h", b"v"),), T0)]
    [decoded] = decode_batches(build(samples), lazy=True)
    assert isinstance(decoded.records, LazyRecords)
    return decoded.records, expected(samples)


def test_lazy_records_read_like_the_list(fast_taken: list[int]) -> None:
    lazy, want = lazy_mixture()
    # The general loop takes the five odd records and 11 more; the fast path the rest of the second run.
    assert fast_taken == [64, 36, 29]
    assert len(lazy) == len(want) == 146
    assert list(lazy) == want and lazy == want and want == lazy
    assert list(lazy) == want, "a second reading gives the same records"
    assert lazy != want[:-1] and lazy != [*want[:-1], (0, 0, None, None, ())]
    assert all(type(record[3]) is bytes for record in lazy if record[3] is not None)
    for index in (0, 1, 63, 64, 99, 100, 104, 105, 144, 145, -1, -146):
        assert lazy[index] == want[index], index
    for index in (146, -147):
        with pytest.raises(IndexError):
            lazy[index]
    assert "LazyRecords([(0, " in repr(lazy)


def test_lazy_records_slice_like_the_list() -> None:
    lazy, want = lazy_mixture()
    cuts = [0, 1, 10, 63, 64, 65, 100, 103, 105, 106, 140, 145, 146, 200, -1, -50, None]
    for start in cuts:
        for stop in cuts:
            part = lazy[start:stop]
            assert isinstance(part, LazyRecords)
            assert list(part) == want[start:stop], (start, stop)
            assert len(part) == len(want[start:stop])
    assert list(lazy[::3]) == want[::3]
    assert list(lazy[10:120][5:80]) == want[10:120][5:80]


def test_lazy_decoding_makes_no_records_before_they_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    readings: list[int] = []
    original = record_runs.UniformRun.__iter__

    def counting(run: Any) -> Iterator[Record]:
        readings.append(len(run))
        return original(run)

    monkeypatch.setattr(record_runs.UniformRun, "__iter__", counting)
    lazy, want = lazy_mixture()
    assert readings == [] and len(lazy) == 146
    assert list(lazy[:10]) == want[:10]
    assert readings == [10]


def test_lazy_log_append_time() -> None:
    samples = uniform(300, None, b"a" * 200)
    batch = bytearray(build(samples))
    set_log_append_time(batch, 0, T0 + 42)
    [decoded] = decode_batches(batch, lazy=True)
    assert list(decoded.records) == [(o, T0 + 42, k, v, h) for o, _, k, v, h in expected(samples)]
