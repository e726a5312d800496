"""The Spark data source's option parsing and range arithmetic, without Spark or a cluster."""

from __future__ import annotations

import pytest

from backbone.client import TopicPartition
from backbone_spark.options import EARLIEST, OptionError, ReadSettings, WriteSettings
from backbone_spark.planning import OffsetRange, split_ranges

pytest.importorskip("pyspark")
from backbone_spark.streaming import prorate

pytestmark = pytest.mark.unit

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def test_options_are_case_insensitive_and_kafka_ones_go_to_the_client():
    settings = ReadSettings.parse(
        {**BOOT, "subscribe": "a,b", "startingoffsets": '{"a":{"0":5,"1":-2}}', "kafka.fetch.max.bytes": "9"},
        streaming=False,
    )
    assert settings.topics == ("a", "b")
    assert settings.starting.offsets == {TopicPartition("a", 0): 5, TopicPartition("a", 1): EARLIEST}
    assert settings.client == {"bootstrap.servers": "127.0.0.1:9092", "fetch.max.bytes": "9"}


def test_timestamps_win_over_offsets():
    settings = ReadSettings.parse(
        {**BOOT, "subscribe": "a", "startingOffsets": "latest", "startingTimestamp": "1000"}, streaming=False
    )
    assert (settings.starting.kind, settings.starting.timestamp) == ("timestamp", 1000)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "a"}, "'kafka.bootstrap.servers'"),
        ({**BOOT}, "exactly one of the options"),
        ({**BOOT, "subscribePattern": "("}, "'subscribePattern' is not a valid regular expression"),
        ({**BOOT, "assign": '{"a":"0"}'}, "option 'assign'"),
        ({**BOOT, "subscribe": "a", "endingOffsets": "earliest"}, "'endingOffsets' cannot be 'earliest'"),
        ({**BOOT, "subscribe": "a", "startingOffsets": '{"a":{"0":-3}}'}, "a-0 has offset -3"),
        ({**BOOT, "subscribe": "a", "minPartitions": "x"}, "'minPartitions' must be an integer"),
        ({**BOOT, "subscribe": "a", "maxTriggerDelay": "soon"}, "'maxTriggerDelay' must be a duration"),
        ({**BOOT, "subscribe": "a", "kafka.auto.offset.reset": "earliest"}, "kafka.auto.offset.reset"),
        ({**BOOT, "assign": '{"a":[0]}', "startingOffsets": '{"b":{"0":1}}'}, "not in 'assign': b-0"),
    ],
)
def test_bad_read_options_name_the_option(options, message):
    with pytest.raises(OptionError, match=message):
        ReadSettings.parse(options, streaming=False)


def test_the_sink_always_writes_with_acks_all_and_idempotence():
    settings = WriteSettings.parse({**BOOT, "topic": "t"})
    assert (settings.client["acks"], settings.client["enable.idempotence"]) == ("all", "true")


def test_the_sink_writes_256_kib_batches_unless_told_otherwise():
    assert WriteSettings.parse({**BOOT, "topic": "t"}).client["batch.size"] == 262_144
    assert (
        WriteSettings.parse({**BOOT, "topic": "t", "kafka.batch.size": "1000"}).client["batch.size"] == "1000"
    )


def test_min_partitions_splits_in_proportion_and_max_records_caps_each():
    ranges = [OffsetRange("t", 0, 0, 900), OffsetRange("t", 1, 100, 200), OffsetRange("t", 2, 5, 5)]
    split = split_ranges(ranges, 5, None)
    assert [(r.partition, r.start, r.until) for r in split] == [
        (0, 0, 225),
        (0, 225, 450),
        (0, 450, 675),
        (0, 675, 900),
        (1, 100, 200),
    ]
    assert max(r.size for r in split_ranges(ranges, None, 100)) == 100
    assert sum(r.size for r in split_ranges(ranges, None, 7)) == 1000


def test_prorate_shares_a_limit_by_backlog_and_never_exceeds_it():
    available = {TopicPartition("t", 0): 900, TopicPartition("t", 1): 100, TopicPartition("t", 2): 0}
    shares = prorate(available, 101)
    assert sum(shares.values()) == 101
    assert shares[TopicPartition("t", 0)] >= 90 and shares[TopicPartition("t", 2)] == 0
    assert prorate(available, 5000) == available


def test_security_options_go_straight_to_the_client():
    security = {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.username": "spark",
        "kafka.sasl.password": "secret",
        "kafka.ssl.cafile": "/ca.pem",
    }
    read = ReadSettings.parse({**BOOT, "subscribe": "a", **security}, streaming=False)
    written = WriteSettings.parse({**BOOT, "topic": "a", **security})
    expected = {"bootstrap.servers": "127.0.0.1:9092", **{k[len("kafka.") :]: v for k, v in security.items()}}
    assert read.client == expected
    assert written.client.items() >= expected.items()
