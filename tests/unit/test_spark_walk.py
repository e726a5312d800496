"""The numpy walk reads zig-zag varints of every length as the protocol's one-at-a-time reader does.

Each case lays many varints one after another, one a record, and reads them all at once, with every
record walked (ALL) and with some of them (an index array); a varint the reader refuses (longer than 10
bytes, past 64 bits, running past its record) must leave its record marked bad, and none other.
"""

from __future__ import annotations

import random

import pytest

pytest.importorskip("pyspark")

import numpy as np

from backbone.protocol.errors import CorruptMessageError
from backbone.protocol.varint import encode_varint, read_varint
from backbone_spark.walk import ALL, Walk

pytestmark = pytest.mark.unit


def _cases(seed: int) -> list[bytes]:
    rng = random.Random(seed)
    cases = [
        encode_varint(v) for v in (0, -1, 1, 63, -64, 64, 8191, -8192, 1 << 62, -(1 << 63), (1 << 63) - 1)
    ]
    for _ in range(300):
        bits = rng.randrange(1, 64)
        cases.append(encode_varint(rng.randrange(-(1 << bits), 1 << bits)))
    # Refused: 11 bytes; 10 bytes whose last holds more than the 64th bit; a varint cut short.
    cases += [b"\xff" * 10 + b"\x01", b"\xff" * 9 + b"\x02", b"\x80\x80"]
    cases += [b"\x80" * 9 + b"\x01"]  # accepted: the 64th bit alone
    rng.shuffle(cases)
    return cases


def _expected(case: bytes) -> int | None:
    try:
        value, end = read_varint(case, 0)
    except CorruptMessageError:
        return None
    return value if end == len(case) else None


@pytest.mark.parametrize("every", [True, False])
def test_the_walk_reads_varints_as_the_protocol_reader_does(every: bool) -> None:
    cases = _cases(seed=1)
    lengths = np.array([len(c) for c in cases])
    ends = np.cumsum(lengths)
    walk = Walk(np.frombuffer(b"".join(cases), np.uint8), ends - lengths, ends)
    rows = ALL if every else np.arange(0, len(cases), 2)
    values = walk.varint(rows)
    chosen = range(len(cases)) if every else range(0, len(cases), 2)

    for position, index in enumerate(chosen):
        expected = _expected(cases[index])
        if expected is None:
            assert not walk.ok[index], cases[index]
        else:
            assert walk.ok[index] and values[position] == expected, cases[index]
            assert walk.at[index] == ends[index]
    if not every:
        assert walk.ok[1::2].all() and (walk.at[1::2] == (ends - lengths)[1::2]).all()  # not walked
