"""A mirror's copy of a polled chunk, into a fake target cluster: every record once, in order, with its key,
value, headers and timestamp and its provenance header, whether it came in a run of alike records (copied a
column at a time) or not; records that have been in the target are skipped."""

from __future__ import annotations

import random

import pytest

from backbone.client.structs import RecordList, TimestampType, TopicPartition
from backbone.mirror import provenance
from backbone.mirror.config import MirrorConfig
from backbone.mirror.mirror import Mirror
from backbone.mirror.state import Route
from backbone.protocol.record_runs import UniformRun
from backbone.protocol.records import RecordBatchBuilder, decode_batches
from tests.helpers.fake_cluster import FakeCluster

pytestmark = [pytest.mark.unit, pytest.mark.fake_topic("copied", 3)]

SOURCE = TopicPartition("copied", 2)
BASE_OFFSET = 9_990  # the offsets' digits widen inside the chunk


def mirror(fake: FakeCluster) -> Mirror:
    return Mirror(
        MirrorConfig.from_properties(
            {
                "source.bootstrap.servers": "127.0.0.1:1",  # the consumer is not used
                "target.bootstrap.servers": fake.bootstrap,
                "source.alias": "dc1",
                "target.alias": "agg",
                "topics": "copied",
                "target.producer.batch.size": "16384",  # several target batches
            }
        )
    )


def polled(rnd: random.Random) -> RecordList:
    """A chunk as the consumer returns it: runs of alike records, records with headers (one of them copied
    from the target cluster before), and keyed records of other sizes."""
    builder = RecordBatchBuilder()
    base = 1_700_000_000_000
    for group in range(4):
        for _ in range(rnd.choice([100, 300])):
            builder.append(None, b"v" * 200, (), base + group)
        builder.append(b"key", b"with headers", [("trace", b"t1"), ("", None)], base + 5)
        builder.append(b"key-%d" % group, b"w" * group, (), base - 100)
    been_in_target = provenance.Provenance("agg", 0, 7).encode()
    builder.append(None, b"back", [(provenance.HEADER, been_in_target)], base + 6)
    data = bytearray(builder.build())
    data[:8] = BASE_OFFSET.to_bytes(8, "big")
    records = RecordList(SOURCE.topic, SOURCE.partition)
    for batch in decode_batches(bytes(data), lazy=True):
        records.add(TimestampType.CREATE_TIME, batch.records)
    return records


def copies(records: RecordList) -> list[tuple]:
    """(timestamp, key, value, headers) of each record's copy: what the record-by-record path sent."""
    return [
        (t, k, v, (*h, (provenance.HEADER, b"dc1:2:%d" % o)))
        for o, t, k, v, h in records.plain()
        if not provenance.has_been_in(h, "agg")
    ]


@pytest.mark.parametrize("seed", range(3))
async def test_each_record_is_copied_once_with_its_provenance_header(fake: FakeCluster, seed: int) -> None:
    records = polled(random.Random(seed))
    assert any(isinstance(part, UniformRun) for _, items in records.runs() for part in items.parts)
    copier = mirror(fake)
    try:
        chunk = await copier._send(Route("copied", 3, 3), SOURCE, records)
        for _, future in chunk.outcomes:
            await future
        assert copier._settle(chunk)
    finally:
        await copier.producer.close()
    expected = copies(records)
    stored = [tuple(r[1:]) for batch in fake.partition("copied", 2).decoded() for r in batch.records]
    assert stored == expected
    assert len(stored) == len(records) - 1
    progress = copier._stats.of(SOURCE)
    assert progress.acknowledged == BASE_OFFSET + len(records)
    assert progress.newest_timestamp == expected[-1][0]
    assert copier.metrics.copied_total == len(expected)


async def test_into_another_partition_count_each_record_goes_where_its_key_hashes(fake: FakeCluster) -> None:
    records = polled(random.Random(5))
    copier = mirror(fake)
    try:
        # Two source partitions, three target ones: no partition-to-partition copy.
        chunk = await copier._send(Route("copied", 2, 3), SOURCE, records)
        for _, future in chunk.outcomes:
            await future
        assert copier._settle(chunk)
    finally:
        await copier.producer.close()
    stored = [
        tuple(r[1:])
        for p in range(3)
        for batch in fake.partition("copied", p).decoded()
        for r in batch.records
    ]
    expected = copies(records)
    assert sorted(stored, key=repr) == sorted(expected, key=repr)
    assert copier._stats.of(SOURCE).acknowledged == BASE_OFFSET + len(records)
