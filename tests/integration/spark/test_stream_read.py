"""Streaming reads with real Spark against a live broker: admission control, triggers, partitions and
topics appearing while a query runs, and the query's progress in its Backbone consumer group."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from spark_support import (
    checkpoint_offsets,
    create_topic,
    group_offsets,
    in_order,
    produce,
    read_rows,
)

from backbone.client import Admin
from backbone.dev.processes import BrokerProcess
from tests.helpers.names import unique_name


def stream(spark: Any, broker: BrokerProcess, **options: str) -> Any:
    builder = spark.readStream.format("backbone").option("kafka.bootstrap.servers", broker.bootstrap)
    for name, value in options.items():
        builder = builder.option(name, value)
    return builder.load()


def batch_sizes(query: Any) -> list[int]:
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def test_available_now_reads_all_in_capped_batches_and_leaves_no_lag(
    spark, live_broker, tmp_path: Path, wait_for
):
    topic = unique_name("now")
    create_topic(live_broker.bootstrap, topic, 2)
    produced = produce(live_broker.bootstrap, topic, 500, 2)
    group = f"spark-test-{uuid.uuid4().hex[:6]}"
    df = stream(
        spark,
        live_broker,
        subscribe=topic,
        startingOffsets="earliest",
        maxOffsetsPerTrigger="120",
        includeHeaders="true",
        **{"kafka.group.id": group},
    )
    query = (
        df.writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    sizes = batch_sizes(query)
    assert sum(sizes) == 500 and max(sizes) <= 120 and len(sizes) >= 5
    assert read_rows(spark.read.parquet(str(tmp_path / "out"))) == in_order(produced)
    ends = {"0": 250, "1": 250}
    assert checkpoint_offsets(tmp_path / "checkpoint") == {topic: ends}
    wait_for(lambda: group_offsets(live_broker.bootstrap, group) == {topic: ends}, 30, what="group lag 0")
    with Admin(bootstrap_servers=live_broker.bootstrap) as admin:
        lag = admin.consumer_group_lag([group])[group]
    assert [row.lag for row in lag] == [0, 0]


def test_trigger_once_takes_everything_in_one_batch(spark, live_broker, tmp_path: Path, wait_for):
    topic = unique_name("once")
    create_topic(live_broker.bootstrap, topic, 2)
    produce(live_broker.bootstrap, topic, 100, 2)
    df = stream(spark, live_broker, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="10")
    query = (
        df.writeStream.format("memory")
        .queryName(f"once_{uuid.uuid4().hex[:6]}")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(once=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert batch_sizes(query) == [100]


def test_min_offsets_per_trigger_waits_for_enough_records_or_the_delay(
    spark, live_broker, tmp_path: Path, wait_for
):
    topic = unique_name("min")
    create_topic(live_broker.bootstrap, topic, 1)
    name = f"min_{uuid.uuid4().hex[:6]}"
    df = stream(spark, live_broker, subscribe=topic, minOffsetsPerTrigger="50", maxTriggerDelay="1h")
    query = (
        df.writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        query.processAllAvailable()
        produce(live_broker.bootstrap, topic, 30, 1)
        query.processAllAvailable()
        assert spark.sql(f"select count(*) from {name}").first()[0] == 0, "30 records are below the minimum"
        produce(live_broker.bootstrap, topic, 30, 1)
        query.processAllAvailable()
        assert spark.sql(f"select count(*) from {name}").first()[0] == 60
    finally:
        query.stop()

    delayed = f"delay_{uuid.uuid4().hex[:6]}"
    df = stream(spark, live_broker, subscribe=topic, minOffsetsPerTrigger="1000", maxTriggerDelay="2s")
    query = (
        df.writeStream.format("memory")
        .queryName(delayed)
        .option("checkpointLocation", str(tmp_path / "checkpoint2"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        query.processAllAvailable()  # the query has found where it starts (the end)
        produce(live_broker.bootstrap, topic, 10, 1)
        wait_for(
            lambda: query.exception() or spark.sql(f"select count(*) from {delayed}").first()[0] == 10,
            60,
            what="the delayed batch",
        )
        assert query.exception() is None, query.exception()
    finally:
        query.stop()


def test_new_partitions_and_new_matching_topics_are_picked_up(spark, live_broker, tmp_path: Path, wait_for):
    prefix = unique_name("grow")
    create_topic(live_broker.bootstrap, f"{prefix}-a", 1)
    name = f"grow_{uuid.uuid4().hex[:6]}"
    df = stream(spark, live_broker, subscribePattern=f"{prefix}-.*", startingOffsets="earliest")
    query = (
        df.writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        query.processAllAvailable()
        produced = produce(live_broker.bootstrap, f"{prefix}-a", 20, 1)
        with Admin(bootstrap_servers=live_broker.bootstrap) as admin:
            admin.create_partitions({f"{prefix}-a": 3})
        create_topic(live_broker.bootstrap, f"{prefix}-b", 2)
        produced += produce(live_broker.bootstrap, f"{prefix}-a", 30, 3)
        produced += produce(live_broker.bootstrap, f"{prefix}-b", 20, 2)

        def rows() -> list:
            return read_rows(spark.sql(f"select * from {name}"))

        wait_for(lambda: len(rows()) >= len(produced), 90, what="every record in the sink")
        assert [r[:7] for r in rows()] == [r[:7] for r in in_order(produced)]
    finally:
        query.stop()
