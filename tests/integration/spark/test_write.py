"""Writing with real Spark to a live broker: batch and streaming, every column of Spark's Kafka sink,
the count in the query's metrics, and a record the broker refuses failing the job with its error."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructField, StructType
from spark_support import create_topic, produce

from backbone.client import Consumer, TopicPartition
from backbone.client.producer.partitioner import partition_for_key
from backbone.dev.processes import BrokerProcess
from backbone_spark.options import WriteSettings
from backbone_spark.writing import Columns, RecordWriteError, produce_rows
from tests.helpers.names import unique_name

HEADERS = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))


def consume_all(bootstrap: str, topic: str, partitions: int, count: int) -> list[Any]:
    """Every record of the topic, read with the plain client (not the data source under test)."""
    records: list[Any] = []
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        for _ in range(200):
            for batch in consumer.poll(timeout_ms=200).values():
                records.extend(batch)
            if len(records) >= count:
                break
    return records


def writer(df: Any, broker: BrokerProcess, **options: str) -> Any:
    builder = df.write.format("backbone").option("kafka.bootstrap.servers", broker.bootstrap).mode("append")
    for name, value in options.items():
        builder = builder.option(name, value)
    return builder


def test_a_batch_write_produces_every_column(spark, live_broker: BrokerProcess):
    topic = unique_name("write")
    create_topic(live_broker.bootstrap, topic, 3)
    schema = StructType(
        [
            StructField("key", StringType()),
            StructField("value", BinaryType()),
            StructField("topic", StringType()),
            StructField("partition", IntegerType()),
            StructField("headers", HEADERS),
        ]
    )
    rows = [
        (
            None if i % 4 == 0 else f"k{i}",
            b"v%d" % i,
            topic,
            i % 3,
            [("h", b"%d" % i), ("n", None)] if i % 2 else None,
        )
        for i in range(300)
    ]
    writer(spark.createDataFrame(rows, schema).repartition(2), live_broker).save()
    got = consume_all(live_broker.bootstrap, topic, 3, 300)
    assert sorted((r.value, r.key, r.partition, tuple(r.headers)) for r in got) == sorted(
        (v, None if k is None else k.encode(), p, tuple(h or ())) for k, v, _, p, h in rows
    )


def test_the_topic_option_wins_over_the_column(spark, live_broker):
    topic = unique_name("opt")
    create_topic(live_broker.bootstrap, topic, 1)
    df = spark.createDataFrame([("elsewhere", f"v{i}") for i in range(20)], "topic string, value string")
    writer(df, live_broker, topic=topic).save()
    assert sorted(r.value for r in consume_all(live_broker.bootstrap, topic, 1, 20)) == sorted(
        f"v{i}".encode() for i in range(20)
    )


def test_a_streaming_copy_counts_its_records_in_the_progress(spark, live_broker, tmp_path: Path):
    source, target = unique_name("from"), unique_name("to")
    create_topic(live_broker.bootstrap, source, 2)
    create_topic(live_broker.bootstrap, target, 2)
    produced = produce(live_broker.bootstrap, source, 400, 2)
    df = (
        spark.readStream.format("backbone")
        .option("kafka.bootstrap.servers", live_broker.bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "150")
        .load()
        .selectExpr("key", "value", "partition")
    )
    query = (
        df.writeStream.format("backbone")
        .option("kafka.bootstrap.servers", live_broker.bootstrap)
        .option("topic", target)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert sum(p["sink"]["numOutputRows"] for p in query.recentProgress) == 400
    got = consume_all(live_broker.bootstrap, target, 2, 400)
    assert sorted((r.partition, r.key or b"", r.value) for r in got) == sorted(
        (r.partition, r.key or b"", r.value) for r in produced
    )


def test_a_refused_record_fails_the_job_with_its_error(spark, live_broker):
    topic = unique_name("small")
    create_topic(live_broker.bootstrap, topic, 1, **{"max.message.bytes": "2000"})
    df = spark.createDataFrame([("x" * 10_000,)], "value string")
    with pytest.raises(Exception, match=r"writing a record failed: .*(TooLarge|too large)"):
        writer(df, live_broker, topic=topic).save()


@pytest.mark.parametrize(
    ("ddl", "options", "message"),
    [
        ("key string", {"topic": "t"}, "the sink needs a 'value' column"),
        ("value string", {}, "'topic' column or the 'topic' option"),
        ("value int", {"topic": "t"}, "column 'value' must be binary or string"),
        ("value string", {"topic": "t", "kafka.acks": "1"}, "option 'kafka.acks' must be 'all'"),
    ],
)
def test_bad_columns_and_options_name_what_is_wrong(spark, live_broker, ddl, options, message):
    df = spark.createDataFrame([], ddl)
    with pytest.raises(Exception, match=message):
        writer(df, live_broker, **options).save()


def write_batches(
    broker: BrokerProcess, columns: Columns, batches: list[pa.RecordBatch], **options: str
) -> int:
    """The sink's task path alone (what each Spark task runs), without a Spark job around it."""
    settings = WriteSettings.parse({"kafka.bootstrap.servers": broker.bootstrap, **options})
    return produce_rows(settings, columns, iter(batches))


