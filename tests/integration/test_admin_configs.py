"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs, driven by kafka-python's KafkaAdminClient,
and the proof that a changed topic config reaches the broker's open logs. kafka-python does not report a
DescribeConfigs resource's error code, and fills in the other overrides before an AlterConfigs (so its
replace-everything semantics never shows); those two are checked with raw requests."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import AlterConfigOp, ConfigResource
from kio.schema.alter_configs.v2 import request as alter_v2
from kio.schema.describe_configs.v4 import request as describe_v4

from backbone.log.config import topic_property_names
from tests.helpers.names import unique_name
from tests.helpers.wire import RawConnection

pytestmark = pytest.mark.integration

TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC_EXCEPTION, INVALID_CONFIG, INVALID_REQUEST = 3, 17, 40, 42


def open_admin(bootstrap: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)


def topic_configs(admin: KafkaAdminClient, topic: str, **options: object) -> dict[str, dict]:
    described = admin.describe_configs([ConfigResource("TOPIC", topic)], config_filter="all", **options)
    return described["topic"][topic]


def error_number(answer: str) -> int:
    """The Kafka error code in one of kafka-python's alter_configs answers ("OK" or "[Error N] ...")."""
    if answer == "OK":
        return 0
    found = re.match(r"\[Error (-?\d+)\]", answer)
    assert found, answer
    return int(found.group(1))


def values(configs: dict[str, dict]) -> dict[str, str]:
    return {name: entry["value"] for name, entry in configs.items()}


def segment_files(broker, topic: str) -> list[Path]:
    return sorted((Path(broker.properties["log.dirs"]) / f"{topic}-0").glob("*.log"))


def describe_raw(bootstrap: str, *resources: tuple[int, str]) -> list[tuple[int, str, int, int]]:
    """(resource_type, resource_name, error_code, number of configs) per resource, from a raw v4 request."""
    request = describe_v4.DescribeConfigsRequest(
        resources=tuple(
            describe_v4.DescribeConfigsResource(
                resource_type=kind, resource_name=name, configuration_keys=None
            )
            for kind, name in resources
        ),
        include_synonyms=False,
        include_documentation=False,
    )
    with RawConnection(bootstrap) as raw:
        response = raw.request(request)
    return [(r.resource_type, r.resource_name, int(r.error_code), len(r.configs)) for r in response.results]


# -- DescribeConfigs -------------------------------------------------------------------------------------


def test_describe_topic_configs_values_sources_and_synonyms(broker_factory) -> None:
    broker = broker_factory(1, log_segment_bytes=1048576)
    topic = unique_name("described")
    with open_admin(broker.bootstrap) as admin:
        admin.create_topics(
            {topic: {"num_partitions": 1, "replication_factor": 1, "configs": {"retention.ms": "60000"}}}
        )
        configs = topic_configs(admin, topic, include_synonyms=True)
        modified = admin.describe_configs([ConfigResource("TOPIC", topic)])["topic"][topic]
        chosen = admin.describe_configs(
            [ConfigResource("TOPIC", topic, ["retention.ms", "cleanup.policy"])], config_filter="all"
        )["topic"][topic]
    expected_keys = topic_property_names() | {"min.insync.replicas", "unclean.leader.election.enable"}
    assert expected_keys <= set(configs)
    retention = configs["retention.ms"]
    assert (retention["value"], retention["config_source"]) == ("60000", "DYNAMIC_TOPIC_CONFIG")
    assert [(s["name"], s["value"], s["source"]) for s in retention["synonyms"]] == [
        ("retention.ms", "60000", "DYNAMIC_TOPIC_CONFIG"),
        ("log.retention.ms", "604800000", "DEFAULT_CONFIG"),
    ]
    # Inherited from the broker's file (log.segment.bytes) versus built-in defaults.
    assert (configs["segment.bytes"]["value"], configs["segment.bytes"]["config_source"]) == (
        "1048576",
        "STATIC_BROKER_CONFIG",
    )
    assert (configs["cleanup.policy"]["value"], configs["cleanup.policy"]["config_source"]) == (
        "delete",
        "DEFAULT_CONFIG",
    )
    assert not any(entry["read_only"] or entry["is_sensitive"] for entry in configs.values())
    assert set(modified) == {"retention.ms"}
    assert set(chosen) == {"retention.ms", "cleanup.policy"}


