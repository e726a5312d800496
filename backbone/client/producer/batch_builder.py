"""The producer's record batch builders: aiokafka's compiled encoder for uncompressed batches.

Encoding a record is the largest single step of `send` in Python: our `RecordBatchBuilder.try_append`
takes about 0.7 µs of a send's 2.4 µs here, where aiokafka's Cython `DefaultRecordBatchBuilder` writes
the same bytes in about 0.2 µs (`python ops/bench/records_bench.py` compares them). The producer uses it
for uncompressed batches when its compiled extension is installed; compressed batches, and machines
without the extension (its pure-Python fallback is slower than ours), use `RecordBatchBuilder` behind the
same four methods. The two write identical bytes (`tests/unit/test_batch_builder.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from backbone.protocol.compression import Codec
from backbone.protocol.record_batch import MAGIC, NO_PRODUCER_ID, NO_SEQUENCE
from backbone.protocol.records import Header, RecordBatchBuilder

try:
    from aiokafka.record.default_records import DefaultRecordBatchBuilder as _AiokafkaBuilder
except ImportError:  # pragma: no cover - aiokafka is a dependency; this keeps the client usable without it
    _AiokafkaBuilder = None

COMPILED_ENCODER = _AiokafkaBuilder is not None and _AiokafkaBuilder.__module__.startswith(
    "aiokafka.record._crecords"
)
"""Whether uncompressed batches are encoded by aiokafka's compiled builder."""


class BatchBuilder(Protocol):
    """What the producer needs of a batch under construction (aiokafka's builder's own methods)."""

    def append(
        self, offset: int, timestamp: int, key: bytes | None, value: bytes | None, headers: list[Header]
    ) -> object | None:
        """Add the record at `offset` (its index in the batch); None, and nothing added, when it would
        take a non-empty batch past the size the builder was made with."""

    def size(self) -> int:
        """Bytes of the batch so far, header included, before compression."""

    def set_producer_state(self, producer_id: int, producer_epoch: int, base_sequence: int) -> None:
        """The idempotent producer's fields, known only when the batch is sent."""

    def build(self) -> bytes | bytearray:
        """The batch's bytes, CRC included."""


class CappedBatchBuilder:
    """Our `RecordBatchBuilder` with the `BatchBuilder` methods: a size cap fixed when it is made."""

    __slots__ = ("_builder", "_max_bytes")

    def __init__(self, codec: Codec, compression_level: int | None, max_bytes: int) -> None:
        self._builder = RecordBatchBuilder(codec, compression_level=compression_level)
        self._max_bytes = max_bytes

    def append(
        self,
        offset: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header],
    ) -> object | None:
        if self._builder.try_append(key, value, headers, timestamp, self._max_bytes):
            return self
        return None

    def size(self) -> int:
        return self._builder.size_in_bytes

    def set_producer_state(self, producer_id: int, producer_epoch: int, base_sequence: int) -> None:
        self._builder.set_producer(producer_id, producer_epoch, base_sequence)

    def build(self) -> bytes:
        return self._builder.build()

    @property
    def record_count(self) -> int:
        return self._builder.record_count

    @property
    def base_timestamp(self) -> int:
        return self._builder.base_timestamp

    def append_encoded(self, records: bytes, count: int, base_timestamp: int, max_timestamp: int) -> None:
        """Records encoded for this batch (`RecordBatchBuilder.append_encoded`); the caller keeps within
        the size cap."""
        self._builder.append_encoded(records, count, base_timestamp, max_timestamp)


def as_list(headers: Sequence[Header]) -> list[Header]:
    """Headers as the builders take them (aiokafka's requires a list)."""
    return headers if headers.__class__ is list else list(headers)


def new_batch_builder(
    codec: Codec, compression_level: int | None, max_bytes: int, encoded: bool = False
) -> BatchBuilder:
    """A builder for a batch of at most `max_bytes` (uncompressed; any size for its first record);
    `encoded`: one that also takes records already encoded (a `CappedBatchBuilder`)."""
    if codec is Codec.NONE and COMPILED_ENCODER and not encoded:
        return _AiokafkaBuilder(MAGIC, 0, 0, NO_PRODUCER_ID, -1, NO_SEQUENCE, max_bytes)
    return CappedBatchBuilder(codec, compression_level, max_bytes)
