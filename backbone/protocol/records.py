"""Record batches v2 (magic 2) with their records, both directions, for clients.

The broker only ever looks at a batch's 61-byte header (`record_batch.py`); producers build whole batches
with `RecordBatchBuilder` and consumers unpack a fetch response's records bytes with `decode_batches`.

A record inside a batch (all integers zigzag varints, `attributes` an int8 always 0):
    length | attributes | timestamp_delta | offset_delta | key_length key | value_length value |
    header_count (header_key_length header_key header_value_length header_value)*
A length of -1 means null; header keys are UTF-8 strings and never null.

Speed is the point of this module: a consumer should decode well over a million small records per second
in pure Python. The decoder has two paths. Runs of alike records (same sizes, no headers: what most
producers write) are checked a column at a time with C-level bytes operations and made with a struct
(`record_runs.py`, two to four times the speed of the loop); everything else goes through one loop with
every helper in a local, the one- and two-byte varints (nearly all of them) decoded inline and the
general `read_varint` called only for the rest (`_decode_general`). Both give the same plain tuples (see
`Record`); a consumer has the runs' tuples made only as it reads them (`LazyRecords`). The encoder
appends each record with one `bytes.join` and a table of precomputed varints.
"""

from __future__ import annotations

import functools
import itertools
import struct
import time
from collections.abc import Iterator, Sequence
from typing import Final, NamedTuple, overload

from backbone.protocol import record_runs
from backbone.protocol.compression import (
    DEFAULT_MAX_DECOMPRESSED_SIZE,
    Codec,
    codec_from_id,
    compress,
    decompress,
)
from backbone.protocol.errors import CorruptMessageError, UnsupportedVersionError
from backbone.protocol.record_batch import (
    COMPRESSION_MASK,
    CONTROL_FLAG,
    HEADER_SIZE,
    MAGIC,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TIMESTAMP_TYPE_LOG_APPEND,
    TRANSACTIONAL_FLAG,
    BatchHeader,
    check_batch,
    encode_batch,
    peek_size,
    read_header,
)
from backbone.protocol.record_regions import RecordRegion, skip_records
from backbone.protocol.varint import (
    SHORT_VARINTS,
    SMALL_VARINT_BIAS,
    SMALL_VARINTS,
    encode_varint,
    read_varint,
)

__all__ = [
    "HEADERS",
    "KEY",
    "OFFSET",
    "TIMESTAMP",
    "VALUE",
    "ControlType",
    "DecodedBatch",
    "Header",
    "LazyRecords",
    "Record",
    "RecordBatchBuilder",
    "control_type",
    "decode_batch",
    "decode_batches",
    "estimate_record_size",
]

Header = tuple[str, bytes | None]

_CONTROL_KEY = struct.Struct(">hh")
_BIAS = SMALL_VARINT_BIAS
_NULL = SMALL_VARINTS[_BIAS - 1]  # -1, a null key, value or header value
_NO_HEADERS = SMALL_VARINTS[_BIAS]  # a header count of 0
_ONE_HEADER = SMALL_VARINTS[_BIAS + 1]
_ATTRIBUTES = b"\x00"
# The smallest record: one byte each for length, attributes, timestamp delta, offset delta, key length,
# value length and header count. It bounds how many records a section of a given size can hold.
_MIN_RECORD_SIZE = 7
# Upper bound of a record's bytes besides key, value and headers: length (5), attributes (1),
# timestamp delta (10), offset delta (5), key length (5), value length (5), header count (5).
_MAX_RECORD_OVERHEAD = 36
_NO_HEADER_TUPLE: tuple[Header, ...] = ()


# One record as a consumer sees it: (offset, timestamp, key, value, headers), with the absolute offset and
# timestamp (milliseconds since the epoch). A plain tuple, not a NamedTuple or a class: creating a
# NamedTuple costs 15-20% of the decoder's throughput, and the garbage collector stops tracking plain
# tuples of immutable values, never NamedTuples. Unpack it, or index it with the constants below.
Record = tuple[int, int, bytes | None, bytes | None, tuple[Header, ...]]
# What a LazyRecords holds: decoded records, and uniform runs and regions decoded as they are read.
Part = list[Record] | record_runs.UniformRun | RecordRegion
# Final, so a type checker reads `record[KEY]` as the key's type rather than any field's.
OFFSET: Final = 0
TIMESTAMP: Final = 1
KEY: Final = 2
VALUE: Final = 3
HEADERS: Final = 4


