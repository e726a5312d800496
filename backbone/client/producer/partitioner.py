"""The default partitioner: murmur2 for keys (bit for bit as the Java client), sticky for null keys.

A key lands on the same partition whichever client sent it, because every standard Kafka client uses
this same hash: `(murmur2(key) & 0x7fffffff) % partitions`.
"""

from __future__ import annotations

import random

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK32 = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 hash (a signed 32-bit result, as Java's `Utils.murmur2`)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    whole = length & ~3
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK32
        k ^= k >> 24
        k = (k * _M) & _MASK32
        h = ((h * _M) & _MASK32) ^ k
    tail = length & 3
    if tail == 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class StickyPartitioner:
    """Null-key records stick to one partition until its batch is sent, then move on (KIP-480)."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._current: dict[str, int] = {}

    def partition(self, topic: str, partitions: int, available: list[int] | None = None) -> int:
        current = self._current.get(topic)
        if current is None or current >= partitions:
            current = self._choose(partitions, available, exclude=None)
            self._current[topic] = current
        return current

    def batch_completed(
        self, topic: str, partition: int, partitions: int, available: list[int] | None
    ) -> None:
        """Called when the sticky partition's batch was closed: pick another partition for new records."""
        if self._current.get(topic) == partition:
            self._current[topic] = self._choose(partitions, available, exclude=partition)

    def _choose(self, partitions: int, available: list[int] | None, exclude: int | None) -> int:
        candidates = [p for p in (available or range(partitions)) if p != exclude]
        if not candidates:
            return exclude if exclude is not None else 0
        return self._rng.choice(candidates)