def test_describe_broker_configs(broker_factory) -> None:
    broker = broker_factory(1, num_partitions=4, log_retention_ms=7200000)
    with open_admin(broker.bootstrap) as admin:
        described = admin.describe_configs([ConfigResource("BROKER", "1")], config_filter="all")
    configs = described["broker"]["1"]
    assert (configs["broker.id"]["value"], configs["broker.id"]["config_source"]) == (
        "1",
        "STATIC_BROKER_CONFIG",
    )
    assert (configs["num.partitions"]["value"], configs["num.partitions"]["config_source"]) == (
        "4",
        "STATIC_BROKER_CONFIG",
    )
    assert configs["log.retention.ms"]["value"] == "7200000"
    assert configs["default.replication.factor"]["config_source"] == "DEFAULT_CONFIG"
    assert configs["listeners"]["value"] == f"PLAINTEXT://{broker.bootstrap}"
    # Only Kafka's dynamic broker configs can change at run time.
    assert (configs["broker.id"]["read_only"], configs["log.retention.ms"]["read_only"]) == (True, False)


def test_describe_configs_errors_per_resource(broker) -> None:
    topic = unique_name("present")
    with open_admin(broker.bootstrap) as admin:
        admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}})
    answers = describe_raw(
        broker.bootstrap,
        (TOPIC, topic),
        (TOPIC, "no-such-topic"),
        (TOPIC, "bad name!"),
        (BROKER, "7"),
        (BROKER, "one"),
        (BROKER_LOGGER, "1"),
    )
    codes = [(kind, name, code) for kind, name, code, _ in answers]
    assert codes == [
        (TOPIC, topic, 0),
        (TOPIC, "no-such-topic", UNKNOWN_TOPIC_OR_PARTITION),
        (TOPIC, "bad name!", INVALID_TOPIC_EXCEPTION),
        (BROKER, "7", INVALID_REQUEST),
        (BROKER, "one", INVALID_REQUEST),
        (BROKER_LOGGER, "1", INVALID_REQUEST),
    ]
    assert answers[0][3] > 0 and all(count == 0 for *_, count in answers[1:])


# -- IncrementalAlterConfigs and AlterConfigs ------------------------------------------------------------


def test_incremental_alter_set_delete_append_subtract(broker) -> None:
    topic = unique_name("incremental")
    with open_admin(broker.bootstrap) as admin:
        admin.create_topics(
            {topic: {"num_partitions": 1, "replication_factor": 1, "configs": {"retention.ms": "1000"}}}
        )
        result = admin.alter_configs(
            [
                ConfigResource(
                    "TOPIC",
                    topic,
                    {
                        "retention.bytes": "5000",
                        "retention.ms": (AlterConfigOp.DELETE, None),
                        "cleanup.policy": (AlterConfigOp.APPEND, "compact"),
                    },
                )
            ],
            incremental=True,
        )
        assert result == {"topic": {topic: "OK"}}
        after = values(admin.describe_configs([ConfigResource("TOPIC", topic)])["topic"][topic])
        assert after == {"retention.bytes": "5000", "cleanup.policy": "delete,compact"}
        result = admin.alter_configs(
            [ConfigResource("TOPIC", topic, {"cleanup.policy": (AlterConfigOp.SUBTRACT, "delete")})],
            incremental=True,
        )
        assert result == {"topic": {topic: "OK"}}
        assert topic_configs(admin, topic)["cleanup.policy"]["value"] == "compact"
        assert topic_configs(admin, topic)["retention.ms"]["config_source"] == "DEFAULT_CONFIG"


def test_incremental_alter_errors_and_validate_only(broker) -> None:
    topic = unique_name("refused")
    with open_admin(broker.bootstrap) as admin:
        admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}})

        def alter(configs: dict, name: str = topic, **options: object) -> str:
            result = admin.alter_configs(
                [ConfigResource("TOPIC", name, configs)], incremental=True, raise_on_unknown=False, **options
            )
            return result["topic"][name]

        unknown_key = alter({"retention.mss": "10"})
        assert error_number(unknown_key) == INVALID_CONFIG and "retention.mss" in unknown_key
        assert error_number(alter({"retention.ms": "-7"})) == INVALID_CONFIG
        assert error_number(alter({"retention.ms": (AlterConfigOp.APPEND, "5")})) == INVALID_CONFIG
        assert error_number(alter({"retention.ms": "10"}, name="no-such-topic")) == UNKNOWN_TOPIC_OR_PARTITION
        assert alter({"retention.ms": "10"}, validate_only=True) == "OK"
        assert topic_configs(admin, topic)["retention.ms"]["config_source"] == "DEFAULT_CONFIG"
        # kafka-python checks keys against DescribeConfigs before sending: every topic key is described.
        assert admin.alter_configs([ConfigResource("TOPIC", topic, {"min.insync.replicas": "1"})]) == {
            "topic": {topic: "OK"}
        }


