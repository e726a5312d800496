"""The data source's columns cut from the decoder's uniform runs hold exactly what its records hold.

`ColumnBuilder` cuts a uniform run's keys and values out of the fetched bytes with numpy and reads its
timestamps from a table; records outside runs are transposed. Each test decodes one batch lazily (runs
left undecoded) and checks every column against the records the eager decoder makes from the same bytes,
including where a range ends inside a run.
"""

from __future__ import annotations

import random

import pytest

pytest.importorskip("pyspark")

from backbone.protocol.record_runs import UniformRun
from backbone.protocol.records import LazyRecords, RecordBatchBuilder, decode_batch
from backbone_spark.columns import ColumnBuilder
from backbone_spark.reading import arrow_schema

pytestmark = pytest.mark.unit

BASE_OFFSET = 1_000
BASE_TIME = 1_700_000_000_000


Row = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]


def _batch_bytes(records: list[Row]) -> bytes:
    builder = RecordBatchBuilder()
    for key, value, headers, timestamp in records:
        builder.append(key, value, headers, timestamp)
    data = bytearray(builder.build())
    data[0:8] = BASE_OFFSET.to_bytes(8, "big")  # the base offset is not covered by the CRC
    return bytes(data)


def _mixed_records(count: int, seed: int) -> list[Row]:
    """Long uniform stretches (one- and two-byte timestamp deltas, null keys, empty values) between
    records that break them (headers, other sizes)."""
    rng = random.Random(seed)
    records = []
    for i in range(count):
        stretch = (i // 300) % 4
        if rng.random() < 0.02:
            records.append((b"odd", b"v" * rng.randrange(0, 40), [("h", b"x"), ("n", None)], BASE_TIME + i))
        elif stretch == 0:
            records.append((None, b"x" * 200, [], BASE_TIME + rng.randrange(0, 60)))
        elif stretch == 1:
            records.append((b"key-%03d" % (i % 1000), b"y" * 30, [], BASE_TIME + rng.randrange(0, 5000)))
        elif stretch == 2:
            records.append((b"k", b"", [], BASE_TIME - 3))
        else:
            records.append((None, None, [], BASE_TIME + i))
    return records


@pytest.mark.parametrize("headers", [False, True])
@pytest.mark.parametrize("until", [None, 1_150, 1_777])
def test_columns_equal_the_records_they_came_from(headers: bool, until: int | None) -> None:
    data = _batch_bytes(_mixed_records(1_200, seed=5))
    lazy = decode_batch(data, lazy=True).records
    assert isinstance(lazy, LazyRecords)
    runs = [part for part in lazy.parts if isinstance(part, UniformRun)]
    assert sum(len(run) for run in runs) > 500, "the fast path should have taken half the records"
    expected = [r for r in decode_batch(data).records if until is None or r[0] < until]

    builder = ColumnBuilder(headers)
    ended = builder.add(0, lazy, until if until is not None else 1 << 62)
    batch = builder.finish("t", 3, arrow_schema(headers)).to_pydict()

    assert ended == (until is not None)
    assert batch["offset"] == [r[0] for r in expected]
    assert [t.timestamp() * 1000 for t in batch["timestamp"]] == [r[1] for r in expected]
    assert batch["key"] == [r[2] for r in expected]
    assert batch["value"] == [r[3] for r in expected]
    assert set(batch["topic"]) == {"t"} and set(batch["partition"]) == {3}
    assert set(batch["timestampType"]) == {0}
    if headers:
        assert batch["headers"] == [
            [{"key": k, "value": v} for k, v in r[4]] if r[4] else None for r in expected
        ]
