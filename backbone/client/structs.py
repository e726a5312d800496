"""The small value types the client's public API hands out and takes in."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from enum import IntEnum
from typing import Any, NamedTuple, overload

from backbone.protocol.records import Header, LazyRecords, Record

__all__ = [
    "ConsumerRecord",
    "Header",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "RecordList",
    "RecordMetadata",
    "TimestampType",
    "TopicPartition",
]


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class TimestampType(IntEnum):
    """What a record's timestamp means: set by the producer, or by the broker when it appended."""

    NO_TIMESTAMP_TYPE = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class RecordMetadata(NamedTuple):
    """Where an acknowledged record landed. `offset` is -1 with `acks=0` (the broker does not answer).

    `timestamp` is the record's create time, or the broker's append time when the topic uses
    LogAppendTime.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


class ConsumerRecord(NamedTuple):
    """One record as `poll` returns it. Keys and values are bytes unless a deserializer is configured."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: TimestampType
    key: Any  # bytes or None without a deserializer; whatever the configured deserializer returns
    value: Any
    headers: tuple[Header, ...]


class OffsetAndTimestamp(NamedTuple):
    """The earliest offset whose timestamp is at or after the one asked for (`offsets_for_times`)."""

    offset: int
    timestamp: int


class OffsetAndMetadata(NamedTuple):
    """A committed position: the offset of the next record to read, with the committer's note."""

    offset: int
    metadata: str = ""
    leader_epoch: int = -1


_new_tuple = tuple.__new__


class RecordList(Sequence[ConsumerRecord]):
    """The records `poll` returned for one partition: a sequence of ConsumerRecord, in offset order.

    It holds the decoder's plain tuples and makes each ConsumerRecord when it is looked at. Building them
    all up front costs a third of the consumer's time: a list of thousands of new objects sets off the
    garbage collector over and over, while records made one at a time and dropped never do. Iterate it,
    index it, `len` it or `list` it like any sequence.
    """

    __slots__ = ("_chunks", "_length", "partition", "topic")

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self._chunks: list[tuple[TimestampType | None, Sequence[Any]]] = []
        self._length = 0

    def add(self, kind: TimestampType | None, items: Sequence[Any]) -> None:
        """Append plain Record tuples of one timestamp type, or finished ConsumerRecords (kind None)."""
        if items:
            self._chunks.append((kind, items))
            self._length += len(items)

    def _make(self, kind: TimestampType | None, item: Any) -> ConsumerRecord:
        if kind is None:
            return item
        offset, timestamp, key, value, headers = item
        return _new_tuple(
            ConsumerRecord, (self.topic, self.partition, offset, timestamp, kind, key, value, headers)
        )

    def __len__(self) -> int:
        return self._length

    def __iter__(self) -> Iterator[ConsumerRecord]:
        topic, partition, new, cls = self.topic, self.partition, _new_tuple, ConsumerRecord
        for kind, items in self._chunks:
            if kind is None:
                yield from items
                continue
            for offset, timestamp, key, value, headers in items:
                yield new(cls, (topic, partition, offset, timestamp, kind, key, value, headers))

    def plain(self) -> Iterator[Record]:
        """The records as plain (offset, timestamp, key, value, headers) tuples, without making a
        ConsumerRecord for each: for code that copies records on (a mirror) and reads no other field."""
        for kind, items in self._chunks:
            if kind is None:
                for r in items:
                    yield (r.offset, r.timestamp, r.key, r.value, r.headers)
            else:
                yield from items

    def timestamps(self) -> list[int]:
        """Each record's timestamp, in order, without making the records where the decoder left them
        undecoded (runs, and with `record.regions` the rest): what an audit counter reads."""
        out: list[int] = []
        for kind, items in self._chunks:
            if isinstance(items, LazyRecords):
                out += items.record_timestamps()
            elif kind is None:
                out += [r.timestamp for r in items]
            else:
                out += [r[1] for r in items]
        return out

    def runs(self) -> Iterator[tuple[TimestampType, Sequence[Record]]]:
        """The records as runs of plain (offset, timestamp, key, value, headers) tuples, each run with its
        timestamp type: for code that turns records into columns (`zip(*run)`) without making a
        ConsumerRecord for each."""
        for kind, items in self._chunks:
            if kind is not None:
                yield kind, items
                continue
            for r in items:  # finished ConsumerRecords (a deserializer ran): one run each
                yield r.timestamp_type, ((r.offset, r.timestamp, r.key, r.value, r.headers),)

    @overload
    def __getitem__(self, index: int) -> ConsumerRecord: ...

    @overload
    def __getitem__(self, index: slice) -> list[ConsumerRecord]: ...

    def __getitem__(self, index: int | slice) -> ConsumerRecord | list[ConsumerRecord]:
        if isinstance(index, slice):
            return list(self)[index]
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError("record index out of range")
        for kind, items in self._chunks:
            if index < len(items):
                return self._make(kind, items[index])
            index -= len(items)
        raise AssertionError("chunk lengths do not add up")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str | bytes):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RecordList({list(self)!r})"
