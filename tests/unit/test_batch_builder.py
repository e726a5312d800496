"""The producer's batch builders: aiokafka's compiled one and ours write the same bytes."""

from __future__ import annotations

import random

import pytest

from backbone.client.producer.batch_builder import (
    COMPILED_ENCODER,
    CappedBatchBuilder,
    as_list,
    new_batch_builder,
)
from backbone.protocol.compression import Codec
from backbone.protocol.records import decode_batch

pytestmark = pytest.mark.unit


def random_record(rnd: random.Random, base: int) -> tuple[bytes | None, bytes | None, list, int]:
    key = rnd.choice([None, b"", b"k" * rnd.randint(0, 70), rnd.randbytes(200)])
    value = rnd.choice([None, b"", b"v" * rnd.randint(0, 300), rnd.randbytes(70)])
    headers = [
        rnd.choice([("h", b"x"), ("\u00e9", None), ("", b""), ("long" * 20, b"y" * 100)])
        for _ in range(rnd.choice([0, 0, 1, 3]))
    ]
    return key, value, headers, base + rnd.randint(-100_000, 10_000_000)  # out-of-order timestamps too


def test_the_compiled_encoder_is_in_use_where_installed() -> None:
    # aiokafka is a dependency and ships compiled wheels for this platform: the fast path must be taken.
    assert COMPILED_ENCODER
    assert not isinstance(new_batch_builder(Codec.NONE, None, 1000), CappedBatchBuilder)
    assert isinstance(new_batch_builder(Codec.LZ4, None, 1000), CappedBatchBuilder)


@pytest.mark.parametrize("seed", range(40))
def test_both_builders_write_identical_batches(seed: int) -> None:
    rnd = random.Random(seed)
    limit = rnd.choice([200, 1000, 16384, 100_000])
    compiled = new_batch_builder(Codec.NONE, None, limit)
    ours = CappedBatchBuilder(Codec.NONE, None, limit)
    base = 1_700_000_000_000 + rnd.randint(0, 10**6)
    appended = []
    for offset in range(300):
        key, value, headers, timestamp = random_record(rnd, base)
        size_before = ours.size()
        taken = compiled.append(offset, timestamp, key, value, headers)
        if (taken is None) != (ours.append(offset, timestamp, key, value, headers) is None):
            # The one difference: a record that fills the batch exactly is taken by ours (as Kafka's
            # producer does) and left for the next batch by aiokafka's.
            assert taken is None and ours.size() == limit, (size_before, ours.size(), limit)
            return
        if taken is None:
            break
        assert compiled.size() == ours.size()
        appended.append((key, value, headers, timestamp))
    producer = rnd.choice([(-1, -1, -1), (12_345_678_901, 3, 77)])
    compiled.set_producer_state(*producer)
    ours.set_producer_state(*producer)
    built = bytes(compiled.build())
    assert built == ours.build()
    decoded = decode_batch(built)
    assert [(r[2], r[3]) for r in decoded.records] == [(key, value) for key, value, _, _ in appended]


def test_a_full_batch_refuses_a_record_but_an_empty_one_takes_any() -> None:
    for builder in (new_batch_builder(Codec.NONE, None, 100), CappedBatchBuilder(Codec.NONE, None, 100)):
        assert builder.append(0, 1, None, b"x" * 500, []) is not None  # larger than the cap: alone
        assert builder.append(1, 1, None, b"x", []) is None
        assert builder.size() > 500


def test_compressed_batches_use_our_builder_and_compress() -> None:
    builder = new_batch_builder(Codec.ZSTD, None, 1 << 20)
    for offset in range(100):
        assert builder.append(offset, 5, None, b"same bytes " * 20, []) is not None
    built = builder.build()
    assert len(built) < builder.size() / 5
    assert [r[3] for r in decode_batch(built).records] == [b"same bytes " * 20] * 100


def test_headers_become_a_list_once() -> None:
    headers = [("a", b"1")]
    assert as_list(headers) is headers
    assert as_list((("a", b"1"),)) == headers
