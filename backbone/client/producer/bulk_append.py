"""Appending many records for one partition at once: the path of a copier such as a mirror.

`send` spends most of a record's time on work a copier does not need per record: a coroutine, a future,
type checks, a size estimate, the lock, the partitioner. `append_run` takes the lock once for a run of
records already in wire form (bytes, a timestamp, headers as pairs) and appends them in a tight loop;
memory is reserved per batch rather than per record: a batch may only grow as far as `buffer.memory` has
room, and what it grew by is taken from the pool when the run stops.

Records keep their order: they go into the partition's open batch, then into new ones as batches fill.

`append_encoded` is the same for records that encode themselves into a batch many at a time (a mirror's
copies of a run of alike records, `backbone.protocol.record_copy`): they go into batches whose builder
takes encoded records (`CappedBatchBuilder`).
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from backbone.client.producer.accumulator import BufferPool, ProducerBatch, RecordAccumulator
from backbone.client.producer.batch_builder import CappedBatchBuilder, as_list
from backbone.client.structs import TopicPartition
from backbone.protocol.record_batch import HEADER_SIZE
from backbone.protocol.records import Header, estimate_record_size

WireRecord = tuple[bytes | None, bytes | None, Sequence[Header], int]
"""(key, value, headers, timestamp ms), as the batch stores them (headers best as a list: the builder
takes a list, and other sequences are copied into one)."""


class EncodedRecords(Protocol):
    """Records that encode themselves for a batch, many at a time (`record_copy.HeaderedRun`)."""

    def __len__(self) -> int: ...

    @property
    def max_record_size(self) -> int:
        """An upper bound of one record's encoded bytes."""

    def timestamps(self, start: int = 0, stop: int | None = None) -> list[int]:
        """The timestamps of records [start, stop)."""

    def encode(
        self, start: int, offset_delta: int, base_timestamp: int, room: int, at_least_one: bool
    ) -> tuple[list[bytes], list[int]]:
        """Records from `start` on that fit in `room` bytes, encoded from `offset_delta` and
        `base_timestamp`; their bytes (in pieces) and timestamps."""


@dataclass
class RunProgress:
    """How far `append_run` got: records [0, done) are queued, in the batches listed."""

    done: int = 0
    batches: list[tuple[int, ProducerBatch, int]] = field(default_factory=list)
    """(end, batch, index): the records from the previous entry's end (0 for the first) up to `end` went
    into `batch`, the last of them at `index` in it. A batch appears once per run."""
    memory_needed: int = 0
    """Set when the run stopped for want of memory: the bytes the next record needs."""
    woke_sender: bool = False
    """A batch was opened or filled: the sender has work."""


def append_run(
    accumulator: RecordAccumulator,
    tp: TopicPartition,
    records: Sequence[WireRecord],
    progress: RunProgress,
    max_record_size: int,
    too_large: Callable[[int], Exception],
) -> None:
    """Append `records[progress.done:]` to `tp`'s batches until they are all in or memory runs short.

    The caller holds the accumulator's lock. Raises `too_large(size)` for a record over `max_record_size`
    and TypeError for one not in wire form; the records before it stay queued (`progress.done` says how
    many).
    """
    pool = accumulator.pool
    # A record too large for a request never joins an open batch, so it comes to the size check below as
    # the first record of a new one.
    batch_size, queue = _batch_size_and_queue(accumulator, tp, max_record_size)
    total = len(records)
    while progress.done < total:
        batch = queue[-1] if queue else None
        if batch is None or batch.full:
            key, value, headers, timestamp = records[progress.done]
            size = estimate_record_size(key, value, headers)
            if size > max_record_size:
                raise too_large(size)
            if pool.available < size:
                progress.memory_needed = size
                return
            batch = accumulator.new_batch(tp)
            builder = batch.builder
            assert builder is not None, "a new batch has its builder"
            builder.append(0, timestamp, key, value, as_list(headers))  # an empty batch takes any record
            batch.timestamps.append(timestamp)
            grown = builder.size()
            pool.available -= grown
            batch.reserved += grown
            queue.append(batch)
            progress.done += 1
            progress.woke_sender = True
        try:
            _fill(batch, records, progress, pool, batch_size, accumulator.batch_size)
        finally:
            _note_batch(progress, batch)
        if progress.done < total and not batch.full:
            # The batch has room, but the pool has not: wait for memory before the next record.
            key, value, headers, _ = records[progress.done]
            progress.memory_needed = estimate_record_size(key, value, headers)
            return


