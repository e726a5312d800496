"""A load task splits its decoded events into one Parquet file per event hour, and counts each hour.

`ReadDecodeWrite._write_hours` is given one decoded batch whose event times straddle an hour boundary and
a day boundary, plus one event without a time; each hour's file must hold exactly that hour's events, and
the event without a time goes where Spark's writer puts a null partition value.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

import pytest

pytest.importorskip("pyspark")

import pyarrow as pa
import pyarrow.parquet as pq

from backbone_jobs.avro_columns import META
from backbone_jobs.task_write import NO_HOUR, HourFiles, ReadDecodeWrite

pytestmark = pytest.mark.unit


def _decoded(times: list[datetime | None]) -> pa.RecordBatch:
    n = len(times)
    header = pa.StructArray.from_arrays([pa.array(times, pa.timestamp("ms", tz="UTC"))], names=["time"])
    kafka_ms = [1_800_000_000_000 + i * 250_000 for i in range(n)]
    columns = [
        header,
        pa.array(range(n), pa.int64()),
        pa.array([0] * n, pa.int32()),
        pa.array(range(n), pa.int64()),
        pa.array(kafka_ms, pa.int64()).cast(pa.timestamp("ms", tz="UTC")).cast(pa.timestamp("us", tz="UTC")),
        pa.array([1] * n, pa.int32()),
        pa.nulls(n, pa.string()),
        pa.nulls(n, pa.binary()),
    ]
    fields = [pa.field("header", header.type), pa.field("number", pa.int64()), *META]
    return pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields))


def test_each_hour_gets_its_own_file_with_exactly_its_events(tmp_path):
    times = [
        datetime(2026, 11, 28, 23, 59, 59, 999_000, tzinfo=UTC),
        datetime(2026, 11, 29, 0, 0, tzinfo=UTC),
        None,
        datetime(2026, 11, 29, 0, 30, tzinfo=UTC),
        datetime(2026, 11, 28, 23, 0, tzinfo=UTC),
        datetime(2026, 11, 29, 1, 0, 0, 1_000, tzinfo=UTC),
    ]
    task = ReadDecodeWrite(
        None, [], None, f"file://{tmp_path}", "page_views", "_quarantine", "header.time", 60_000
    )  # type: ignore[arg-type]
    files = HourFiles(f"file://{tmp_path}")
    hours: Counter[str] = Counter()
    buckets: Counter[int] = Counter()

    task._write_hours(files, _decoded(times), hours, buckets)
    written = files.close()

    assert hours == {"2026-11-28/23": 2, "2026-11-29/00": 2, "2026-11-29/01": 1, f"{NO_HOUR}/{NO_HOUR}": 1}
    numbers_by_folder = {}
    for path, rows in written.items():
        folder = path.split("/", 2)[2].rsplit("/", 1)[0]
        table = pq.read_table(tmp_path / path)
        assert table.num_rows == rows
        numbers_by_folder[folder] = sorted(table.column("number").to_pylist())
    assert numbers_by_folder == {
        "page_views/dt=2026-11-28/hour=23": [0, 4],
        "page_views/dt=2026-11-29/hour=00": [1, 3],
        "page_views/dt=2026-11-29/hour=01": [5],
        f"page_views/dt={NO_HOUR}/hour={NO_HOUR}": [2],
    }
    assert sum(buckets.values()) == len(times)
    assert all(start % 60_000 == 0 for start in buckets)
