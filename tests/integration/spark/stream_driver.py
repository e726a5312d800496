"""A streaming query as its own driver process, for tests that kill it: copies a topic into Parquet.

    python stream_driver.py BOOTSTRAP TOPIC GROUP OUT CHECKPOINT [--available-now]

Runs until killed, or with --available-now until everything produced so far is in the sink.
"""

from __future__ import annotations

import os
import sys

from spark_support import TEST_JAVA_OPTIONS


def main() -> None:
    bootstrap, topic, group, out, checkpoint = sys.argv[1:6]
    available_now = "--available-now" in sys.argv[6:]
    from pyspark.sql import SparkSession

    from backbone_spark import register

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.driver.extraJavaOptions", TEST_JAVA_OPTIONS)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.local.dir", os.path.join(os.path.dirname(checkpoint), "spark-local"))
        .getOrCreate()
    )
    register(spark)
    df = (
        spark.readStream.format("backbone")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "300")
        .option("kafka.group.id", group)
        .load()
    )
    writer = df.writeStream.format("parquet").option("path", out).option("checkpointLocation", checkpoint)
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime="200 milliseconds")
    query = writer.start()
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
