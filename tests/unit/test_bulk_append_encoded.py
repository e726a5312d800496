"""A copier's records queued as encoded runs (`append_encoded`) among records queued one by one
(`append_run`): the target batches hold exactly what queuing every record one by one gives."""

from __future__ import annotations

import random

import pytest

from backbone.client.producer.accumulator import BufferPool, RecordAccumulator
from backbone.client.producer.bulk_append import RunProgress, append_encoded, append_run
from backbone.client.structs import TopicPartition
from backbone.protocol.compression import Codec
from backbone.protocol.errors import MessageTooLargeError
from backbone.protocol.record_copy import HeaderedRun
from backbone.protocol.record_runs import UniformRun
from backbone.protocol.records import RecordBatchBuilder, decode_batches

pytestmark = pytest.mark.unit

TP = TopicPartition("t", 0)
HEADER = "backbone.provenance"
PREFIX = b"dc1:0:"
MAX_RECORD = 1 << 20


def accumulator(batch_size: int, memory: int, codec: Codec = Codec.NONE) -> RecordAccumulator:
    return RecordAccumulator(
        BufferPool(memory),
        batch_size=batch_size,
        linger_ms=50,
        codec=codec,
        compression_level=None,
        delivery_timeout_ms=1000,
    )


def too_large(size: int) -> Exception:
    return MessageTooLargeError(f"{size} bytes")


def source_parts(rnd: random.Random) -> list:
    """A source batch's records as the consumer decodes them: lists of records and uniform runs."""
    builder = RecordBatchBuilder()
    base = 1_700_000_000_000
    for group in range(rnd.randint(1, 4)):
        size = rnd.choice([10, 200, 700])
        # Runs, and stretches too short to be runs.
        for _ in range(150 if group == 0 else rnd.choice([3, 40, 150])):
            builder.append(None, b"v" * size, (), base + rnd.randint(0, 30))
        for _ in range(rnd.randint(0, 3)):  # records a run does not take: headers, keys of other sizes
            builder.append(b"k" * rnd.randint(0, 9), b"w" * rnd.randint(0, 300), [("h", b"x")], base + 3)
    data = bytearray(builder.build())
    data[:8] = (10**6 - 77).to_bytes(8, "big")  # the offsets' digits widen inside the batch
    (batch,) = decode_batches(bytes(data), lazy=True)
    return list(batch.records.parts)  # type: ignore[attr-defined]


def rows_of(records: object) -> list:
    return [(k, v, [*h, (HEADER, PREFIX + b"%d" % o)], t) for o, t, k, v, h in records]  # type: ignore[attr-defined]


def queue(acc: RecordAccumulator, pieces: list, encoded: bool, sent: list[bytes]) -> None:
    """Queue every piece, as a copier does (waiting for memory: the oldest batch is sent and freed)."""
    for piece in pieces:
        records = HeaderedRun(piece, HEADER, PREFIX) if encoded and isinstance(piece, UniformRun) else None
        rows = None if records is not None else rows_of(piece)
        progress = RunProgress()
        while progress.done < len(records if records is not None else rows):
            progress.memory_needed = 0
            if records is not None:
                append_encoded(acc, TP, records, progress, MAX_RECORD, too_large)
            else:
                append_run(acc, TP, rows, progress, MAX_RECORD, too_large)
            if progress.memory_needed:
                free_oldest(acc, sent)


def free_oldest(acc: RecordAccumulator, sent: list[bytes]) -> None:
    batch = acc.queues[TP][0]
    batch.full = True
    sent.append(bytes(batch.build()))
    acc.queues[TP].popleft()
    acc.pool.available += batch.reserved


def copied(acc: RecordAccumulator, sent: list[bytes]) -> list:
    """(timestamp, key, value, headers) of the records queued, in order, from their batches' bytes."""
    while acc.queues.get(TP):
        free_oldest(acc, sent)
    # Offsets left out: the target batches start at 0 (the broker assigns offsets), and where they
    # start differs (a run of copies opens a batch of its own).
    return [r[1:] for data in sent for batch in decode_batches(data) for r in batch.records]


@pytest.mark.parametrize("seed", range(25))
def test_encoded_runs_among_single_records_give_the_same_records(seed: int) -> None:
    rnd = random.Random(seed)
    pieces = [part for _ in range(rnd.randint(1, 3)) for part in source_parts(rnd)]
    assert any(isinstance(p, UniformRun) for p in pieces)
    batch_size = rnd.choice([1_000, 16_384, 1 << 20])
    memory = rnd.choice([20_000, 1 << 22])
    codec = rnd.choice([Codec.NONE, Codec.NONE, Codec.LZ4])
    plain = accumulator(batch_size, memory, codec)
    sent: list[bytes] = []
    queue(plain, pieces, False, sent)
    expected = copied(plain, sent)
    fast = accumulator(batch_size, memory, codec)
    sent = []
    queue(fast, pieces, True, sent)
    for batch in fast.queues[TP]:
        assert batch.record_count == len(batch.timestamps)
        assert batch.size_in_bytes <= max(batch_size, 1_000)
    reserved = sum(b.reserved for b in fast.queues[TP])
    assert fast.pool.available + reserved == memory  # what the batches hold is taken from the pool
    assert copied(fast, sent) == expected
    assert sum(1 for p in pieces for _ in p) == len(expected)


def test_a_run_too_large_for_a_request_is_refused() -> None:
    pieces = [p for p in source_parts(random.Random(3)) if isinstance(p, UniformRun)]
    copies = HeaderedRun(pieces[0], HEADER, PREFIX)
    with pytest.raises(MessageTooLargeError):
        append_encoded(accumulator(1 << 20, 1 << 22), TP, copies, RunProgress(), 100, too_large)
