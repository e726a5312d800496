"""Many records walked at once, field by field: each record's position in one byte array, advanced by numpy.

Both the Kafka records of a region (`columns.py`) and the Avro values of a batch (`backbone_jobs`) are
sequences of zig-zag varints and the bytes they measure. Walking every record's next field in one numpy
operation, instead of a Python loop over records, reads them at a small cost a record. A record whose bytes
run out before a field ends, or whose varint is longer than 10 bytes, is marked bad (`ok`) and left where
it stopped; the caller decides what a bad record means.
"""

from __future__ import annotations

import numpy as np

__all__ = ["Walk"]

_VARINT_BYTES = np.arange(10)
_VARINT_SHIFTS = (7 * np.arange(10)).astype(np.uint64)


class Walk:
    """The positions (`at`) of records that each end at `ends` in `data`, and whether each is whole (`ok`)."""

    def __init__(self, data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
        self.data = np.concatenate([data, np.zeros(len(_VARINT_BYTES), np.uint8)])  # room to read past
        self.at = starts.astype(np.int64)
        self.ends = ends.astype(np.int64)
        self.ok = np.ones(len(starts), bool)

    def advance(self, rows: np.ndarray, by: np.ndarray | int) -> None:
        """Move `rows` on by `by` bytes each; one that would pass its end is bad and stops there."""
        moved = self.at[rows] + by
        self.ok[rows] &= moved <= self.ends[rows]
        self.at[rows] = np.minimum(moved, self.ends[rows])

    def varint(self, rows: np.ndarray) -> np.ndarray:
        """Read one zig-zag varint at each of `rows`' positions."""
        at = self.at[rows]
        first = self.data[at].astype(np.int64)
        second = self.data[at + 1].astype(np.int64)
        raw = np.where(first < 0x80, first, (first & 0x7F) | (second << 7))
        size = np.where(first < 0x80, 1, 2)
        longer = (first >= 0x80) & (second >= 0x80)  # three bytes or more: the general reading, for those
        if longer.any():
            window = self.data[at[longer][:, None] + _VARINT_BYTES]
            last = window < 0x80
            # A 10th byte holds the 64th bit alone: more is not a 64-bit varint.
            self.ok[rows[longer]] &= last.any(axis=1) & ((window[:, 9] <= 1) | last[:, :9].any(axis=1))
            size[longer] = np.argmax(last, axis=1) + 1
            low = np.where(size[longer][:, None] > _VARINT_BYTES, (window & 0x7F).astype(np.uint64), 0)
            raw[longer] = np.bitwise_or.reduce(low << _VARINT_SHIFTS, axis=1).view(np.int64)
        self.ok[rows] &= at < self.ends[rows]
        self.advance(rows, size)
        return (raw >> 1 & 0x7FFF_FFFF_FFFF_FFFF) ^ -(raw & 1)
