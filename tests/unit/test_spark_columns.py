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

from backbone.protocol.errors import CorruptMessageError
from backbone.protocol.record_regions import RecordRegion
from backbone.protocol.record_runs import UniformRun
from backbone.protocol.records import LazyRecords, RecordBatchBuilder, decode_batch
from backbone_spark.columns import ColumnBuilder, region_columns
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


@pytest.mark.parametrize("regions", [False, True])
@pytest.mark.parametrize("headers", [False, True])
@pytest.mark.parametrize("until", [None, 1_150, 1_777])
def test_columns_equal_the_records_they_came_from(headers: bool, until: int | None, regions: bool) -> None:
    data = _batch_bytes(_mixed_records(1_200, seed=5))
    lazy = decode_batch(data, lazy=True, regions=regions).records
    assert isinstance(lazy, LazyRecords)
    runs = [part for part in lazy.parts if isinstance(part, UniformRun)]
    assert sum(len(run) for run in runs) > 500, "the fast path should have taken half the records"
    assert any(isinstance(part, RecordRegion) for part in lazy.parts) == regions
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


def _unlike_records(
    count: int, seed: int, value_sizes: tuple[int, ...] = (0, 5, 100, 300, 20_000)
) -> list[Row]:
    """No two alike: keys, values and header counts that vary, null keys, values and header values,
    non-ASCII header keys, timestamp deltas of every varint size, negative ones too."""
    rng = random.Random(seed)
    records = []
    for _ in range(count):
        key = None if rng.random() < 0.2 else rng.randbytes(rng.randrange(0, 20))
        value = None if rng.random() < 0.1 else rng.randbytes(rng.choice(value_sizes))
        headers = [
            (
                rng.choice(["h", "é-ü", "", "provenance"]),
                None if rng.random() < 0.2 else rng.randbytes(rng.randrange(9)),
            )
            for _ in range(rng.choice([0, 0, 1, 3]))
        ]
        timestamp = BASE_TIME + rng.choice([0, 50, -70, 9_000, 3_000_000, -(1 << 40), 1 << 45])
        records.append((key, value, headers, timestamp))
    return records


def _expected_columns(records: list) -> dict[str, list]:
    return {
        "offset": [r[0] for r in records],
        "timestamp": [r[1] for r in records],
        "key": [r[2] for r in records],
        "value": [r[3] for r in records],
        "headers": [[{"key": k, "value": v} for k, v in r[4]] if r[4] else None for r in records],
    }


def _region_columns_of(data: bytes, verify_crc: bool = True) -> dict[str, list]:
    lazy = decode_batch(data, lazy=True, regions=True, verify_crc=verify_crc).records
    assert isinstance(lazy, LazyRecords)
    out: dict[str, list] = {"offset": [], "timestamp": [], "key": [], "value": [], "headers": []}
    for part in lazy.parts:
        if isinstance(part, RecordRegion):
            columns = region_columns(part, True)
            out["offset"] += columns.offsets.tolist()
            out["timestamp"] += columns.timestamps.tolist()
            out["key"] += columns.keys.to_pylist()
            out["value"] += columns.values.to_pylist()
            out["headers"] += columns.headers.to_pylist()
        else:
            for part_columns, values in zip(
                out.values(), zip(*_expected_columns(list(part)).values(), strict=True), strict=False
            ):
                part_columns += list(values)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_region_columns_equal_the_records_they_came_from(seed: int) -> None:
    data = _batch_bytes(_unlike_records(500, seed))
    lazy = decode_batch(data, lazy=True, regions=True).records
    assert isinstance(lazy, LazyRecords)
    assert sum(len(p) for p in lazy.parts if isinstance(p, RecordRegion)) > 400

    assert _region_columns_of(data) == _expected_columns(decode_batch(data).records)


def test_a_region_reads_as_records_too_whole_cut_or_one_at_a_time() -> None:
    data = _batch_bytes(_unlike_records(300, seed=9))
    expected = decode_batch(data).records
    lazy = decode_batch(data, lazy=True, regions=True).records

    assert list(lazy) == expected
    assert list(lazy[17:250]) == expected[17:250]
    assert list(lazy[40:40]) == [] and list(lazy[299:]) == expected[299:]
    empty = ColumnBuilder(True)
    assert not empty.add(0, lazy[40:40], 1 << 62) and empty.rows == 0
    assert [lazy[i] for i in (0, 1, 150, 299, -1)] == [expected[i] for i in (0, 1, 150, 299, -1)]


def test_damaged_regions_fail_where_the_decoder_fails_and_read_alike_where_it_does_not() -> None:
    """Bytes flipped inside the records (the CRC not checked, as if a producer wrote them so): whatever the
    one-by-one decoder rejects, the region's columns reject with CorruptMessageError; what it reads, they
    read the same."""
    rng = random.Random(3)
    clean = _batch_bytes(_unlike_records(60, seed=4, value_sizes=(0, 3, 8)))
    rejected = read = 0
    for _ in range(400):
        data = bytearray(clean)
        for _ in range(rng.choice([1, 2, 4])):
            data[rng.randrange(61, len(data))] = rng.randrange(256)
        try:
            expected = decode_batch(bytes(data), verify_crc=False).records
        except CorruptMessageError:
            with pytest.raises(CorruptMessageError):
                _region_columns_of(bytes(data), verify_crc=False)
            rejected += 1
            continue
        got = _region_columns_of(bytes(data), verify_crc=False)
        want = _expected_columns(expected)
        # Header keys that are not UTF-8: the decoder keeps their bytes (surrogate escapes), the columns
        # replace them, as Arrow strings must be UTF-8.
        want["headers"] = [
            [
                {
                    "key": h["key"].encode("utf-8", "surrogateescape").decode("utf-8", "replace"),
                    "value": h["value"],
                }
                for h in hs
            ]
            if hs
            else hs
            for hs in want["headers"]
        ]
        wrap = lambda xs: [(x + (1 << 63)) % (1 << 64) - (1 << 63) for x in xs]  # noqa: E731
        want["offset"], want["timestamp"] = wrap(want["offset"]), wrap(want["timestamp"])
        assert got == want
        read += 1
    assert rejected > 100 and read > 20, (rejected, read)
