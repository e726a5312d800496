"""Record regions: stretches of unlike records left undecoded, for readers that decode them column by column.

A consumer normally decodes records that are not uniform runs one by one into tuples (`records.py`). A
reader that turns records into columns (the Spark source's Arrow batches) does better with the bytes: it
walks every record of a stretch at once (numpy, a field at a time) and never makes a tuple. With the
consumer option `record.regions`, the decoder leaves such stretches as `RecordRegion`s: where they lie,
found by reading only each record's length. A region is not checked up front as the rest of a batch is:
whoever reads it (its records, or its columns) finds what is wrong and raises CorruptMessageError.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from backbone.protocol.errors import CorruptMessageError
from backbone.protocol.varint import SHORT_VARINTS, read_varint

if TYPE_CHECKING:
    from backbone.protocol.records import Record


def skip_records(buf: bytes, pos: int, end: int, n: int, starts: list[int]) -> int:
    """The position after the `n` records at `pos`, read from their lengths alone (none may pass `end`);
    each record's start (where its length begins) is appended to `starts`."""
    short = SHORT_VARINTS
    append = starts.append
    try:
        for _ in range(n):
            append(pos)
            b = buf[pos]
            if b < 0x80:
                length = short[b]
                pos += 1
            elif buf[pos + 1] < 0x80:
                length = short[buf[pos + 1] << 8 | b]
                pos += 2
            else:
                length, pos = read_varint(buf, pos)
            if length < 0:
                raise CorruptMessageError(f"record length {length} is negative at byte {pos}")
            pos += length
            if pos > end:
                raise CorruptMessageError(f"a record runs past the end of its batch (byte {pos} of {end})")
    except IndexError:
        raise CorruptMessageError("record batch ends inside a record's length") from None
    return pos


@dataclass(slots=True, eq=False)
class RecordRegion:
    """`n` records at buf[pos:end], not decoded yet; its records are decoded each time they are read."""

    buf: bytes
    pos: int
    end: int
    base_offset: int
    base_timestamp: int
    starts: list[int]
    """Where each record starts (its length), as `skip_records` found them."""

    @property
    def n(self) -> int:
        return len(self.starts)

    def __len__(self) -> int:
        return len(self.starts)

    def record_timestamps(self) -> list[int]:
        """Each record's timestamp, read from its timestamp delta alone (an audit counts records by time and
        needs nothing else); raises CorruptMessageError where a record does not hold one."""
        buf, base, starts = self.buf, self.base_timestamp, self.starts
        short = SHORT_VARINTS
        out = []
        try:
            for start, record_end in zip(starts, [*starts[1:], self.end], strict=True):
                # Past the record's length varint and its attributes byte: the timestamp delta.
                pos = start + 2 if buf[start] < 0x80 else start + 3 if buf[start + 1] < 0x80 else 0
                if not pos:
                    pos = read_varint(buf, start)[1] + 1
                b = buf[pos]
                if b < 0x80:
                    delta, pos = short[b], pos + 1
                elif buf[pos + 1] < 0x80:
                    delta, pos = short[buf[pos + 1] << 8 | b], pos + 2
                else:
                    delta, pos = read_varint(buf, pos)
                if pos > record_end:
                    raise IndexError
                out.append(base + delta)
        except IndexError:
            raise CorruptMessageError("a record ends before its timestamp") from None
        return out

    def records(self) -> list[Record]:
        """Its records as plain tuples (the decoder's general loop); raises CorruptMessageError."""
        from backbone.protocol.records import decode_records_at

        return decode_records_at(self.buf, self.pos, self.end, self.n, self.base_offset, self.base_timestamp)

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records())

    def __getitem__(self, index: int) -> Record:
        """One record, decoded alone (slices of a region are cut by LazyRecords, with `cut`)."""
        if index < 0:
            index += self.n
        if not 0 <= index < self.n:
            raise IndexError("record index out of range")
        return self.cut(index, index + 1).records()[0]  # that record alone

    def cut(self, low: int, high: int) -> RecordRegion:
        """Its records `low` to `high` (0 <= low <= high <= n) as a region of their own."""
        n = len(self.starts)
        start = self.starts[low] if low < n else self.end
        stop = self.starts[high] if high < n else self.end
        return RecordRegion(
            self.buf, start, stop, self.base_offset, self.base_timestamp, self.starts[low:high]
        )