class ControlType:
    """The type field of a control record's key (transaction markers)."""

    ABORT = 0
    COMMIT = 1


def control_type(record: Record) -> int:
    """ControlType of a record from a control batch (its key is int16 version, int16 type)."""
    key = record[KEY]
    if key is None or len(key) < _CONTROL_KEY.size:
        raise CorruptMessageError("control record key is missing or shorter than 4 bytes")
    _, kind = _CONTROL_KEY.unpack_from(key)
    return kind


class DecodedBatch(NamedTuple):
    """A batch's header (producer fields, timestamp type, flags) and its records.

    Consumers skip control batches (`is_control`) and continue fetching from `next_offset`, which is
    right even when compaction removed the batch's last records.
    """

    header: BatchHeader
    records: Sequence[Record]
    """A list, or a LazyRecords from `decode_batch(..., lazy=True)`."""

    @property
    def is_control(self) -> bool:
        return self.header.is_control

    @property
    def next_offset(self) -> int:
        return self.header.next_offset


class LazyRecords(Sequence[Record]):
    """A batch's records with its runs of alike records decoded only as they are read.

    What `decode_batch(..., lazy=True)` gives a consumer. The batch is checked whole up front, so reading
    never fails; a run's records are made from the batch's bytes while they are iterated. Made one at a
    time and dropped by the reader, they never pile up for the garbage collector the way a list of
    thousands of new tuples does (it runs again and again over them), and that list is never built:
    together about a tenth of a consumer's time. The price: the object keeps the batch's bytes alive,
    and reading a run twice makes its records twice (equal, not the same objects).
    Index it, slice it (another LazyRecords, no copy), `len` it or compare it like any sequence.
    """

    __slots__ = ("_length", "_parts")

    def __init__(self, parts: list[Part]) -> None:
        self._parts = parts
        self._length = sum(map(len, parts))

    def __len__(self) -> int:
        return self._length

    @property
    def parts(self) -> tuple[Part, ...]:
        """Its records as the decoder left them: lists of records, undecoded uniform runs and (with
        `regions`) undecoded regions, in order (for readers that turn them into columns without making
        their records)."""
        return tuple(self._parts)

    def __iter__(self) -> Iterator[Record]:
        return itertools.chain.from_iterable(self._parts)

    def record_timestamps(self) -> list[int]:
        """Each record's timestamp, without making the records of runs and regions."""
        out: list[int] = []
        for part in self._parts:
            if isinstance(part, list):
                out += [record[1] for record in part]
            else:
                out += part.record_timestamps()
        return out

    @overload
    def __getitem__(self, index: int) -> Record: ...

    @overload
    def __getitem__(self, index: slice) -> LazyRecords: ...

    def __getitem__(self, index: int | slice) -> Record | LazyRecords:
        if isinstance(index, slice):
            start, stop, step = index.indices(self._length)
            if step != 1:
                return LazyRecords([list(self)[index]])
            return self._cut(start, max(start, stop))
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError("record index out of range")
        for part in self._parts:
            if index < len(part):
                return part[index]
            index -= len(part)
        raise AssertionError("part lengths do not add up")

    def _cut(self, start: int, stop: int) -> LazyRecords:
        parts: list[Part] = []
        for part in self._parts:
            size = len(part)
            if start < size and stop > 0:
                low, high = max(start, 0), min(stop, size)
                parts.append(part[low:high] if isinstance(part, list) else part.cut(low, high))
            start -= size
            stop -= size
        return LazyRecords(parts)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str | bytes | bytearray):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"LazyRecords({list(self)!r})"


def estimate_record_size(key: bytes | None, value: bytes | None, headers: Sequence[Header] = ()) -> int:
    """An upper bound of the bytes `RecordBatchBuilder.append` adds for this record (uncompressed)."""
    size = _MAX_RECORD_OVERHEAD
    size += len(key) if key is not None else 0
    size += len(value) if value is not None else 0
    for header_key, header_value in headers:
        # A UTF-8 character takes at most 4 bytes; two length varints of at most 5 bytes each.
        size += 10 + 4 * len(header_key) + (len(header_value) if header_value is not None else 0)
    return size


