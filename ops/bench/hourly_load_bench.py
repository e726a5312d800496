"""The hourly warehouse load's speed on local[2]: N tracking events from a real broker to Parquet.

Starts ZooKeeper, one broker and the schema registry; produces N page-view events into a 4-partition
`page_views` topic, each made and encoded as `backbone generate` does (its event maker and Confluent-framed
Avro through the registry; a pool of distinct events is cycled so producing is quick), with event times
over three hours; then measures
- the load end to end: `backbone_jobs.hourly_load.run` (plan; each Spark task reads its offset range with
  the data source's task read path, decodes it and writes Parquet by hour; commit, audit counts, hour
  markers) on a Spark session started beforehand (the JVM's start is reported apart: an hourly run pays it
  once);
- its phases alone, one after the other in this process over the same offset ranges: read (the data
  source's task read path: fetch into Arrow batches), decode (the load's BatchDecoder: Avro values to the
  event's columns) and write (those columns into Parquet by hour with pyarrow).

    python ops/bench/hourly_load_bench.py [--events 1000000] [--write]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "spark"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import report
from local_cluster import one_broker, stop_on_termination

from backbone.client import Admin, NewTopic, Producer
from backbone.coordination import find_free_port
from backbone.dev import registry
from backbone.dev.processes import stop_child
from backbone.tracking import schemas
from backbone.tracking.generator import GeneratorSettings, TrafficGenerator
from backbone.tracking.serde import AvroEncoder, RegistryClient

SECTION = "## Hourly warehouse load"
NAME = "hourly-load"
TOPIC = "page_views"
PARTITIONS = 4
POOL = 20_000
HOUR_MS = 3_600_000


def produce_events(bootstrap: str, registry_url: str, count: int) -> int:
    """Produce `count` page views; returns their total encoded size in bytes."""
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])
    generator = TrafficGenerator(GeneratorSettings(bootstrap, registry_url, "dc1", 1.0, 0.0, seed=7))
    encoder = AvroEncoder(RegistryClient(registry_url), schemas.subject(TOPIC), schemas.TOPICS[TOPIC])
    first_ms = (int(time.time() * 1000) // HOUR_MS - 3) * HOUR_MS  # three whole hours before this one
    pool = []
    while len(pool) < POOL:
        time_ms = first_ms + len(pool) * 3 * HOUR_MS // POOL
        kind, _member, event = generator.make(time_ms, 1.0)
        if kind == TOPIC:
            pool.append((encoder.encode(event), time_ms))
    size = 0
    with Producer(bootstrap_servers=bootstrap, acks=1, linger_ms=20, batch_size=262_144) as producer:
        for number in range(count):
            value, time_ms = pool[number % POOL]
            producer.send(TOPIC, value, partition=number % PARTITIONS, timestamp_ms=time_ms)
            size += len(value)
        producer.flush()
    return size


def measure_load(bootstrap: str, registry_url: str, warehouse: Path, count: int) -> tuple[float, float]:
    """(seconds to start Spark, seconds of the load's run) for one run over every event."""
    from backbone_jobs import hourly_load

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    started = time.perf_counter()
    spark = hourly_load.session("local[2]")
    spark.sparkContext.setLogLevel("ERROR")
    session_s = time.perf_counter() - started
    args = hourly_load.parse_args(
        [
            "--bootstrap-server",
            bootstrap,
            "--schema-registry",
            registry_url,
            "--warehouse",
            f"file://{warehouse}",
            "--topics",
            TOPIC,
            "--master",
            "local[2]",
        ]
    )
    started = time.perf_counter()
    manifest = hourly_load.run(args)
    run_s = time.perf_counter() - started
    loaded = sum(manifest["counts"][TOPIC].values())
    assert loaded == count and not manifest["quarantined"][TOPIC], (loaded, manifest["quarantined"])
    spark.stop()
    return session_s, run_s


def measure_phases(bootstrap: str, registry_url: str, out: Path, count: int) -> dict[str, float]:
    """Seconds of each phase alone, in this process, over the whole topic."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    from backbone_jobs.avro_columns import BatchDecoder
    from backbone_spark.options import ReadSettings
    from backbone_spark.planning import Planner
    from backbone_spark.reading import read_range

    settings = ReadSettings.parse({"kafka.bootstrap.servers": bootstrap, "subscribe": TOPIC}, streaming=False)
    with Planner(settings) as planner:
        ranges = planner.batch_ranges()
    seconds = {}
    started = time.perf_counter()
    batches = [
        batch.select(["value", "partition", "offset", "timestamp"])
        for part in ranges
        for batch in read_range(settings, part)
    ]
    seconds["read (fetch into Arrow batches)"] = time.perf_counter() - started
    assert sum(b.num_rows for b in batches) == count
    reader = json.loads(RegistryClient(registry_url).latest(schemas.subject(TOPIC)))
    started = time.perf_counter()
    decoded = list(BatchDecoder(registry_url, reader)(iter(batches)))
    seconds["decode (Avro values to columns)"] = time.perf_counter() - started
    del batches
    started = time.perf_counter()
    table = pa.Table.from_batches(decoded).drop_columns(["error", "raw"])
    event_time = pc.struct_field(table.column("header"), "time")
    table = table.append_column("dt", pc.strftime(event_time, "%Y-%m-%d")).append_column(
        "hour", pc.strftime(event_time, "%H")
    )
    ds.write_dataset(table, out, format="parquet", partitioning=["dt", "hour"], partitioning_flavor="hive")
    seconds["write (Parquet by hour, pyarrow)"] = time.perf_counter() - started
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--write", action="store_true", help="record the figures in docs/benchmarks.md")
    args = parser.parse_args()
    stop_on_termination()
    when = report.started()
    with tempfile.TemporaryDirectory(prefix="load-bench-") as tmp, one_broker(Path(tmp)) as broker:
        started: list[subprocess.Popen[bytes]] = []
        try:
            url = registry.start(Path(tmp), broker.bootstrap, "127.0.0.1", find_free_port(), started)["url"]
            print(f"producing {args.events:,} page views", file=sys.stderr, flush=True)
            size = produce_events(broker.bootstrap, url, args.events)
            print("measuring the phases alone", file=sys.stderr, flush=True)
            phases = measure_phases(broker.bootstrap, url, Path(tmp) / "phases", args.events)
            print("measuring the load", file=sys.stderr, flush=True)
            session_s, run_s = measure_load(broker.bootstrap, url, Path(tmp) / "warehouse", args.events)
        finally:
            for process in started:
                stop_child(process, timeout=15)
    n = args.events
    rows = [["the load's run, end to end (Spark started)", f"{run_s:.2f}", f"{n / run_s:,.0f}"]]
    rows += [[f"phase alone: {name}", f"{s:.2f}", f"{n / s:,.0f}"] for name, s in phases.items()]
    rows.append(["Spark session start (once per run)", f"{session_s:.2f}", ""])
    about = (
        f"{n:,} page-view events (Avro, {size / n:.0f} bytes on average with the framing) in 4 partitions "
        "of one broker, event times over 3 hours; `local[2]`; the registry and broker on loopback. "
        "Target: at least 200,000 events/s decoded and written."
    )
    body = report.figures("hourly_load_bench.py", when, about, ["measure", "seconds", "events/s"], rows)
    report.publish(NAME, SECTION, body, args.write)


if __name__ == "__main__":
    main()
