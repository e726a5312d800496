"""Copies of a uniform run's records, each with one header added, encoded a column at a time.

A mirror writes every record it reads again, with the same key, value and timestamp and one header
added whose value ends with the record's source offset (`backbone.mirror.provenance`). Made one record at
a time, a copy costs a tuple from the decoder, a header list, and a pass through the encoder: most of a
mirror's time. A uniform run (`record_runs.py`: records laid out alike, without headers) needs none of it:
the copies are laid out alike too, save for their timestamp delta (the target batch has its own base
timestamp) and the width of the offset's digits. `HeaderedRun.encode` cuts each source record's fixed
part (key and value with their lengths) out with a struct, and joins it with the columns that differ
(length and timestamp delta from a table per distinct timestamp, offset deltas from the precomputed
varints, the header with the offset's thousands, the offset's last three digits from a table): a handful
of C-level operations per stretch of records, none per record in Python. The bytes are those
`RecordBatchBuilder.try_append` writes for the same records (`tests/unit/test_record_copy.py`).
"""

from __future__ import annotations

import functools
import itertools
import struct
from collections.abc import Iterator

from backbone.protocol.record_runs import RunLayout, UniformRun
from backbone.protocol.varint import SMALL_VARINT_BIAS, SMALL_VARINTS, encode_varint

_BIAS = SMALL_VARINT_BIAS
_ONE_HEADER = SMALL_VARINTS[_BIAS + 1]
_ATTRIBUTES = b"\x00"
# Where an offset delta's varint widens (zigzag: 64 takes two bytes, 8192 three, ...).
_WIDTHS = (64, 8192, 1 << 20, 1 << 27, 1 << 34)
# The digits of offsets below 1000, and the last three digits of larger ones.
_DIGITS = tuple(b"%d" % n for n in range(1000))
_LAST_THREE = tuple(b"%03d" % n for n in range(1000))