@functools.lru_cache(maxsize=4096)
def _encoded_header_key(header_key: str) -> bytes:
    """A header key's length varint and bytes (keys repeat: a few names per topic)."""
    # surrogateescape round-trips keys that are not valid UTF-8 (librdkafka lets producers write any
    # bytes), so a mirror copies them byte for byte.
    encoded = header_key.encode("utf-8", "surrogateescape")
    return encode_varint(len(encoded)) + encoded


def _encode_headers(headers: Sequence[Header]) -> bytes:
    if len(headers) == 1:  # the common case (a mirror adds one header), in one join
        ((header_key, header_value),) = headers
        if header_value is not None:
            size = len(header_value)
            size_varint = SMALL_VARINTS[size + _BIAS] if size < _BIAS else encode_varint(size)
            return b"".join((_ONE_HEADER, _encoded_header_key(header_key), size_varint, header_value))
    parts = [encode_varint(len(headers))]
    for header_key, header_value in headers:
        parts.append(_encoded_header_key(header_key))
        if header_value is None:
            parts.append(_NULL)
        else:
            parts.append(encode_varint(len(header_value)))
            parts.append(header_value)
    return b"".join(parts)


class RecordBatchBuilder:
    """Accumulates records into one batch and builds its bytes (base offset 0, CreateTime).

    `size_in_bytes` is the exact size of the batch uncompressed, which bounds the compressed size from
    above in practice; a producer caps batches with it (`has_room_for`). The producer fields default to
    "no idempotence" (-1); the partition leader epoch is -1, for the broker to fill in.
    """

    __slots__ = (
        "_base_sequence",
        "_base_timestamp",
        "_buffer",
        "_codec",
        "_count",
        "_flags",
        "_level",
        "_max_timestamp",
        "_producer_epoch",
        "_producer_id",
        "_size",
    )

    def __init__(
        self,
        codec: int = Codec.NONE,
        *,
        compression_level: int | None = None,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = -1,
        base_sequence: int = NO_SEQUENCE,
        transactional: bool = False,
        control: bool = False,
    ) -> None:
        # A Codec as it is (the producer passes one per batch); the enum lookup is for plain ids.
        self._codec = codec if codec.__class__ is Codec else codec_from_id(codec)
        self._level = compression_level
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._base_sequence = base_sequence
        self._flags = (TRANSACTIONAL_FLAG if transactional else 0) | (CONTROL_FLAG if control else 0)
        self._buffer = bytearray()
        self._size = HEADER_SIZE
        self._count = 0
        self._base_timestamp = 0
        self._max_timestamp = -1

    @property
    def record_count(self) -> int:
        return self._count

    @property
    def size_in_bytes(self) -> int:
        """Bytes of the batch so far, header included, before compression."""
        return self._size

    @property
    def codec(self) -> Codec:
        return self._codec

    def has_room_for(
        self, key: bytes | None, value: bytes | None, headers: Sequence[Header] = (), max_bytes: int = 16384
    ) -> bool:
        """Whether appending this record keeps the batch within `max_bytes` (uncompressed).

        An empty batch always has room: a record larger than the limit goes out in a batch of its own,
        as Kafka's producer does, and the broker's `max.message.bytes` decides whether to accept it.
        """
        if self._count == 0:
            return True
        return self._size + estimate_record_size(key, value, headers) <= max_bytes

    def set_producer(self, producer_id: int, producer_epoch: int, base_sequence: int) -> None:
        """Set the idempotent producer's fields before `build` (a producer learns them only when sending)."""
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._base_sequence = base_sequence

    def append(
        self,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header] = (),
        timestamp: int | None = None,
    ) -> int:
        """Add a record; return its offset delta (index in the batch). `timestamp` defaults to now (ms)."""
        count = self._count
        self.try_append(key, value, headers, time.time_ns() // 1_000_000 if timestamp is None else timestamp)
        return count

    def try_append(
        self,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header],
        timestamp: int,
        max_bytes: int | None = None,
    ) -> int:
        """Add a record unless it would take a non-empty batch past `max_bytes` (uncompressed).

        Return the batch's `size_in_bytes` with the record in, or 0 when it was left out. The producer's
        hot path: the size it decides by is exact (the record is encoded first), and it comes back with
        the answer so the caller needs no second call.
        """
        count = self._count
        small = SMALL_VARINTS
        delta = timestamp - self._base_timestamp if count else 0
        ts_varint = small[delta + _BIAS] if -_BIAS <= delta < _BIAS else encode_varint(delta)
        offset_varint = small[count + _BIAS] if count < _BIAS else encode_varint(count)
        if key is None:
            key_varint = _NULL
            key = b""
        else:
            size = len(key)
            key_varint = small[size + _BIAS] if size < _BIAS else encode_varint(size)
        if value is None:
            value_varint = _NULL
            value = b""
        else:
            size = len(value)
            value_varint = small[size + _BIAS] if size < _BIAS else encode_varint(size)
        header_bytes = _encode_headers(headers) if headers else _NO_HEADERS
        # Join first so a wrongly typed key or value (str) raises before the buffer is touched.
        body = b"".join(
            (_ATTRIBUTES, ts_varint, offset_varint, key_varint, key, value_varint, value, header_bytes)
        )
        size = len(body)
        length_varint = small[size + _BIAS] if size < _BIAS else encode_varint(size)
        total = self._size + len(length_varint) + size
        if max_bytes is not None and total > max_bytes and count:
            return 0
        buffer = self._buffer
        buffer += length_varint
        buffer += body
        self._size = total
        if count == 0:
            self._base_timestamp = self._max_timestamp = timestamp
        elif timestamp > self._max_timestamp:
            self._max_timestamp = timestamp
        self._count = count + 1
        return total

    @property
    def base_timestamp(self) -> int:
        """The first record's timestamp, which the others' timestamp deltas are from (0 while empty)."""
        return self._base_timestamp

    def append_encoded(self, records: bytes, count: int, base_timestamp: int, max_timestamp: int) -> None:
        """Add `count` records encoded for this batch: their offset deltas from `record_count` on, their
        timestamp deltas from `base_timestamp` (the batch's; the first record's when the batch is empty),
        `max_timestamp` the largest of their timestamps."""
        if not count:
            return
        if self._count == 0:
            self._base_timestamp, self._max_timestamp = base_timestamp, max_timestamp
        elif max_timestamp > self._max_timestamp:
            self._max_timestamp = max_timestamp
        self._buffer += records
        self._size += len(records)
        self._count += count

    def build(self) -> bytes:
        """The batch's bytes: header with CRC-32C, then the (compressed) records."""
        count = self._count
        if count == 0:
            raise ValueError("a record batch needs at least one record")
        codec = self._codec
        payload = self._buffer if codec is Codec.NONE else compress(codec, self._buffer, self._level)
        return encode_batch(
            0,
            NO_PARTITION_LEADER_EPOCH,
            MAGIC,
            codec | self._flags,
            count - 1,
            self._base_timestamp,
            self._max_timestamp,
            self._producer_id,
            self._producer_epoch,
            self._base_sequence,
            count,
            payload,
        )