def test_alter_configs_replaces_the_whole_override_set(broker) -> None:
    topic = unique_name("replaced")
    with open_admin(broker.bootstrap) as admin:
        admin.create_topics(
            {
                topic: {
                    "num_partitions": 1,
                    "replication_factor": 1,
                    "configs": {"retention.ms": "1000", "segment.ms": "5000"},
                }
            }
        )
        # kafka-python's non-incremental path keeps the other overrides itself.
        result = admin.alter_configs(
            [ConfigResource("TOPIC", topic, {"retention.bytes": "4096"})], incremental=False
        )
        assert result == {"topic": {topic: "OK"}}
        kept = values(admin.describe_configs([ConfigResource("TOPIC", topic)])["topic"][topic])
        assert kept == {"retention.ms": "1000", "segment.ms": "5000", "retention.bytes": "4096"}
        request = alter_v2.AlterConfigsRequest(
            resources=(
                alter_v2.AlterConfigsResource(
                    resource_type=TOPIC,
                    resource_name=topic,
                    configs=(alter_v2.AlterableConfig(name="segment.ms", value="9000"),),
                ),
            ),
            validate_only=False,
        )
        with RawConnection(broker.bootstrap) as raw:
            response = raw.request(request)
        assert [int(r.error_code) for r in response.responses] == [0]
        replaced = values(admin.describe_configs([ConfigResource("TOPIC", topic)])["topic"][topic])
        assert replaced == {"segment.ms": "9000"}


def test_a_broker_config_kafka_cannot_change_at_run_time_is_refused(broker) -> None:
    with open_admin(broker.bootstrap) as admin:
        for incremental in (True, False):
            result = admin.alter_configs(
                [ConfigResource("BROKER", "1", {"num.partitions": "3"})],
                incremental=incremental,
                raise_on_unknown=False,
            )
            answer = result["broker"]["1"]
            assert error_number(answer) == INVALID_REQUEST and "num.partitions" in answer
        configs = admin.describe_configs([ConfigResource("BROKER", "1")], config_filter="all")["broker"]["1"]
    assert configs["num.partitions"]["value"] == "1"


# -- the change reaches the logs -------------------------------------------------------------------------


def test_segment_and_retention_changes_reach_the_open_log(broker_factory, wait_for) -> None:
    broker = broker_factory(1, log_retention_check_interval_ms=200)
    topic = unique_name("retained")
    partition = TopicPartition(topic, 0)
    with open_admin(broker.bootstrap) as admin:
        admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}})
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0)
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap)
        try:

            def produce(count: int) -> None:
                for i in range(count):
                    producer.send(topic, b"v" * 100, key=f"k{i}".encode(), partition=0).get(timeout=30)

            produce(20)
            assert len(segment_files(broker, topic)) == 1, "1 GiB segments: everything in one"
            admin.alter_configs([ConfigResource("TOPIC", topic, {"segment.bytes": "1024"})], incremental=True)
            assert topic_configs(admin, topic)["segment.bytes"]["value"] == "1024"

            def rolled_after_one_more() -> bool:
                produce(1)
                return len(segment_files(broker, topic)) > 1

            # The broker follows the change notification; its next appends roll 1 KiB segments.
            wait_for(rolled_after_one_more, timeout=20, what="a segment roll after segment.bytes was lowered")
            produce(60)
            rolled = segment_files(broker, topic)
            assert len(rolled) >= 6
            assert consumer.beginning_offsets([partition])[partition] == 0
            admin.alter_configs(
                [ConfigResource("TOPIC", topic, {"retention.bytes": "2048"})], incremental=True
            )
            assert topic_configs(admin, topic)["retention.bytes"]["value"] == "2048"
            wait_for(
                lambda: len(segment_files(broker, topic)) <= 4,
                timeout=20,
                what="retention.bytes to delete old segments",
            )
            assert consumer.beginning_offsets([partition])[partition] > 0
            end = consumer.end_offsets([partition])[partition]
            assert end >= 81, "retention deletes old records, never the newest"
        finally:
            producer.close(10)
            consumer.close()
