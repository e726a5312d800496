"""The hourly warehouse load: new records of chosen topics from the aggregate cluster into Parquet by hour.

    python -m backbone_jobs.hourly_load --bootstrap-server AGG --schema-registry URL \\
        --warehouse file:///data/warehouse --topics page_views,searches [--master local[2]]
    spark-submit spark/backbone_jobs/hourly_load.py ...   (the same arguments)

Each run: finishes or discards what a crashed run left (warehouse.py), reads every partition from the
position the last committed run reached to the end it finds at its start (the `backbone` data source's
planner and task read path), decodes the Avro values through the registry into the subject's latest
schema's columns (avro_columns.py; read and decoded in one Python worker per offset range), writes Parquet
by event time under <topic>/dt=YYYY-MM-DD/hour=HH/ and undecodable records to _quarantine/ (each task with
pyarrow, task_write.py, or through Spark: --writer), commits,
publishes its counts as the `etl` audit tier and marks the hours the audit proves complete
(completeness.py). A retention gap (records deleted before they were loaded) is reported by partition and
offsets; per --retention-gap it stops the run before anything is written (`fail`, the default) or the run
loads from the earliest record left and records the gap in its manifest and in
`_quarantine/<topic>/run=N/retention_gap.json` (`quarantine`). Never a silent skip: the data source reads
with failOnDataLoss, so records deleted while the run reads fail it too.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from backbone.client import Consumer, TopicPartition
from backbone.tracking.serde import RegistryClient
from backbone_jobs import completeness
from backbone_jobs.avro_columns import DECODER_INPUT, BatchDecoder
from backbone_jobs.task_write import QUARANTINE_COLUMNS, RESULT, TEMPORARY, ReadDecodeWrite, reachable
from backbone_jobs.warehouse import QUARANTINE, STAGING, Files, Manifests, run_name
from backbone_spark.options import ReadSettings
from backbone_spark.planning import OffsetRange, Planner
from backbone_spark.reading import read_range

log = logging.getLogger("backbone_jobs.hourly_load")

# A crash test's hook: seconds to wait after the files are staged, before the commit.
PAUSE_BEFORE_COMMIT = "BACKBONE_LOAD_PAUSE_BEFORE_COMMIT_S"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="hourly_load", description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-server", required=True, help="the aggregate cluster")
    parser.add_argument("--schema-registry", required=True, metavar="URL")
    parser.add_argument("--warehouse", required=True, help="a URI Hadoop accepts: file:///..., hdfs://...")
    parser.add_argument("--topics", required=True, help="comma-separated topics (subjects <topic>-value)")
    parser.add_argument(
        "--time-field", default="header.time", help="the event-time field (default header.time)"
    )
    parser.add_argument("--master", help="Spark master (default: spark-submit's, else local[2])")
    parser.add_argument(
        "--writer",
        choices=("auto", "pyarrow", "spark"),
        default="auto",
        help="who writes the Parquet files: each task with pyarrow, or Spark through Hadoop's file system "
        "layer; auto (the default): pyarrow where it has a file system for the warehouse URI (file://, ...)",
    )
    parser.add_argument("--audit-topic", default="__audit")
    parser.add_argument(
        "--audit-bucket-ms", type=int, default=600_000, help="as the producers' audit.bucket.ms"
    )
    parser.add_argument(
        "--baseline-tier", default="producer", help="tiers an hour must match, comma separated"
    )
    parser.add_argument(
        "--retention-gap",
        choices=("fail", "quarantine"),
        default="fail",
        help="records deleted before they were loaded: stop (default), or load the rest and record the gap",
    )
    parser.add_argument(
        "--no-fail-on-data-loss",
        dest="retention_gap",
        action="store_const",
        const="quarantine",
        help="the same as --retention-gap quarantine",
    )
    return parser.parse_args(argv)


def session(master: str | None, app: str = "backbone-hourly-load") -> Any:
    from pyspark.sql import SparkSession

    from backbone_spark import register

    builder = (
        SparkSession.builder.appName(app)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
        # The jobs' aggregations are small (hours, pages): Spark's default of 200 shuffle partitions
        # would mostly schedule empty tasks. BACKBONE_SHUFFLE_PARTITIONS sets another number.
        .config("spark.sql.shuffle.partitions", os.environ.get("BACKBONE_SHUFFLE_PARTITIONS", "4"))
    )
    if master or "SPARK_HOME" not in os.environ:
        builder = builder.master(master or "local[2]")
    spark = builder.getOrCreate()
    register(spark)
    return spark


def offset_ranges(
    bootstrap: str, topic: str, positions: dict[str, int]
) -> tuple[dict[str, list[int]], dict[str, dict[str, int]]]:
    """partition -> [from, until) of `topic`'s new records, and partition -> the gap retention made there
    ({"from", "until", "records"}: offsets deleted before they were loaded)."""
    with Consumer(bootstrap_servers=bootstrap) as consumer:
        found = consumer.partitions_for_topic(topic)
        if not found:
            raise SystemExit(f"hourly_load: topic {topic!r} does not exist in {bootstrap}")
        partitions = [TopicPartition(topic, p) for p in sorted(found)]
        beginnings = consumer.beginning_offsets(partitions)
        ends = consumer.end_offsets(partitions)
    ranges, gaps = {}, {}
    for tp in partitions:
        start = positions.get(str(tp.partition), beginnings[tp])
        if start < beginnings[tp]:
            gaps[str(tp.partition)] = {
                "from": start,
                "until": beginnings[tp],
                "records": beginnings[tp] - start,
            }
            start = beginnings[tp]
        ranges[str(tp.partition)] = [start, ends[tp]]
    return ranges, gaps


def describe_gaps(gaps: dict[str, dict[str, dict[str, int]]]) -> str:
    return ", ".join(
        f"{topic}[{partition}] offsets {gap['from']}..{gap['until'] - 1} ({gap['records']} records)"
        for topic, by_partition in sorted(gaps.items())
        for partition, gap in sorted(by_partition.items(), key=lambda item: int(item[0]))
    )


class ReadAndDecode:
    """`mapInArrow`'s function over task numbers: each reads its offset range with the data source's task
    read path and decodes the values (avro_columns.BatchDecoder), in one Python worker."""

    def __init__(self, settings: ReadSettings, ranges: list[OffsetRange], decoder: BatchDecoder) -> None:
        self.settings = settings
        self.ranges = ranges
        self.decoder = decoder

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for task in batch.column(0).to_pylist():
                raw = read_range(self.settings, self.ranges[task])
                yield from self.decoder(b.select(DECODER_INPUT) for b in raw)


def load_topic(
    spark: Any, args: argparse.Namespace, topic: str, ranges: dict[str, list[int]], staging: str
) -> dict:
    """Decode and stage one topic's ranges; return its counts (by hour, audit buckets, quarantined)."""
    reader_schema = json.loads(RegistryClient(args.schema_registry).latest(f"{topic}-value"))
    decoder = BatchDecoder(args.schema_registry, reader_schema)
    settings = ReadSettings.parse(
        {
            "kafka.bootstrap.servers": args.bootstrap_server,
            "assign": json.dumps({topic: [int(p) for p in ranges]}),
            "startingOffsets": json.dumps({topic: {p: r[0] for p, r in ranges.items()}}),
            "endingOffsets": json.dumps({topic: {p: r[1] for p, r in ranges.items()}}),
            "failOnDataLoss": "true",  # deleted while this run reads: fail; the next run reports it
        },
        streaming=False,
    )
    with Planner(settings) as planner:
        planned = planner.batch_ranges()
    # One task per offset range, each reading and decoding in the same Python worker: the records cross
    # from Python to the JVM at most once, as decoded columns (through the `backbone` data source's
    # spark.read they would cross twice: raw values out of its reader, then into mapInArrow and back).
    tasks = spark.range(0, len(planned), 1, len(planned))
    if args.writer == "pyarrow" or (args.writer == "auto" and reachable(args.warehouse)):
        write = _write_in_tasks
    else:
        write = _write_with_spark
    hours, buckets, quarantined = write(args, tasks, topic, settings, planned, decoder, staging)
    audit = [
        {"topic": topic, "bucket_start_ms": start, "bucket_ms": args.audit_bucket_ms, "count": count}
        for start, count in sorted(buckets.items())
    ]
    return {"hours": hours, "audit": audit, "quarantined": quarantined}