def _batch_size_and_queue(
    accumulator: RecordAccumulator, tp: TopicPartition, max_record_size: int
) -> tuple[int, collections.deque[ProducerBatch]]:
    """Where a run's batches stop (batch.size, and max.request.size), and `tp`'s queue of batches."""
    queue = accumulator.queues.get(tp)
    if queue is None:
        queue = accumulator.queues[tp] = collections.deque()
    return min(accumulator.batch_size, max_record_size + HEADER_SIZE), queue


def _note_batch(progress: RunProgress, batch: ProducerBatch) -> None:
    """Record that the records up to `progress.done` went into `batch` (once per batch)."""
    entry = (progress.done, batch, len(batch.timestamps) - 1)
    if progress.batches and progress.batches[-1][1] is batch:
        progress.batches[-1] = entry
    elif progress.done > (progress.batches[-1][0] if progress.batches else 0):
        progress.batches.append(entry)


def _fill(
    batch: ProducerBatch,
    records: Sequence[WireRecord],
    progress: RunProgress,
    pool: BufferPool,
    batch_size: int,
    builder_cap: int,
) -> None:
    """Append records to an open batch while it stays within `batch_size` and the pool's room (its
    builder stops at `builder_cap` by itself)."""
    builder = batch.builder
    assert builder is not None, "an open batch has its builder"
    size = builder.size
    start_size = size()
    limit = min(batch_size, start_size + pool.available)
    # The builder stops at batch.size by itself; a lower limit (max.request.size, or the pool's room) is
    # checked record by record.
    capped = limit < builder_cap
    append = builder.append
    timestamps = batch.timestamps
    index = progress.done
    total = len(records)
    try:
        while index < total:
            key, value, headers, timestamp = records[index]
            if headers.__class__ is not list:
                headers = list(headers)
            if capped and size() + estimate_record_size(key, value, headers) > limit:
                break
            if append(len(timestamps), timestamp, key, value, headers) is None:
                break
            timestamps.append(timestamp)
            index += 1
    finally:  # also when a record is not in wire form: the ones before it are in, and accounted
        grown = size() - start_size
        pool.available -= grown
        batch.reserved += grown
        progress.done = index
    if index < total and limit == batch_size:
        batch.full = True
        progress.woke_sender = True


def append_encoded(
    accumulator: RecordAccumulator,
    tp: TopicPartition,
    records: EncodedRecords,
    progress: RunProgress,
    max_record_size: int,
    too_large: Callable[[int], Exception],
) -> None:
    """`append_run` for records that encode themselves: into the open batch if its builder takes encoded
    records, else (it is closed) into new ones that do."""
    size = records.max_record_size
    if size > max_record_size:
        raise too_large(size)
    pool = accumulator.pool
    batch_size, queue = _batch_size_and_queue(accumulator, tp, max_record_size)
    total = len(records)
    while progress.done < total:
        batch = queue[-1] if queue else None
        if batch is not None and not batch.full and not isinstance(batch.builder, CappedBatchBuilder):
            batch.full = True  # its builder takes records one by one only
            progress.woke_sender = True
        charged = 0  # the bytes of the batch already taken from the pool
        if batch is None or batch.full:
            if pool.available < size:
                progress.memory_needed = size
                return
            batch = accumulator.new_batch(tp, encoded=True)
            queue.append(batch)
            progress.woke_sender = True
        builder = batch.builder
        assert isinstance(builder, CappedBatchBuilder), "an open batch of encoded records has our builder"
        if builder.record_count:
            charged = builder.size()
        limit = min(batch_size, charged + pool.available)
        count = builder.record_count
        start = progress.done
        base = builder.base_timestamp if count else records.timestamps(start, start + 1)[0]
        chunks, timestamps = records.encode(start, count, base, limit - builder.size(), not count)
        if timestamps:
            builder.append_encoded(b"".join(chunks), len(timestamps), base, max(timestamps))
            batch.timestamps += timestamps
            grown = builder.size() - charged
            pool.available -= grown
            batch.reserved += grown
            progress.done += len(timestamps)
            _note_batch(progress, batch)
        if progress.done < total:
            if limit < batch_size:  # the batch has room, the pool has not: wait for memory
                progress.memory_needed = size
                return
            batch.full = True
            progress.woke_sender = True
