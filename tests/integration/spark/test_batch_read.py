"""Batch reads with real Spark against a live broker: exactly the produced records, for every way of
naming what to read, and bad options failing at planning time with the option named."""

from __future__ import annotations

import time
from typing import Any

import pytest
from spark_support import create_topic, in_order, produce, read_rows

from backbone.client import Admin, TopicPartition
from backbone.dev.processes import BrokerProcess
from tests.helpers.names import unique_name


def reader(spark: Any, broker: BrokerProcess, **options: str) -> Any:
    builder = spark.read.format("backbone").option("kafka.bootstrap.servers", broker.bootstrap)
    for name, value in options.items():
        builder = builder.option(name, value)
    return builder.load()


@pytest.fixture(scope="module")
def topic_with_records(live_broker: BrokerProcess) -> tuple[str, list]:
    topic = unique_name("whole")
    create_topic(live_broker.bootstrap, topic, 3)
    base = int(time.time() * 1000) - 100_000
    return topic, produce(live_broker.bootstrap, topic, 300, 3, timestamp_of=lambda i: base + i * 10)


def test_a_whole_topic_reads_back_exactly_with_headers(
    spark: Any, live_broker: BrokerProcess, topic_with_records
):
    topic, produced = topic_with_records
    df = reader(spark, live_broker, subscribe=topic, includeHeaders="true")
    assert [f.name for f in df.schema.fields] == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
    ]
    assert read_rows(df) == in_order(produced)


def test_without_include_headers_there_is_no_headers_column(spark, live_broker, topic_with_records):
    topic, produced = topic_with_records
    df = reader(spark, live_broker, subscribe=topic)
    assert "headers" not in df.columns
    assert df.count() == len(produced)


def test_offset_ranges_by_json(spark, live_broker, topic_with_records):
    topic, produced = topic_with_records
    df = reader(
        spark,
        live_broker,
        subscribe=topic,
        includeHeaders="true",
        startingOffsets=f'{{"{topic}":{{"0":10,"1":-2}}}}',
        endingOffsets=f'{{"{topic}":{{"0":20,"1":5,"2":-1}}}}',
    )
    expected = [
        r
        for r in produced
        if (r.partition == 0 and 10 <= r.offset < 20)
        or (r.partition == 1 and r.offset < 5)
        or r.partition == 2
    ]
    assert read_rows(df) == in_order(expected)


def test_timestamp_ranges_overall_and_per_partition(spark, live_broker, topic_with_records):
    topic, produced = topic_with_records
    stamps = sorted(r.timestamp_ms for r in produced)
    low, high = stamps[50], stamps[200]
    df = reader(spark, live_broker, subscribe=topic, startingTimestamp=str(low), endingTimestamp=str(high))
    got = {(r.partition, r.offset) for r in read_rows(df)}
    assert got == {(r.partition, r.offset) for r in produced if low <= r.timestamp_ms < high}

    per_partition = f'{{"{topic}":{{"0":{low},"1":{high},"2":{low}}}}}'
    df = reader(spark, live_broker, subscribe=topic, startingOffsetsByTimestamp=per_partition)
    got = {(r.partition, r.offset) for r in read_rows(df)}
    bounds = {0: low, 1: high, 2: low}
    assert got == {(r.partition, r.offset) for r in produced if r.timestamp_ms >= bounds[r.partition]}


def test_a_pattern_reads_every_matching_topic(spark, live_broker):
    prefix = unique_name("pat")
    produced = []
    for name in ("a", "b"):
        create_topic(live_broker.bootstrap, f"{prefix}-{name}", 2)
        produced += produce(live_broker.bootstrap, f"{prefix}-{name}", 40, 2)
    create_topic(live_broker.bootstrap, f"other-{prefix}", 1)
    produce(live_broker.bootstrap, f"other-{prefix}", 5, 1)
    df = reader(spark, live_broker, subscribePattern=f"{prefix}-.*", includeHeaders="true")
    assert read_rows(df) == in_order(produced)