Counts = tuple[dict[str, int], dict[int, int], int]  # by hour, by audit bucket start, quarantined


def _write_in_tasks(
    args: argparse.Namespace,
    tasks: Any,
    topic: str,
    settings: ReadSettings,
    planned: list[OffsetRange],
    decoder: BatchDecoder,
    staging: str,
) -> Counts:
    """Each task writes its own files with pyarrow (task_write.py); the driver moves the files of the
    attempts Spark returned into the staging layout."""
    write = ReadDecodeWrite(
        settings, planned, decoder, staging, topic, QUARANTINE, args.time_field, args.audit_bucket_ms
    )
    from pyspark.sql.pandas.types import from_arrow_schema

    results = tasks.mapInArrow(write, from_arrow_schema(RESULT)).collect()
    files = Files(tasks.sparkSession, staging)
    hours: dict[str, int] = {}
    buckets: dict[int, int] = {}
    quarantined = 0
    for kind, name, count in results:
        if kind == "file":
            files.rename(name, name.split("/", 2)[2])  # out of _temporary/<attempt>/
        elif kind == "hour":
            hours[name] = hours.get(name, 0) + count
        elif kind == "bucket":
            buckets[int(name)] = buckets.get(int(name), 0) + count
        else:
            quarantined += count
    files.delete(TEMPORARY)  # what failed attempts left
    return hours, buckets, quarantined


