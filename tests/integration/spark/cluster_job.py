"""The job the standalone-cluster test submits with spark-submit: a batch read and a streaming query.

    spark-submit --master spark://HOST:PORT cluster_job.py BOOTSTRAP TOPIC OUT_DIR

Prints one JSON line: the batch read's count and value-length sum, the streamed row count, and for each
executor the tasks it ran (from the driver's monitoring REST API).
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request


def main() -> None:
    bootstrap, topic, out = sys.argv[1:4]
    from pyspark.sql import SparkSession

    from backbone_spark import register

    spark = SparkSession.builder.appName("backbone-cluster-test").getOrCreate()
    register(spark)
    df = (
        spark.read.format("backbone")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("minPartitions", "8")
        .load()
    )
    count, total = df.selectExpr("count(*)", "sum(length(value))").first()
    query = (
        spark.readStream.format("backbone")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("minPartitions", "8")
        .load()
        .writeStream.format("parquet")
        .option("path", os.path.join(out, "stream"))
        .option("checkpointLocation", os.path.join(out, "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    streamed = spark.read.parquet(os.path.join(out, "stream")).count()
    context = spark.sparkContext
    url = f"{context.uiWebUrl}/api/v1/applications/{context.applicationId}/allexecutors"
    with urllib.request.urlopen(url, timeout=30) as answer:
        executors = {
            e["id"]: {"host": e["hostPort"], "tasks": e["totalTasks"]}
            for e in json.load(answer)
            if e["id"] != "driver"
        }
    print(
        json.dumps({"count": count, "sum": total, "streamed": streamed, "executors": executors}), flush=True
    )
    spark.stop()


if __name__ == "__main__":
    main()