def decode_batches(
    buffer: bytes | bytearray | memoryview,
    *,
    verify_crc: bool = True,
    max_uncompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
    lazy: bool = False,
) -> Iterator[DecodedBatch]:
    """Decode the batches of a fetch response's records bytes, in order (`lazy`: see `decode_batch`).

    A partial batch at the end (the broker cuts at `max_bytes`) is not an error: it is ignored, and the
    consumer fetches it again from the last batch's `next_offset`. Anything wrong inside a whole batch
    raises CorruptMessageError (UnsupportedVersionError for a magic other than 2).
    """
    data = buffer if isinstance(buffer, bytes) else memoryview(buffer)
    pos = 0
    end = len(data)
    while True:
        size = peek_size(data, pos)
        if size is None or size > end - pos:
            return
        yield decode_batch(
            data, pos, verify_crc=verify_crc, max_uncompressed_size=max_uncompressed_size, lazy=lazy
        )
        pos += size


def decode_batch(
    buffer: bytes | bytearray | memoryview,
    pos: int = 0,
    *,
    verify_crc: bool = True,
    max_uncompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
    lazy: bool = False,
    regions: bool = False,
) -> DecodedBatch:
    """Decode the one whole batch at `pos` of `buffer`; with `lazy`, its records are a LazyRecords, and
    with `regions` too, its records outside uniform runs are left undecoded (see `record_regions`)."""
    header = check_batch(buffer, pos) if verify_crc else _check_without_crc(buffer, pos)
    start = pos + HEADER_SIZE
    end = pos + header.size
    codec = header.attributes & COMPRESSION_MASK
    if codec != Codec.NONE:
        data = decompress(codec, memoryview(buffer)[start:end], max_uncompressed_size)
        start, end = 0, len(data)
    elif isinstance(buffer, bytes):
        data = buffer  # decode in place: no copy of the fetch buffer
    else:
        # Keys and values must be bytes, and the decoder's columns are bytes operations: a view (of a
        # Fetch response's frame, say) is copied a batch at a time, which leaves the copy in the CPU's
        # cache for the decoder (faster than working on the view, or copying the whole response once).
        data = bytes(memoryview(buffer)[start:end])
        start, end = 0, len(data)
    count = header.record_count
    if count > (end - start) // _MIN_RECORD_SIZE:
        raise CorruptMessageError(f"record batch claims {count} records in {end - start} bytes")
    records = _decode_records(
        data, start, end, count, header.base_offset, header.base_timestamp, lazy, regions and lazy
    )
    if header.attributes & TIMESTAMP_TYPE_LOG_APPEND:
        # The broker's append time stands for every record; a rare case, so it stays out of the hot loop.
        stamp = header.max_timestamp
        stamped = [(offset, stamp, key, value, headers) for offset, _, key, value, headers in records]
        records = LazyRecords([stamped]) if lazy else stamped
    return DecodedBatch(header, records)