def test_assign_reads_only_the_named_partitions(spark, live_broker, topic_with_records):
    topic, produced = topic_with_records
    df = reader(spark, live_broker, assign=f'{{"{topic}":[0,2]}}', includeHeaders="true")
    assert read_rows(df) == in_order([r for r in produced if r.partition in (0, 2)])


def test_a_big_partition_is_split_into_several_tasks(spark, live_broker):
    topic = unique_name("split")
    create_topic(live_broker.bootstrap, topic, 1)
    produced = produce(live_broker.bootstrap, topic, 1000, 1, linger_ms=0, batch_size=2000)
    df = reader(spark, live_broker, subscribe=topic, minPartitions="4", includeHeaders="true")
    assert df.rdd.getNumPartitions() == 4
    assert read_rows(df) == in_order(produced)
    df = reader(spark, live_broker, subscribe=topic, maxRecordsPerPartition="300")
    assert df.rdd.getNumPartitions() == 4
    assert df.count() == 1000


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_every_compression_codec(spark, live_broker, codec):
    topic = unique_name(codec)
    create_topic(live_broker.bootstrap, topic, 2)
    produced = produce(live_broker.bootstrap, topic, 200, 2, compression_type=codec)
    assert read_rows(reader(spark, live_broker, subscribe=topic, includeHeaders="true")) == in_order(produced)


def test_log_append_time_topics_report_the_brokers_timestamps(spark, live_broker):
    topic = unique_name("append")
    create_topic(live_broker.bootstrap, topic, 1, **{"message.timestamp.type": "LogAppendTime"})
    produced = produce(
        live_broker.bootstrap, topic, 50, 1, log_append_time=True, timestamp_of=lambda i: 1000 + i
    )
    rows = read_rows(reader(spark, live_broker, subscribe=topic, includeHeaders="true"))
    assert rows == in_order(produced)
    assert all(r.timestamp_type == 1 and r.timestamp_ms > 1_000_000 for r in rows)


def test_a_retention_gap_fails_naming_the_range_or_is_skipped(spark, live_broker):
    topic = unique_name("gap")
    create_topic(live_broker.bootstrap, topic, 1)
    produced = produce(live_broker.bootstrap, topic, 100, 1, linger_ms=0, batch_size=300)
    with Admin(bootstrap_servers=live_broker.bootstrap) as admin:
        admin.delete_records({TopicPartition(topic, 0): 40})
    from_zero = f'{{"{topic}":{{"0":0}}}}'
    with pytest.raises(Exception, match=rf"{topic}-0 at offsets 0 to 39 were deleted"):
        reader(spark, live_broker, subscribe=topic, startingOffsets=from_zero).collect()
    df = reader(spark, live_broker, subscribe=topic, startingOffsets=from_zero, failOnDataLoss="false")
    assert sorted(r.offset for r in read_rows(df)) == [r.offset for r in produced if r.offset >= 40]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"subscribe": "no-such-topic-here"},
            "option 'subscribe': topic 'no-such-topic-here' does not exist",
        ),
        ({"subscribe": "x", "startingOffsets": '{"x":{"0":'}, "option 'startingOffsets' is not valid JSON"),
        ({"subscribe": "x", "assign": '{"x":[0]}'}, "give exactly one of the options 'subscribe'"),
        ({"subscribe": "x", "startingOffset": "earliest"}, "did you mean 'startingOffsets'"),
        (
            {
                "subscribe": "x",
                "kafka.bootstrap.servers": "127.0.0.1:1",
                "kafka.request.timeout.ms": "2000",
                "kafka.default.api.timeout.ms": "3000",
            },
            "option 'kafka.bootstrap.servers'",
        ),
    ],
)
def test_bad_options_fail_at_planning_naming_the_option(spark, live_broker, options, message):
    builder = spark.read.format("backbone").option("kafka.bootstrap.servers", live_broker.bootstrap)
    for name, value in options.items():
        builder = builder.option(name, value)
    started = spark.sparkContext.statusTracker().getJobIdsForGroup()
    with pytest.raises(Exception, match=message):
        builder.load().collect()
    assert spark.sparkContext.statusTracker().getJobIdsForGroup() == started, "no task should have run"
