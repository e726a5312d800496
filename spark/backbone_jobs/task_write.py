"""The hourly load's tasks writing their own Parquet files, where pyarrow can reach the warehouse.

Each Spark task reads one offset range, decodes it (avro_columns.BatchDecoder) and writes its rows with
pyarrow, one file per event hour it saw, plus a file of its quarantined records; it hands back to the
driver only small rows: the files it wrote and its counts (by hour, by audit bucket, quarantined). The
decoded events never cross into the JVM, which otherwise turned them into rows, cached them, sorted them
by hour and wrote them again, and scanned the cache three times for the counts: most of a run's time.

A task attempt writes under `<staging>/_temporary/<attempt>/`, which the run's listing of staged files
skips. The driver moves into the staging layout only the files of the attempts whose results Spark
returned (one per task, however many attempts ran), so a failed or retried attempt leaves nothing behind
that could be loaded twice; `_temporary` goes with the staging folder.
"""

from __future__ import annotations

import os
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyspark import TaskContext

from backbone_jobs.avro_columns import DECODER_INPUT, META, BatchDecoder
from backbone_spark.options import ReadSettings
from backbone_spark.planning import OffsetRange
from backbone_spark.reading import read_range

# A fault test's hook: when set, each task's first attempt fails after writing its files.
FAIL_FIRST_ATTEMPT = "BACKBONE_LOAD_FAIL_FIRST_ATTEMPT"
TEMPORARY = "_temporary"
NO_HOUR = "__HIVE_DEFAULT_PARTITION__"  # where an event without a time goes, as Spark's writer puts it
RESULT = pa.schema([("kind", pa.string()), ("name", pa.string()), ("count", pa.int64())])
QUARANTINE_COLUMNS = ["kafka_partition", "kafka_offset", "kafka_timestamp", "schema_id", "error", "raw"]


def reachable(url: str) -> bool:
    """Whether pyarrow can write under `url` (else the load writes through Spark and Hadoop's layer)."""
    try:
        pafs.FileSystem.from_uri(url)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError, ValueError):
        return False
    return True


def _field(batch: pa.RecordBatch, dotted: str) -> pa.Array:
    first, *rest = dotted.split(".")
    column = batch.column(first)
    for name in rest:
        column = pc.struct_field(column, name)
    return column


class HourFiles:
    """One task attempt's open Parquet writers: a file per event hour, one for quarantined records."""

    def __init__(self, staging: str) -> None:
        self.fs, root = pafs.FileSystem.from_uri(staging)
        self.attempt = f"{TEMPORARY}/{uuid.uuid4().hex}"
        self.root = f"{root.rstrip('/')}/{self.attempt}"
        self.writers: dict[str, tuple[str, pq.ParquetWriter]] = {}
        self.rows: Counter[str] = Counter()

    def write(self, folder: str, table: pa.Table) -> None:
        """Append rows to the file of `folder` (relative to the staging layout), opening it on first use."""
        found = self.writers.get(folder)
        if found is None:
            relative = f"{folder}/part-{uuid.uuid4().hex}.parquet"
            self.fs.create_dir(f"{self.root}/{folder}", recursive=True)
            writer = pq.ParquetWriter(f"{self.root}/{relative}", table.schema, filesystem=self.fs)
            found = self.writers[folder] = (relative, writer)
        found[1].write_table(table)
        self.rows[found[0]] += table.num_rows

    def close(self) -> dict[str, int]:
        """Close every file; returns each file's path (from the staging folder, under this attempt's
        temporary folder) and its row count."""
        for _, writer in self.writers.values():
            writer.close()
        return {f"{self.attempt}/{relative}": rows for relative, rows in self.rows.items()}


@dataclass(frozen=True)
class ReadDecodeWrite:
    """`mapInArrow`'s function over task numbers: read, decode and write one offset range in one worker;
    yields RESULT rows: ("file", path, rows), ("hour", "YYYY-MM-DD/HH", n), ("bucket", start ms, n) and
    ("quarantined", "", n)."""

    settings: ReadSettings
    ranges: list[OffsetRange]
    decoder: BatchDecoder
    staging: str
    topic: str
    quarantine: str
    time_field: str
    bucket_ms: int

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for task in batch.column(0).to_pylist():
                yield self.task(task)

    def task(self, task: int) -> pa.RecordBatch:
        files = HourFiles(self.staging)
        hours: Counter[str] = Counter()
        buckets: Counter[int] = Counter()
        quarantined = 0
        raw = read_range(self.settings, self.ranges[task])
        for decoded in self.decoder(b.select(DECODER_INPUT) for b in raw):
            failed = decoded.column("error").is_valid()
            bad_count = pc.sum(failed).as_py() or 0
            if bad_count:
                quarantined += bad_count
                bad = pa.Table.from_batches([decoded.filter(failed).select(QUARANTINE_COLUMNS)])
                files.write(f"{self.quarantine}/{self.topic}", bad)
                decoded = decoded.filter(pc.invert(failed))
            if decoded.num_rows:
                self._write_hours(files, decoded, hours, buckets)
        written = files.close()
        if os.environ.get(FAIL_FIRST_ATTEMPT) and TaskContext.get().attemptNumber() == 0:
            raise RuntimeError(
                f"{FAIL_FIRST_ATTEMPT} is set: the first attempt fails after writing its files"
            )
        rows: list[tuple[str, str, int]] = [("file", path, n) for path, n in written.items()]
        rows += [("hour", hour, n) for hour, n in hours.items()]
        rows += [("bucket", str(start), n) for start, n in buckets.items()]
        rows.append(("quarantined", "", quarantined))
        kinds, names, counts = zip(*rows, strict=True)
        return pa.RecordBatch.from_arrays(
            [pa.array(kinds), pa.array(names), pa.array(counts, pa.int64())], schema=RESULT
        )

    def _write_hours(
        self, files: HourFiles, decoded: pa.RecordBatch, hours: Counter[str], buckets: Counter[int]
    ) -> None:
        # Each row's hour as the hour's first instant: a fraction of the cost of formatting every row.
        hour_starts = pc.floor_temporal(_field(decoded, self.time_field), unit="hour")
        stamps = decoded.column("kafka_timestamp").cast(pa.int64())  # microseconds
        starts = pc.multiply(pc.divide(pc.divide(stamps, 1000), self.bucket_ms), self.bucket_ms)
        buckets.update(_value_counts(starts))
        events = pa.Table.from_batches([decoded]).drop_columns([f.name for f in META[-2:]])
        counted = pc.value_counts(hour_starts)
        for start, count in zip(counted.field("values"), counted.field("counts").to_pylist(), strict=True):
            if start.is_valid:
                dt, hour = start.as_py().strftime("%Y-%m-%d %H").split()
                rows = pc.equal(hour_starts, start)
            else:
                dt, hour = NO_HOUR, NO_HOUR
                rows = pc.is_null(hour_starts)
            files.write(f"{self.topic}/dt={dt}/hour={hour}", events.filter(rows))
            hours[f"{dt}/{hour}"] += count


def _value_counts(array: pa.Array) -> dict[Any, int]:
    counts = pc.value_counts(array)
    return dict(zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist(), strict=True))
