"""Build valid record batches (v2, uncompressed) for storage tests, independently of backbone's encoder.

Records carry no key and no headers; each record's value is sized so the whole encoded record takes
the requested number of bytes, which keeps batch sizes predictable. The CRC-32C is computed here.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from crc32c import crc32c

from backbone.log import IndexCache, Log, LogConfig

HEADER_SIZE = 61
BASE_TIMESTAMP = 1_700_000_000_000
_HEADER = struct.Struct(">qiibIhiqqqhii")


def zigzag_varint(value: int) -> bytes:
    """Kafka's signed varint (zigzag, then base-128 little-endian groups)."""
    encoded = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = encoded & 0x7F
        encoded >>= 7
        if encoded:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_record(
    offset_delta: int, timestamp_delta: int, value: bytes | None, key: bytes | None = None
) -> bytes:
    body = bytearray(b"\x00")  # attributes
    body += zigzag_varint(timestamp_delta)
    body += zigzag_varint(offset_delta)
    for field in (key, value):
        if field is None:
            body += zigzag_varint(-1)
        else:
            body += zigzag_varint(len(field)) + field
    body += zigzag_varint(0)  # header count
    return zigzag_varint(len(body)) + bytes(body)


def record_of_size(offset_delta: int, timestamp_delta: int, size: int, fill: int = 0x61) -> bytes:
    """A record whose encoding takes exactly `size` bytes (size >= 8 for small deltas).

    Varint lengths jump by a byte at some sizes; a one-byte key (two bytes instead of one for no key)
    bridges some gaps. Some sizes (65, for instance: a 64-byte body needs a 2-byte length) cannot exist.
    """
    for key in (None, b"k"):
        value_len = max(0, size - 8)
        for _ in range(4):
            record = encode_record(offset_delta, timestamp_delta, bytes([fill]) * value_len, key)
            if len(record) == size:
                return record
            value_len += size - len(record)
            if value_len < 0:
                break
    raise ValueError(f"cannot build a record of exactly {size} bytes")


def build_batch(
    record_sizes: Sequence[int] | int,
    *,
    base_offset: int = 0,
    base_timestamp: int = BASE_TIMESTAMP,
    timestamp_step: int = 1,
    max_timestamp: int | None = None,
    partition_leader_epoch: int = -1,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    attributes: int = 0,
    record_size: int = 200,
    fill: int = 0x61,
) -> bytes:
    """One valid batch. `record_sizes` is a list of encoded record sizes, or a count of `record_size` records.

    Record i has timestamp base_timestamp + i * timestamp_step; the batch's max timestamp is the last one
    unless `max_timestamp` is given.
    """
    sizes = [record_size] * record_sizes if isinstance(record_sizes, int) else list(record_sizes)
    if not sizes:
        raise ValueError("a batch needs at least one record")
    records = b"".join(record_of_size(i, i * timestamp_step, size, fill) for i, size in enumerate(sizes))
    last_delta = len(sizes) - 1
    batch_max = base_timestamp + last_delta * timestamp_step if max_timestamp is None else max_timestamp
    header = bytearray(
        _HEADER.pack(
            base_offset,
            HEADER_SIZE - 12 + len(records),
            partition_leader_epoch,
            2,
            0,
            attributes,
            last_delta,
            base_timestamp,
            batch_max,
            producer_id,
            producer_epoch,
            base_sequence,
            len(sizes),
        )
    )
    batch = header + records
    struct.pack_into(">I", batch, 17, crc32c(memoryview(batch)[21:]))
    return bytes(batch)


def batch_of_size(total_size: int, record_size: int = 200, **kwargs: Any) -> bytes:
    """A batch of `record_size`-byte records (the last ones adjusted) taking exactly `total_size` bytes."""
    payload = total_size - HEADER_SIZE
    count, rest = divmod(payload, record_size)
    if count == 0:
        sizes = [payload]
    elif rest == 0:
        sizes = [record_size] * count
    elif rest >= 8:
        sizes = [record_size] * count + [rest]
    else:
        sizes = [record_size] * (count - 1) + [record_size + rest]
    for shift in range(4):  # move a few bytes between the last two records if a size cannot be encoded
        attempt = list(sizes)
        if shift and len(attempt) > 1:
            attempt[-2] -= shift
            attempt[-1] += shift
        try:
            batch = build_batch(attempt, **kwargs)
        except ValueError:
            continue
        if len(batch) == total_size:
            return batch
    raise ValueError(f"cannot build a batch of exactly {total_size} bytes from {record_size}-byte records")


def read_header_fields(batch: bytes | bytearray, position: int = 0) -> tuple[int, ...]:
    """The 13 header fields at `position` (same order as the wire format)."""
    return _HEADER.unpack_from(batch, position)


def iter_batches(data: bytes | bytearray) -> Iterable[tuple[int, bytes]]:
    """(position, bytes) of each batch in a run of whole batches."""
    position = 0
    while position < len(data):
        size = struct.unpack_from(">i", data, position + 8)[0] + 12
        yield position, bytes(data[position : position + size])
        position += size


def batch_ranges(data: bytes | bytearray) -> list[tuple[int, int]]:
    """(base offset, last offset) of each batch in a run of whole batches."""
    ranges = []
    for _, batch in iter_batches(data):
        fields = read_header_fields(batch)
        ranges.append((fields[0], fields[0] + fields[6]))
    return ranges


class FakeClock:
    """A settable wall clock (seconds, like time.time) for logs under test."""

    def __init__(self, now_ms: int = BASE_TIMESTAMP) -> None:
        self.now_ms = now_ms

    def __call__(self) -> float:
        return self.now_ms / 1000

    def advance(self, ms: int) -> None:
        self.now_ms += ms


class LogFactory:
    """Opens logs under a root directory for a test and closes every one of them afterwards.

    Use as a context manager in a fixture, so logs are closed even when the test fails.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.clock = FakeClock()
        self.logs: list[Log] = []

    def __call__(
        self,
        properties: Mapping[str, Any] | None = None,
        *,
        name: str = "topic-0",
        cache: IndexCache | None = None,
    ) -> Log:
        config = LogConfig.from_properties(properties or {})
        kwargs: dict[str, Any] = {"clock": self.clock}
        if cache is not None:
            kwargs["index_cache"] = cache
        log = Log(self.root / name, config, **kwargs)
        self.logs.append(log)
        return log

    def reopen(self, log: Log, properties: Mapping[str, Any] | None = None, *, close: bool = True) -> Log:
        """Close (or, with close=False, abandon as a crash would) and open the same directory again."""
        if close:
            log.close()
        else:
            self.logs.remove(log)  # abandoned: closing it later would write a clean-shutdown marker
        return self(
            properties if properties is not None else log.config.to_properties(), name=log.directory.name
        )

    def __enter__(self) -> LogFactory:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        for log in self.logs:
            log.close()
