"""Many records walked at once, field by field: each record's position in one byte array, advanced by numpy.

Both the Kafka records of a region (`columns.py`) and the Avro values of a batch (`backbone_jobs`) are
sequences of zig-zag varints and the bytes they measure. Walking every record's next field in one numpy
operation, instead of a Python loop over records, reads them at a small cost a record. A record whose bytes
run out before a field ends, or whose varint is longer than 10 bytes, is marked bad (`ok`) and left where
it stopped; the caller decides what a bad record means.
"""

from __future__ import annotations

import numpy as np

__all__ = ["ALL", "Rows", "Walk", "subset"]

# Which records a step walks: an index array, or ALL of them (a slice: numpy then takes views, not copies).
Rows = np.ndarray | slice
ALL = slice(None)


def subset(rows: Rows, mask: np.ndarray) -> np.ndarray:
    """The records of `rows` where `mask` (one entry per record of `rows`) is true, as an index array."""
    return np.flatnonzero(mask) if isinstance(rows, slice) else rows[mask]


def _pick(rows: Rows, positions: np.ndarray) -> np.ndarray:
    """The records at `positions` within `rows`."""
    return positions if isinstance(rows, slice) else rows[positions]


_MAX_VARINT_BYTES = 10


class Walk:
    """The positions (`at`) of records that each end at `ends` in `data`, and whether each is whole (`ok`)."""

    def __init__(self, data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
        # Not copied (it may be a whole fetch response); reads past its end are clamped to its last byte,
        # and the record they belong to is bad anyway (it runs past its end).
        self.data = data if len(data) else np.zeros(1, np.uint8)
        self.last = len(self.data) - 1
        self.at = starts.astype(np.int64)
        self.ends = ends.astype(np.int64)
        self.ok = np.ones(len(starts), bool)

    def advance(self, rows: Rows, by: np.ndarray | int) -> None:
        """Move `rows` on by `by` bytes each; one that would pass its end is bad and stops there."""
        moved = self.at[rows] + by
        self.ok[rows] &= moved <= self.ends[rows]
        self.at[rows] = np.minimum(moved, self.ends[rows])

    def varint(self, rows: Rows) -> np.ndarray:
        """Read one zig-zag varint at each of `rows`' positions."""
        at = self.at[rows]
        data = self.data
        byte = data[np.minimum(at, self.last)]
        raw = (byte & 0x7F).astype(np.uint64)
        size = np.ones(len(at), np.int64)
        # Byte by byte, only for the varints that go on: most end after one or two bytes.
        going = np.flatnonzero(byte >= 0x80)  # positions within `rows`
        for index in range(1, _MAX_VARINT_BYTES):
            if not len(going):
                break
            byte = data[np.minimum(at[going] + index, self.last)]
            raw[going] |= (byte & 0x7F).astype(np.uint64) << np.uint64(7 * index)
            size[going] += 1
            if index == _MAX_VARINT_BYTES - 1:  # the 10th byte holds the 64th bit alone
                self.ok[_pick(rows, going)] &= byte <= 1
            going = going[byte >= 0x80]
        self.ok[_pick(rows, going)] = False  # longer than 10 bytes
        self.ok[rows] &= at < self.ends[rows]
        self.advance(rows, size)
        return ((raw >> np.uint64(1)) ^ (np.uint64(0) - (raw & np.uint64(1)))).view(np.int64)