def test_rows_without_a_partition_go_where_the_clients_partitioner_sends_them(live_broker):
    topic = unique_name("route")
    create_topic(live_broker.bootstrap, topic, 4)
    keys = [None if i % 3 == 0 else b"key-%d" % (i % 17) for i in range(600)]
    values = [b"v%d" % i for i in range(600)]
    batch = pa.record_batch([pa.array(keys, pa.binary()), pa.array(values, pa.binary())], ["key", "value"])
    columns = Columns(key=True, topic=False, partition=False, headers=False)
    assert write_batches(live_broker, columns, [batch], topic=topic) == 600
    got = consume_all(live_broker.bootstrap, topic, 4, 600)
    assert sorted(r.value for r in got) == sorted(values)
    for record in got:
        if record.key is not None:
            assert record.partition == partition_for_key(record.key, 4)
    by_partition: dict[int, list[int]] = {}
    for record in got:
        by_partition.setdefault(record.partition, []).append(int(record.value[1:]))
    assert all(seen == sorted(seen) for seen in by_partition.values())  # each partition in row order


def test_rows_without_key_or_partition_move_to_another_partition_after_a_batch(live_broker):
    topic = unique_name("sticky")
    create_topic(live_broker.bootstrap, topic, 3)
    values = [b"%05d" % i + b"x" * 95 for i in range(2_000)]  # 100 bytes each: 200 KB in all
    batches = [
        pa.record_batch([pa.array(values[i : i + 500], pa.binary())], ["value"]) for i in range(0, 2_000, 500)
    ]
    columns = Columns(key=False, topic=False, partition=False, headers=False)
    assert write_batches(live_broker, columns, batches, topic=topic, **{"kafka.batch.size": "10000"}) == 2_000
    got = consume_all(live_broker.bootstrap, topic, 3, 2_000)
    assert sorted(r.value for r in got) == values
    # About 100 records (10,000 bytes) stick to one partition, then the next run goes to another one.
    partitions = [r.partition for r in sorted(got, key=lambda r: r.value)]
    runs = [len(list(run)) for _, run in itertools.groupby(partitions)]
    assert len(runs) >= 10
    assert max(runs) <= 200
    assert len(set(partitions)) == 3


def test_a_row_for_a_partition_the_topic_lacks_fails_the_task(live_broker):
    topic = unique_name("nopart")
    create_topic(live_broker.bootstrap, topic, 1)
    batch = pa.record_batch(
        [pa.array([b"v"], pa.binary()), pa.array([5], pa.int32())], ["value", "partition"]
    )
    columns = Columns(key=False, topic=False, partition=True, headers=False)
    # The producer waits up to max.block.ms for the partition to appear (the topic may have just grown).
    with pytest.raises(RecordWriteError, match="has no partition 5"):
        write_batches(live_broker, columns, [batch], topic=topic, **{"kafka.max.block.ms": "2000"})


def test_a_topic_with_smaller_messages_than_the_sinks_batches_needs_a_smaller_batch_size(live_broker):
    topic = unique_name("smallbatch")
    create_topic(live_broker.bootstrap, topic, 1, **{"max.message.bytes": "50000"})
    batch = pa.record_batch([pa.array([b"x" * 200] * 1_000, pa.binary())], ["value"])
    columns = Columns(key=False, topic=False, partition=False, headers=False)
    with pytest.raises(RecordWriteError, match=r"TooLarge|too large"):
        write_batches(live_broker, columns, [batch], topic=topic)
    assert write_batches(live_broker, columns, [batch], topic=topic, **{"kafka.batch.size": "16384"}) == 1_000