def _check_without_crc(buffer: bytes | bytearray | memoryview, pos: int) -> BatchHeader:
    available = len(buffer) - pos
    if available < HEADER_SIZE:
        raise CorruptMessageError(f"record batch needs {HEADER_SIZE} header bytes, got {available}")
    header = read_header(buffer, pos)
    if header.magic != MAGIC:
        raise UnsupportedVersionError(f"record batch magic {header.magic} is not supported (only 2)")
    if header.size < HEADER_SIZE or header.size > available:
        raise CorruptMessageError(f"record batch length {header.batch_length} does not fit {available} bytes")
    if header.record_count < 0:
        raise CorruptMessageError(f"record batch has a negative record count {header.record_count}")
    return header


def _read_bytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    """The general case of a nullable length-prefixed field: any varint length, -1 for null."""
    length, pos = read_varint(buf, pos)
    if length == -1:
        return None, pos
    if length < 0 or pos + length > len(buf):
        raise CorruptMessageError(f"record field length {length} is invalid at byte {pos}")
    return buf[pos : pos + length], pos + length


def _read_headers(buf: bytes, pos: int) -> tuple[tuple[Header, ...], int]:
    count, pos = read_varint(buf, pos)
    if count < 0 or count > len(buf) - pos:
        raise CorruptMessageError(f"record header count {count} is invalid")
    headers: list[Header] = []
    for _ in range(count):
        key, pos = _read_bytes(buf, pos)
        if key is None:
            raise CorruptMessageError("record header key is null")
        value, pos = _read_bytes(buf, pos)
        headers.append((key.decode("utf-8", "surrogateescape"), value))
    return tuple(headers), pos


def _decode_records(
    buf: bytes,
    pos: int,
    end: int,
    count: int,
    base_offset: int,
    base_timestamp: int,
    lazy: bool = False,
    regions: bool = False,
) -> list[Record] | LazyRecords:
    """Decode `count` records from buf[pos:end]: uniform runs column by column, the rest one by one.

    Most batches are mostly runs of records that differ only in their timestamp and offset deltas (a
    producer writing values of one size without headers): `record_runs.uniform_run` checks such a run
    with a few C-level operations per field, and the run's records are then made straight from a struct,
    instead of a Python loop over every byte. Where it finds no run, `_decode_general` decodes a stretch
    of records one by one. The stretch doubles after each miss, so a batch of unlike records pays for a
    handful of cheap failed attempts, not one per record. `lazy` keeps the runs undecoded (see LazyRecords),
    `regions` the stretches too (see `record_regions`).
    """
    parts: list[Part] = []
    records: list[Record] = []  # records decoded one by one since the last run (every record if eager)
    decoded = 0
    stretch = record_runs.MIN_RUN
    while decoded < count:
        run = None
        if count - decoded >= record_runs.MIN_RUN:
            run = record_runs.uniform_run(buf, pos, end, count - decoded, base_offset, base_timestamp)
        if run is not None:
            stretch = record_runs.MIN_RUN
            if not lazy:
                records += run
            else:
                if records:
                    parts.append(records)
                    records = []
                parts.append(run)
            decoded += len(run)
            pos = run.end
        else:
            n = min(count - decoded, stretch)
            if regions:
                last = parts[-1] if parts else None
                if isinstance(last, RecordRegion) and last.end == pos:  # one region, however many misses
                    last.end = pos = skip_records(buf, pos, end, n, last.starts)
                else:
                    region = RecordRegion(buf, pos, pos, base_offset, base_timestamp, [])
                    region.end = pos = skip_records(buf, pos, end, n, region.starts)
                    parts.append(region)
            else:
                pos = _decode_general(buf, pos, decoded, n, count, base_offset, base_timestamp, records)
            decoded += n
            stretch *= 2
    if pos != end:
        raise CorruptMessageError(f"records end at byte {pos} of a {end}-byte records section")
    if not lazy:
        return records
    if records:
        parts.append(records)
    return LazyRecords(parts)


