"""The key hash must match the Java client (and so kafka-python and librdkafka's murmur2 partitioner)."""

from __future__ import annotations

import random

import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from backbone.client.producer.partitioner import StickyPartitioner, murmur2, partition_for_key

pytestmark = pytest.mark.unit


# Values the Java client's own unit test (UtilsTest.testMurmur2) checks.
JAVA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("key", "expected"), JAVA_VECTORS.items())
def test_murmur2_matches_the_java_client(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


def test_murmur2_matches_another_implementation_on_random_keys() -> None:
    rng = random.Random(7)
    for length in range(0, 64):
        key = rng.randbytes(length)
        theirs = kafka_python_murmur2(key)  # returns the unsigned value masked to 31 bits
        assert murmur2(key) & 0x7FFFFFFF == theirs & 0x7FFFFFFF


def test_partition_for_key_is_stable_and_in_range() -> None:
    assert partition_for_key(b"21", 10) == (-973932308 & 0x7FFFFFFF) % 10
    assert all(0 <= partition_for_key(b"k%d" % i, 7) < 7 for i in range(200))


def test_sticky_partitioner_sticks_until_the_batch_completes() -> None:
    sticky = StickyPartitioner(random.Random(1))
    first = sticky.partition("t", 4)
    assert all(sticky.partition("t", 4) == first for _ in range(10))
    sticky.batch_completed("t", first, 4, None)
    assert sticky.partition("t", 4) != first