class HeaderedRun:
    """A uniform run's records as copies with the header `header_key: value_prefix + offset` added."""

    __slots__ = ("_header", "_max_rest", "_prefix", "run")

    def __init__(self, run: UniformRun, header_key: str, value_prefix: bytes) -> None:
        self.run = run
        self._prefix = value_prefix
        key = header_key.encode("utf-8", "surrogateescape")
        self._header = _ONE_HEADER + encode_varint(len(key)) + key
        last = run.first_offset + run.n - 1
        self._max_rest = self._rest(len(b"%d" % last), 5)

    def __len__(self) -> int:
        return self.run.n

    @property
    def first_offset(self) -> int:
        return self.run.first_offset

    @property
    def payload_size(self) -> int:
        """Bytes of key and value per record (a run's records all have the same)."""
        layout = self.run.layout
        return max(layout.key_size, 0) + max(layout.value_size, 0)

    @property
    def max_record_size(self) -> int:
        """An upper bound of a copy's bytes (length varint, 5, and timestamp delta, 10, at their widest)."""
        return 5 + 1 + 10 + self._max_rest

    def timestamps(self, start: int = 0, stop: int | None = None) -> list[int]:
        """The absolute timestamps of records [start, stop)."""
        stop = self.run.n if stop is None else stop
        return list(map(self.run.timestamps.__getitem__, self._timestamp_keys(start, stop)))

    def encode(
        self, start: int, offset_delta: int, base_timestamp: int, room: int, at_least_one: bool
    ) -> tuple[list[bytes], list[int]]:
        """The copies of records from `start` on, as many as fit in `room` bytes (one at least when
        `at_least_one`), the first at `offset_delta` in a batch whose base timestamp is `base_timestamp`.
        Returns their bytes (in pieces, to be joined) and their timestamps."""
        run = self.run
        chunks: list[bytes] = []
        timestamps: list[int] = []
        index = start
        delta = offset_delta
        while index < run.n:
            offset = run.first_offset + index
            # A stretch has one width of offset digits and of offset delta varints, so one record length
            # per distinct timestamp delta; and one thousand of offsets, so the digits are a constant
            # (the thousands) and a column cut from a table (the last three).
            thousands, low = divmod(offset, 1000)
            high = b"%d" % thousands if thousands else b""
            digits = len(high) + 3 if thousands else len(b"%d" % offset)
            stop = min(run.n, index + 1000 - low, index + _next_width(delta) - delta)
            if not thousands:
                stop = min(stop, index + 10**digits - offset)
            width = 1 if delta < 64 else len(encode_varint(delta))
            rest = self._rest(digits, width)
            fits = room // (rest + 16)  # 16: length (5), attributes (1), timestamp delta (10)
            if fits == 0 and at_least_one and not timestamps:
                fits = 1
            stop = min(stop, index + fits)
            if stop <= index:
                break
            keys = self._timestamp_keys(index, stop)
            table = run.timestamps
            heads = {}
            for key in set(keys):
                stamp_delta = table[key] - base_timestamp
                stamp = (
                    SMALL_VARINTS[stamp_delta + _BIAS]
                    if -_BIAS <= stamp_delta < _BIAS
                    else encode_varint(stamp_delta)
                )
                heads[key] = encode_varint(1 + len(stamp) + rest) + _ATTRIBUTES + stamp
            count = stop - index
            header = self._header + encode_varint(len(self._prefix) + digits) + self._prefix + high
            parts: list[bytes] = [b""] * (5 * count)
            parts[0::5] = map(heads.__getitem__, keys)
            parts[1::5] = _offset_deltas(delta, count)
            parts[2::5] = self._bodies(index, stop)
            parts[3::5] = [header] * count
            parts[4::5] = (_LAST_THREE if thousands else _DIGITS)[low : low + count]
            chunk = b"".join(parts)
            chunks.append(chunk)
            timestamps += map(table.__getitem__, keys)
            room -= len(chunk)
            delta += count
            index = stop
        return chunks, timestamps

    def _rest(self, digits: int, delta_width: int) -> int:
        """A copy's bytes after its timestamp delta: offset delta, key and value, header."""
        value_size = len(self._prefix) + digits
        header = len(self._header) + len(encode_varint(value_size)) + value_size
        return delta_width + _body_size(self.run.layout) + header

    def _bodies(self, start: int, stop: int) -> Iterator[bytes]:
        """Records [start, stop)'s fixed parts (key and value with their lengths), cut out by a struct."""
        run = self.run
        layout = run.layout
        view = memoryview(run.buf)[run.pos + start * layout.stride : run.pos + stop * layout.stride]
        return itertools.chain.from_iterable(
            _bodies_struct(layout.stride, _body_at(layout)).iter_unpack(view)
        )

    def _timestamp_keys(self, start: int, stop: int) -> list[int]:
        layout = self.run.layout
        at = self.run.pos + layout.timestamp_at
        buf, stride = self.run.buf, layout.stride
        first = buf[at + start * stride : at + stop * stride : stride]
        if layout.timestamp_width == 1:
            return list(first)
        second = buf[at + 1 + start * stride : at + 1 + stop * stride : stride]
        return list(map(int.__or__, first, map((0x100).__mul__, second)))


def _body_at(layout: RunLayout) -> int:
    """Where a record's fixed part starts: after its offset delta (key and value with their lengths)."""
    return layout.offset_at + layout.offset_width


def _body_size(layout: RunLayout) -> int:
    """The fixed part's bytes: up to the header count (0), the record's last byte."""
    return layout.stride - 1 - _body_at(layout)


def _next_width(delta: int) -> int:
    return next(limit for limit in _WIDTHS if delta < limit)


def _offset_deltas(first: int, count: int) -> tuple[bytes, ...] | list[bytes]:
    if first + count <= _BIAS:
        return SMALL_VARINTS[_BIAS + first : _BIAS + first + count]
    return [encode_varint(delta) for delta in range(first, first + count)]


@functools.lru_cache(maxsize=256)
def _bodies_struct(stride: int, body_at: int) -> struct.Struct:
    """Unpacks a run's record into its fixed part."""
    return struct.Struct(f"<{body_at}x{stride - 1 - body_at}s1x")