def decode_records_at(
    buf: bytes, pos: int, end: int, n: int, base_offset: int, base_timestamp: int
) -> list[Record]:
    """The `n` records at buf[pos:end] decoded one by one (a RecordRegion's records)."""
    records: list[Record] = []
    if _decode_general(buf, pos, 0, n, n, base_offset, base_timestamp, records) != end:
        raise CorruptMessageError(f"{n} records do not fill the {end - pos} bytes of their region")
    return records


def _decode_general(
    buf: bytes,
    pos: int,
    first: int,
    n: int,
    count: int,
    base_offset: int,
    base_timestamp: int,
    records: list[Record],
) -> int:
    """Decode records `first` to `first + n` of `count` from `pos`, one by one, into `records`; return the
    position after them. The hot loop for unlike records: keep it flat and keep lookups local.

    Varint fast paths: a first byte below 0x80 is a whole one-byte varint and a second byte below 0x80
    ends a two-byte one; both are decoded by one lookup in SHORT_VARINTS. For key and value lengths,
    `b & 0x81 == 0` says in one test that the varint is one byte and not negative (zigzag keeps the sign
    in the low bit). Everything rarer (long varints, null or negative lengths) goes through the general
    helpers, which also reject what is malformed.
    """
    append = records.append
    before = len(records)
    short = SHORT_VARINTS
    read = read_varint
    read_bytes = _read_bytes
    no_headers = _NO_HEADER_TUPLE
    try:
        for _ in range(n):
            b = buf[pos]
            if b < 0x80:
                length = short[b]
                pos += 1
            else:
                b2 = buf[pos + 1]
                if b2 < 0x80:
                    length = short[b2 << 8 | b]
                    pos += 2
                else:
                    length, pos = read(buf, pos)
            record_end = pos + length
            # pos is at the attributes byte, unused in magic 2; the timestamp delta follows it.
            b = buf[pos + 1]
            if b < 0x80:
                timestamp_delta = short[b]
                pos += 2
            else:
                b2 = buf[pos + 2]
                if b2 < 0x80:
                    timestamp_delta = short[b2 << 8 | b]
                    pos += 3
                else:
                    timestamp_delta, pos = read(buf, pos + 1)
            b = buf[pos]
            if b < 0x80:
                offset_delta = short[b]
                pos += 1
            else:
                b2 = buf[pos + 1]
                if b2 < 0x80:
                    offset_delta = short[b2 << 8 | b]
                    pos += 2
                else:
                    offset_delta, pos = read(buf, pos)
            b = buf[pos]
            if not b & 0x81:
                start = pos + 1
                pos = start + (b >> 1)
                key = buf[start:pos]
            elif b == 1:
                key = None
                pos += 1
            else:
                key, pos = read_bytes(buf, pos)
            b = buf[pos]
            if not b & 0x81:
                start = pos + 1
                pos = start + (b >> 1)
                value = buf[start:pos]
            elif b & 0x81 == 0x80 and buf[pos + 1] < 0x80:
                start = pos + 2
                pos = start + short[buf[pos + 1] << 8 | b]
                value = buf[start:pos]
            elif b == 1:
                value = None
                pos += 1
            else:
                value, pos = read_bytes(buf, pos)
            if buf[pos]:
                headers, pos = _read_headers(buf, pos)
            else:
                headers = no_headers
                pos += 1
            if pos != record_end:
                raise CorruptMessageError(f"record should end at byte {record_end}, it ends at {pos}")
            append((base_offset + offset_delta, base_timestamp + timestamp_delta, key, value, headers))
    except IndexError:
        inside = first + len(records) - before
        raise CorruptMessageError(f"record batch ends inside record {inside} of {count}") from None
    return pos
