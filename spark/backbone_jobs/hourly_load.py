"""The hourly warehouse load: new records of chosen topics from the aggregate cluster into Parquet by hour.

    python -m backbone_jobs.hourly_load --bootstrap-server AGG --schema-registry URL \\
        --warehouse file:///data/warehouse --topics page_views,searches [--master local[2]]
    spark-submit spark/backbone_jobs/hourly_load.py ...   (the same arguments)

Each run: finishes or discards what a crashed run left (warehouse.py), reads every partition from the
position the last committed run reached to the end it finds at its start (through the `backbone` data
source), decodes the Avro values through the registry into the subject's latest schema's columns
(avro_columns.py), writes Parquet by event time under <topic>/dt=YYYY-MM-DD/hour=HH/ and undecodable
records to _quarantine/, commits, publishes its counts as the `etl` audit tier and marks the hours the
audit proves complete (completeness.py). A retention gap (records deleted before they were loaded) stops
the run unless --no-fail-on-data-loss, which loads from the earliest record left and reports the gap.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from typing import Any

from backbone.client import Consumer, TopicPartition
from backbone.tracking.serde import RegistryClient
from backbone_jobs import completeness
from backbone_jobs.avro_columns import BatchDecoder, output_schema
from backbone_jobs.warehouse import QUARANTINE, STAGING, Files, Manifests, run_name

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
    parser.add_argument("--audit-topic", default="__audit")
    parser.add_argument(
        "--audit-bucket-ms", type=int, default=600_000, help="as the producers' audit.bucket.ms"
    )
    parser.add_argument(
        "--baseline-tier", default="producer", help="tiers an hour must match, comma separated"
    )
    parser.add_argument("--no-fail-on-data-loss", dest="fail_on_data_loss", action="store_false")
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
    bootstrap: str, topic: str, positions: dict[str, int], fail_on_data_loss: bool
) -> tuple[dict[str, list[int]], dict[str, int]]:
    """partition -> [from, until) of `topic`'s new records, and per partition the records retention lost."""
    with Consumer(bootstrap_servers=bootstrap) as consumer:
        found = consumer.partitions_for_topic(topic)
        if not found:
            raise SystemExit(f"hourly_load: topic {topic!r} does not exist in {bootstrap}")
        partitions = [TopicPartition(topic, p) for p in sorted(found)]
        beginnings = consumer.beginning_offsets(partitions)
        ends = consumer.end_offsets(partitions)
    ranges, lost = {}, {}
    for tp in partitions:
        start = positions.get(str(tp.partition), beginnings[tp])
        if start < beginnings[tp]:
            lost[str(tp.partition)] = beginnings[tp] - start
            if fail_on_data_loss:
                raise SystemExit(
                    f"hourly_load: {topic}[{tp.partition}] lost offsets {start}..{beginnings[tp] - 1} to "
                    "retention before they were loaded; rerun with --no-fail-on-data-loss to load from the "
                    "earliest record left"
                )
            start = beginnings[tp]
        ranges[str(tp.partition)] = [start, ends[tp]]
    return ranges, lost


def load_topic(
    spark: Any, args: argparse.Namespace, topic: str, ranges: dict[str, list[int]], staging: str
) -> dict:
    """Decode and stage one topic's ranges; return its counts (by hour, audit buckets, quarantined)."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    reader_schema = json.loads(RegistryClient(args.schema_registry).latest(f"{topic}-value"))
    decoder = BatchDecoder(args.schema_registry, reader_schema)
    frame = (
        spark.read.format("backbone")
        .option("kafka.bootstrap.servers", args.bootstrap_server)
        .option("assign", json.dumps({topic: [int(p) for p in ranges]}))
        .option("startingOffsets", json.dumps({topic: {p: r[0] for p, r in ranges.items()}}))
        .option("endingOffsets", json.dumps({topic: {p: r[1] for p, r in ranges.items()}}))
        .load()
        .select("value", "partition", "offset", "timestamp")
    )
    decoded = frame.mapInArrow(decoder, from_arrow_schema(output_schema(reader_schema))).persist()
    try:
        event_time = F.col(args.time_field)
        good = (
            decoded.where(F.col("error").isNull())
            .drop("error", "raw")
            .withColumn("dt", F.date_format(event_time, "yyyy-MM-dd"))
            .withColumn("hour", F.date_format(event_time, "HH"))
        )
        good.write.partitionBy("dt", "hour").parquet(f"{staging}/{topic}")
        bad = decoded.where(F.col("error").isNotNull()).select(
            "kafka_partition", "kafka_offset", "kafka_timestamp", "schema_id", "error", "raw"
        )
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
    audit = [
        {
            "topic": topic,
            "bucket_start_ms": int(r["b"]),
            "bucket_ms": args.audit_bucket_ms,
            "count": r["count"],
        }
        for r in sorted(buckets, key=lambda r: r["b"])
    ]
    return {"hours": hours, "audit": audit, "quarantined": quarantined}


def run(args: argparse.Namespace) -> dict[str, Any]:
    spark = session(args.master)
    files = Files(spark, args.warehouse)
    manifests = Manifests(files)
    for unaudited in manifests.recover():
        completeness.publish_counts(args.bootstrap_server, args.audit_topic, args.warehouse, unaudited)
        manifests.mark(unaudited["run"], "audited")
    latest = manifests.latest()
    number = (latest["run"] if latest else 0) + 1
    positions: dict[str, dict[str, int]] = latest["offsets"] if latest else {}
    staging_relative = f"{STAGING}/{run_name(number)}"
    staging = files.url(staging_relative)
    manifest: dict[str, Any] = {
        "run": number,
        "offsets": dict(positions),
        "ranges": {},
        "counts": {},
        "quarantined": {},
        "data_loss": {},
        "audit": [],
        "files": [],
    }
    for topic in [t.strip() for t in args.topics.split(",") if t.strip()]:
        ranges, lost = offset_ranges(
            args.bootstrap_server, topic, positions.get(topic, {}), args.fail_on_data_loss
        )
        if lost:
            manifest["data_loss"][topic] = lost
            log.warning("event=load_data_loss topic=%s lost=%s", topic, lost)
        manifest["offsets"][topic] = {p: r[1] for p, r in ranges.items()}
        new = {p: r for p, r in ranges.items() if r[1] > r[0]}
        if not new:
            continue
        manifest["ranges"][topic] = new
        counts = load_topic(spark, args, topic, new, staging)
        manifest["counts"][topic] = counts["hours"]
        manifest["quarantined"][topic] = counts["quarantined"]
        manifest["audit"] += counts["audit"]
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
        print("hourly_load: no new records; nothing committed", file=sys.stderr)
        files.delete(staging_relative)
        return manifest
    manifest["committed_at_ms"] = completeness.now_ms()
    manifests.commit(manifest)
    manifests.publish(manifest)
    completeness.publish_counts(args.bootstrap_server, args.audit_topic, args.warehouse, manifest)
    manifests.mark(number, "audited")
    touched = {topic: set(hours) for topic, hours in manifest["counts"].items()}
    baseline = [t.strip() for t in args.baseline_tier.split(",") if t.strip()]
    pending = completeness.mark_complete_hours(
        files, args.bootstrap_server, args.audit_topic, touched, baseline
    )
    loaded = sum(sum(h.values()) for h in manifest["counts"].values())
    quarantined = sum(manifest["quarantined"].values())
    print(
        f"hourly_load: run {number} committed: {loaded} records loaded, {quarantined} quarantined, "
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
