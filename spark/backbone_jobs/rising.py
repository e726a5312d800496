"""Rising in the last 24 hours: pages ranked by how much their views grew in the latest window against the
window before it, the top N published as JSON to a topic. A Spark Structured Streaming job.

    python -m backbone_jobs.rising --bootstrap-server AGG --schema-registry URL \\
        [--window 24h --slide 1h --watermark 1h --top 10 --min-views 20 --output-topic rising_pages]
    spark-submit spark/backbone_jobs/rising.py ...   (the same arguments)

Page views are counted per page in tumbling buckets of `--slide` by event time (the header's), a streaming
aggregation with a watermark: events later than `--watermark` behind the newest are dropped rather than
counted into buckets already published. After each micro-batch, the counts of the latest `--window`
(ending at the newest complete bucket of event time) are compared with the `--window` before it; pages
with at least `--min-views` in the latest window are ranked by growth = latest / max(previous, 1) and the
top N go to the output topic as one JSON record:

    {"window_end": "2026-01-01T12:00:00Z", "window_ms": 86400000, "pages": [{"page_key": "page-7",
     "views": 900, "previous_views": 120, "growth": 7.5}, ...]}
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

from backbone.client import Producer
from backbone.tracking.serde import RegistryClient
from backbone_jobs.avro_columns import BatchDecoder, output_schema
from backbone_jobs.hourly_load import session
from backbone_jobs.warehouse import Files

log = logging.getLogger("backbone_jobs.rising")
RANKING_FILE = "rising-ranking.json"  # in the checkpoint folder, beside Spark's own state
_UNITS_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def duration_ms(text: str) -> int:
    match = re.fullmatch(r"(\d+)([smhd])", text.strip())
    if not match or int(match[1]) <= 0:
        raise argparse.ArgumentTypeError(f"expected a duration such as 30s, 10m, 24h or 1d, got {text!r}")
    return int(match[1]) * _UNITS_MS[match[2]]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="rising", description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-server", required=True, help="the aggregate cluster")
    parser.add_argument("--schema-registry", required=True, metavar="URL")
    parser.add_argument("--topic", default="page_views", help="the page-view topic (default page_views)")
    parser.add_argument("--output-topic", default="rising_pages")
    parser.add_argument("--window", type=duration_ms, default="24h", help="compared window (default 24h)")
    parser.add_argument("--slide", type=duration_ms, default="1h", help="bucket and step (default 1h)")
    parser.add_argument("--watermark", type=duration_ms, default="1h", help="lateness allowed (default 1h)")
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--min-views", type=int, default=20, help="views a page needs in the window")
    parser.add_argument("--starting-offsets", default="latest", choices=("earliest", "latest"))
    parser.add_argument(
        "--checkpoint", required=True, help="Spark checkpoint location (a Hadoop URI or path)"
    )
    parser.add_argument("--available-now", action="store_true", help="process what is there, then stop")
    parser.add_argument("--master", help="Spark master (default: spark-submit's, else local[2])")
    args = parser.parse_args(argv)
    if args.window % args.slide:
        parser.error("--window must be a whole number of --slide")
    return args


class Ranking:
    """Bucket counts per page (kept for two windows) and the ranking computed from them.

    Spark's update mode sends only the buckets a micro-batch changed, so the counts of the others live
    here; they are saved in the checkpoint after every batch and read back on start, so a restarted job
    ranks against the whole window rather than against the buckets it has seen since."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.counts: dict[int, dict[str, int]] = defaultdict(dict)  # bucket start ms -> page -> views

    def save(self, files: Files) -> None:
        counts = {str(bucket): pages for bucket, pages in self.counts.items()}
        files.write_atomically(RANKING_FILE, json.dumps(counts))

    def restore(self, files: Files) -> None:
        # A crash between write_atomically's delete and rename leaves only the temporary file.
        for name in (RANKING_FILE, f".{RANKING_FILE}.tmp"):
            if files.exists(name):
                for bucket, pages in json.loads(files.read_text(name)).items():
                    self.counts[int(bucket)] = pages
                return

    def update(self, rows: list[Any]) -> None:
        """Rows of (bucket start, page, views so far): update mode sends a bucket's new total."""
        for row in rows:
            self.counts[row["bucket"]][row["page_key"]] = row["views"]

    def top(self) -> dict[str, Any] | None:
        if not self.counts:
            return None
        window, slide = self.args.window, self.args.slide
        end = max(self.counts)  # the newest bucket counts as part of the latest window
        end += slide
        for bucket in [b for b in self.counts if b < end - 2 * window]:
            del self.counts[bucket]
        latest: dict[str, int] = defaultdict(int)
        previous: dict[str, int] = defaultdict(int)
        for bucket, pages in self.counts.items():
            target = latest if bucket >= end - window else previous
            for page, views in pages.items():
                target[page] += views
        ranked = sorted(
            (
                {
                    "page_key": page,
                    "views": views,
                    "previous_views": previous[page],
                    "growth": round(views / max(previous[page], 1), 3),
                }
                for page, views in latest.items()
                if views >= self.args.min_views
            ),
            key=lambda p: (-p["growth"], -p["views"], p["page_key"]),
        )
        return {
            "window_end": datetime.fromtimestamp(end / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "window_ms": window,
            "pages": ranked[: self.args.top],
        }


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    for noisy in ("py4j", "backbone.client"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    args = parse_args(argv)
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    spark = session(args.master, "backbone-rising")
    reader_schema = json.loads(RegistryClient(args.schema_registry).latest(f"{args.topic}-value"))
    decoder = BatchDecoder(args.schema_registry, reader_schema)
    views = (
        spark.readStream.format("backbone")
        .option("kafka.bootstrap.servers", args.bootstrap_server)
        .option("subscribe", args.topic)
        .option("startingOffsets", args.starting_offsets)
        .load()
        .select("value", "partition", "offset", "timestamp")
        .mapInArrow(decoder, from_arrow_schema(output_schema(reader_schema)))
        .where(F.col("error").isNull())
        .select(F.col("header.time").alias("time"), F.col("header.page_key").alias("page_key"))
        .withWatermark("time", f"{args.watermark // 1000} seconds")
    )
    buckets = views.groupBy(F.window("time", f"{args.slide // 1000} seconds"), "page_key").count()
    ranking = Ranking(args)
    checkpoint = Files(spark, args.checkpoint)
    ranking.restore(checkpoint)
    producer = Producer(bootstrap_servers=args.bootstrap_server, acks="all")

    def publish(batch: Any, batch_id: int) -> None:
        rows = batch.select(
            F.unix_millis(F.col("window.start")).alias("bucket"), "page_key", F.col("count").alias("views")
        ).collect()
        ranking.update(rows)
        ranking.save(checkpoint)  # a replayed batch sends the same totals: saving again is harmless
        top = ranking.top()
        if top is None or not rows:
            return
        producer.send(args.output_topic, json.dumps(top).encode(), key=b"rising").get(60)
        leaders = ", ".join(f"{p['page_key']} x{p['growth']}" for p in top["pages"][:3])
        print(
            f"rising: batch {batch_id} window ending {top['window_end']}: {leaders or 'none'}",
            file=sys.stderr,
            flush=True,
        )

    writer = buckets.writeStream.outputMode("update").option("checkpointLocation", args.checkpoint)
    writer = (
        writer.trigger(availableNow=True)
        if args.available_now
        else writer.trigger(processingTime="5 seconds")
    )
    query = writer.foreachBatch(publish).start()
    try:
        query.awaitTermination()
    finally:
        producer.close(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