def _write_with_spark(
    args: argparse.Namespace,
    tasks: Any,
    topic: str,
    settings: ReadSettings,
    planned: list[OffsetRange],
    decoder: BatchDecoder,
    staging: str,
) -> Counts:
    """The decoded columns handed to the JVM, which writes them through Hadoop's file system layer."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    schema = from_arrow_schema(decoder.schema)
    decoded = tasks.mapInArrow(ReadAndDecode(settings, planned, decoder), schema).persist()
    try:
        event_time = F.col(args.time_field)
        good = (
            decoded.where(F.col("error").isNull())
            .drop("error", "raw")
            .withColumn("dt", F.date_format(event_time, "yyyy-MM-dd"))
            .withColumn("hour", F.date_format(event_time, "HH"))
        )
        good.write.partitionBy("dt", "hour").parquet(f"{staging}/{topic}")
        bad = decoded.where(F.col("error").isNotNull()).select(*QUARANTINE_COLUMNS)
        quarantined = bad.count()
        if quarantined:
            bad.write.parquet(f"{staging}/{QUARANTINE}/{topic}")
        hours = {f"{r['dt']}/{r['hour']}": r["count"] for r in good.groupBy("dt", "hour").count().collect()}
        bucket = (
            F.floor(F.unix_millis(F.col("kafka_timestamp")) / args.audit_bucket_ms) * args.audit_bucket_ms
        )
        buckets = good.groupBy(bucket.alias("b")).count().collect()
    finally:
        decoded.unpersist()
    return hours, {int(r["b"]): r["count"] for r in buckets}, quarantined


def finish(
    args: argparse.Namespace, files: Files, manifests: Manifests, manifest: dict[str, Any]
) -> dict[str, list[str]]:
    """After a committed run's files are in place: publish its counts (idempotent), mark the hours the
    audit proves complete, then mark the run audited; a crash anywhere here is finished by the next run."""
    completeness.publish_counts(args.bootstrap_server, args.audit_topic, args.warehouse, manifest)
    touched = {topic: set(hours) for topic, hours in manifest["counts"].items()}
    pending = mark_hours(args, files, touched)
    manifests.mark(manifest["run"], "audited")
    return pending


def mark_hours(args: argparse.Namespace, files: Files, touched: dict[str, set[str]]) -> dict[str, list[str]]:
    baseline = [t.strip() for t in args.baseline_tier.split(",") if t.strip()]
    return completeness.mark_complete_hours(files, args.bootstrap_server, args.audit_topic, touched, baseline)


def run(args: argparse.Namespace) -> dict[str, Any]:
    spark = session(args.master)
    files = Files(spark, args.warehouse)
    manifests = Manifests(files)
    for unaudited in manifests.recover():
        print(f"hourly_load: finishing committed run {unaudited['run']}", file=sys.stderr, flush=True)
        finish(args, files, manifests, unaudited)
    latest = manifests.latest()
    number = (latest["run"] if latest else 0) + 1
    positions: dict[str, dict[str, int]] = latest["offsets"] if latest else {}
    topics = [t.strip() for t in args.topics.split(",") if t.strip()]
    planned = {
        topic: offset_ranges(args.bootstrap_server, topic, positions.get(topic, {})) for topic in topics
    }
    gaps = {topic: gap for topic, (_, gap) in planned.items() if gap}
    if gaps:
        log.warning("event=load_retention_gap run=%d gaps=%s", number, json.dumps(gaps, sort_keys=True))
        if args.retention_gap == "fail":
            raise SystemExit(
                "hourly_load: records were deleted (retention) before they were loaded: "
                f"{describe_gaps(gaps)}; nothing was loaded. Rerun with --retention-gap quarantine to load "
                "from the earliest record left and record the gap."
            )
    staging_relative = f"{STAGING}/{run_name(number)}"
    staging = files.url(staging_relative)
    manifest: dict[str, Any] = {
        "run": number,
        "offsets": dict(positions),
        "ranges": {},
        "counts": {},
        "quarantined": {},
        "data_loss": gaps,
        "audit": [],
        "files": [],
    }
    for topic, (ranges, gap) in planned.items():
        manifest["offsets"][topic] = {p: r[1] for p, r in ranges.items()}
        new = {p: r for p, r in ranges.items() if r[1] > r[0]}
        if new:
            manifest["ranges"][topic] = new
            counts = load_topic(spark, args, topic, new, staging)
            manifest["counts"][topic] = counts["hours"]
            manifest["quarantined"][topic] = counts["quarantined"]
            manifest["audit"] += counts["audit"]
        if gap:  # beside the topic's quarantined records: what it should have held and never can
            report = {
                "topic": topic,
                "run": number,
                "reason": "deleted by retention before loaded",
                "gaps": gap,
            }
            files.write_text(
                f"{staging_relative}/{QUARANTINE}/{topic}/retention_gap.json", json.dumps(report, indent=1)
            )
    for staged in files.files_under(staging_relative):
        topic, rest = staged.split("/", 1)
        if topic == QUARANTINE:
            final = f"{QUARANTINE}/{rest.split('/')[0]}/run={number}/{rest.split('/')[-1]}"
        else:
            folder, name = rest.rsplit("/", 1)
            final = f"{topic}/{folder}/part-{number:06d}-{name.removeprefix('part-')}"
        manifest["files"].append({"staged": f"{staging_relative}/{staged}", "final": final})
    print(f"hourly_load: run {number} staged {len(manifest['files'])} files", file=sys.stderr, flush=True)
    log.info("event=load_staged run=%d files=%d", number, len(manifest["files"]))
    pause = float(os.environ.get(PAUSE_BEFORE_COMMIT, "0") or 0)
    if pause:
        time.sleep(pause)
    if not manifest["files"] and manifest["offsets"] == positions:
        files.delete(staging_relative)
        mark_hours(args, files, {})  # hours left incomplete by earlier runs may be complete by now
        print("hourly_load: no new records; nothing committed", file=sys.stderr)
        return manifest
    manifest["committed_at_ms"] = completeness.now_ms()
    manifests.commit(manifest)
    manifests.publish(manifest)
    pending = finish(args, files, manifests, manifest)
    loaded = sum(sum(h.values()) for h in manifest["counts"].values())
    quarantined = sum(manifest["quarantined"].values())
    print(
        f"hourly_load: run {number} committed: {loaded} records loaded, {quarantined} quarantined, "
        f"lost to retention: {describe_gaps(gaps) if gaps else 'none'}, "
        f"incomplete hours: {json.dumps(pending) if pending else 'none'}",
        file=sys.stderr,
        flush=True,
    )
    return manifest


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    for noisy in ("py4j", "backbone.client"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    run(parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
