"""The Spark data source's speed on local[2]: batch read, streaming into Parquet, and the writer.

Starts ZooKeeper and one broker (unless `--bootstrap` names a running cluster), produces N records of
200 bytes into a 4-partition topic, then measures, each the best of `--runs`:

- batch read: `count(*)` and `sum(length(value))` over the whole topic;
- streaming: an AvailableNow query from the topic into Parquet, start to termination;
- writer: N rows of 200-byte values (made by Spark) written to a new 4-partition topic, at the sink's
  defaults (256 KiB batches) and with the client's default 16 KiB ones;
- and, to name the bottleneck: Spark alone writing rows of the source's columns to Parquet (the
  streaming query's other half), and our part alone outside Spark: the tasks' read path (`read_range`: fetch,
  decode, Arrow batches) over the same ranges in one process, and the client consumer alone (fetch and
  decode, no Arrow).

The batch read is reported twice: the session's first query (it pays the Python workers' start and
imports and the JVM's warm-up: a fixed cost, whatever the records) and the best of `--runs` later ones.

With `--before GIT_REF`, the code of that commit (its `backbone` and `spark` folders, exported from git)
and this code are measured in turns (`--rounds`), each turn in a fresh process with its own Spark session
reading the same topic of the same broker; the table puts them side by side.

    python ops/bench/spark_bench.py [--records 2000000] [--runs 2] [--bootstrap HOST:PORT]
        [--before GIT_REF [--rounds 2]]

Prints a markdown table with the exact command.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

# The code measured: this checkout's, or (a `--before` turn) the tree named by BENCH_CODE.
sys.path.insert(0, os.environ.get("BENCH_CODE") or str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, os.path.join(sys.path[0], "spark"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from local_cluster import one_broker, stop_on_termination

from backbone.client import Admin, Consumer, NewTopic, Producer, TopicPartition

CODE = Path(os.environ.get("BENCH_CODE") or Path(__file__).resolve().parents[2])
PARTITIONS = 4
VALUE_SIZE = 200


def produce_topic(bootstrap: str, topic: str, records: int) -> None:
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    value = b"x" * VALUE_SIZE
    with Producer(bootstrap_servers=bootstrap, acks=1, linger_ms=20, batch_size=262_144) as producer:
        for i in range(records):
            producer.send(topic, value, partition=i % PARTITIONS)
        producer.flush()


def session(local_dir: str):  # type: ignore[no-untyped-def]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    from backbone_spark import register

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "2g")
        .config("spark.local.dir", local_dir)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def best(runs: int, measure) -> float:  # type: ignore[no-untyped-def]
    return min(measure() for _ in range(runs))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--bootstrap")
    parser.add_argument("--before", metavar="GIT_REF", help="also measure the code of this commit, in turns")
    parser.add_argument("--rounds", type=int, default=2, help="turns of before and now, with --before")
    parser.add_argument("--topic", help=argparse.SUPPRESS)  # a `--before` turn: the topic is produced
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # a turn's answer
    args = parser.parse_args()
    stop_on_termination()
    with tempfile.TemporaryDirectory(prefix="spark-bench-") as tmp:
        if args.bootstrap:
            measure_or_compare(args, args.bootstrap, Path(tmp))
        else:
            with one_broker(Path(tmp), {"num.partitions": PARTITIONS}) as broker:
                measure_or_compare(args, broker.bootstrap, Path(tmp))


def measure_or_compare(args: argparse.Namespace, bootstrap: str, tmp: Path) -> None:
    if not args.before:
        run(args, bootstrap, tmp)
        return
    topic = f"spark-bench-{uuid.uuid4().hex[:6]}"
    print(f"producing {args.records:,} records into {topic}", file=sys.stderr)
    produce_topic(bootstrap, topic, args.records)
    before = tmp / "before"
    before.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(CODE), "archive", args.before, "backbone", "spark"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(before)], input=archive, check=True)
    turns: dict[str, list[dict[str, float]]] = {"before": [], "now": []}
    loads = [os.getloadavg()[0]]
    for turn in range(args.rounds):
        for name, code in (("before", before), ("now", CODE)):
            print(f"round {turn + 1}: {name}", file=sys.stderr, flush=True)
            env = {**os.environ, "BENCH_CODE": str(code), "PYTHONPATH": f"{code}:{code / 'spark'}"}
            command = [sys.executable, __file__, "--records", str(args.records), "--runs", str(args.runs)]
            command += ["--bootstrap", bootstrap, "--topic", topic, "--json"]
            done = subprocess.run(command, env=env, check=False, capture_output=True, text=True)
            if done.returncode:
                sys.stderr.write(done.stderr[-3000:])
                raise SystemExit(f"the {name} turn failed (exit status {done.returncode})")
            turns[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
            loads.append(os.getloadavg()[0])
    n = args.records
    command = "python ops/bench/spark_bench.py " + shlex.join(sys.argv[1:])
    print(
        f"\n`{command.strip()}` ({n:,} records of {VALUE_SIZE} bytes, {PARTITIONS} partitions, local[2]; "
        f"{args.rounds} rounds of commit {args.before} then this code, each a fresh process; load average "
        f"{min(loads):.1f} to {max(loads):.1f})\n"
    )
    print("| what | before, records/s per round | now, records/s per round | now / before (median) |")
    print("| --- | ---: | ---: | ---: |")
    for name in turns["now"][0]:
        before_rates = [n / t[name] for t in turns["before"] if name in t]
        now_rates = [n / t[name] for t in turns["now"]]
        ratios = sorted(a / b for a, b in zip(now_rates, before_rates, strict=False))
        ratio = f"{ratios[len(ratios) // 2]:.2f}" if ratios else ""
        print(
            f"| {name} | {', '.join(f'{r:,.0f}' for r in before_rates)} "
            f"| {', '.join(f'{r:,.0f}' for r in now_rates)} | {ratio} |"
        )


def run(args: argparse.Namespace, bootstrap: str, tmp: Path) -> None:
    n = args.records
    topic = args.topic or f"spark-bench-{uuid.uuid4().hex[:6]}"
    if not args.topic:
        print(f"producing {n:,} records into {topic}", file=sys.stderr)
        produce_topic(bootstrap, topic, n)
    spark = session(str(tmp / "spark-local"))
    options = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic}

    def batch_read() -> float:
        started = time.perf_counter()
        count, total = (
            spark.read.format("backbone")
            .options(**options)
            .load()
            .selectExpr("count(*)", "sum(length(value))")
            .first()
        )
        elapsed = time.perf_counter() - started
        assert (count, total) == (n, n * VALUE_SIZE), (count, total)
        return elapsed

    def stream_to_parquet() -> float:
        out = tmp / f"stream-{uuid.uuid4().hex[:6]}"
        started = time.perf_counter()
        query = (
            spark.readStream.format("backbone")
            .options(**options)
            .option("startingOffsets", "earliest")
            .load()
            .writeStream.format("parquet")
            .option("path", str(out / "data"))
            .option("checkpointLocation", str(out / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        elapsed = time.perf_counter() - started
        assert sum(p["numInputRows"] for p in query.recentProgress) == n
        return elapsed

    def write(**producer: str) -> float:
        target = f"spark-bench-out-{uuid.uuid4().hex[:6]}"
        with Admin(bootstrap_servers=bootstrap) as admin:
            admin.create_topics([NewTopic(target, PARTITIONS, 1)])
        rows = spark.range(n, numPartitions=2).selectExpr(
            f"cast(repeat('x', {VALUE_SIZE}) as binary) as value"
        )
        rows = rows.cache()
        rows.count()
        started = time.perf_counter()
        rows.write.format("backbone").option("kafka.bootstrap.servers", bootstrap).option(
            "topic", target
        ).options(**{f"kafka.{k}": v for k, v in producer.items()}).mode("append").save()
        elapsed = time.perf_counter() - started
        rows.unpersist()
        return elapsed

    def parquet_alone() -> float:
        """Spark's own part of the streaming query: rows of the source's columns, made in the JVM, into
        Parquet (no Backbone, no Python)."""
        out = tmp / f"parquet-{uuid.uuid4().hex[:6]}"
        started = time.perf_counter()
        spark.range(n, numPartitions=PARTITIONS).selectExpr(
            "cast(null as binary) as key",
            f"cast(repeat('x', {VALUE_SIZE}) as binary) as value",
            "'topic' as topic",
            "cast(id % 4 as int) as partition",
            "id as offset",
            "current_timestamp() as timestamp",
            "0 as timestampType",
        ).write.parquet(str(out))
        return time.perf_counter() - started

    def our_read_path() -> float:
        from backbone_spark.options import ReadSettings
        from backbone_spark.planning import Planner
        from backbone_spark.reading import read_range

        settings = ReadSettings.parse(options, streaming=False)
        with Planner(settings) as planner:
            ranges = planner.batch_ranges()
        started = time.perf_counter()
        rows = sum(batch.num_rows for r in ranges for batch in read_range(settings, r))
        assert rows == n
        return time.perf_counter() - started

    def consumer_alone() -> float:
        started = time.perf_counter()
        seen = 0
        with Consumer(
            bootstrap_servers=bootstrap, auto_offset_reset="earliest", max_poll_records=20_000
        ) as c:
            c.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
            while seen < n:
                for records in c.poll(timeout_ms=1000).values():
                    seen += len(records)
        return time.perf_counter() - started

    results = [("batch read, count + sum(length(value)), the session's first query", batch_read())]
    print(f"{results[0][0]}: {results[0][1]:.2f} s", file=sys.stderr, flush=True)
    for name, measure in (
        ("batch read, later queries of the session", batch_read),
        ("streaming into Parquet (AvailableNow)", stream_to_parquet),
        ("Spark alone: the same columns made in the JVM into Parquet", parquet_alone),
        ("writer (acks=all, idempotent) at the sink's defaults", write),
        (
            "writer with the client's default batches (`kafka.batch.size` 16384)",
            lambda: write(**{"batch.size": "16384"}),
        ),
        ("our read path alone, one process (fetch, decode, Arrow)", our_read_path),
        ("client Consumer alone, one process (fetch, decode)", consumer_alone),
    ):
        print(f"measuring: {name}", file=sys.stderr)
        seconds = best(args.runs, measure)
        results.append((name, seconds))
        print(f"{name}: {seconds:.2f} s, {n / seconds:,.0f} records/s", file=sys.stderr, flush=True)
    spark.stop()
    if args.json:
        print(json.dumps(dict(results)))
        return
    command = "python ops/bench/spark_bench.py " + shlex.join(sys.argv[1:])
    print(
        f"\n`{command.strip()}` ({n:,} records of {VALUE_SIZE} bytes, {PARTITIONS} partitions, local[2], "
        f"best of {args.runs})\n"
    )
    print("| what | seconds | records/s |")
    print("| --- | ---: | ---: |")
    for name, seconds in results:
        print(f"| {name} | {seconds:.2f} | {n / seconds:,.0f} |")


if __name__ == "__main__":
    main()
