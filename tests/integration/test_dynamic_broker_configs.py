"""Dynamic broker configs on real brokers and a real ZooKeeper, driven by confluent-kafka's AdminClient:
a cluster-wide default reaches every broker and the open logs of topics without their own override, a
broker's own value wins over the default, keys Kafka cannot change at run time are refused, and a
restarted broker applies what is stored; and `backbone configs` shows and changes them."""

from __future__ import annotations

from pathlib import Path

import pytest
from broker_fixtures import wait_until_brokers_see_each_other
from cli_support import run, run_ok
from kio.schema.describe_configs.v4 import request as describe_v4

from backbone.client import Admin, ConfigResource, ConfigResourceType
from tests.helpers.names import unique_name
from tests.helpers.wire import RawConnection

confluent_kafka = pytest.importorskip("confluent_kafka")
confluent_admin = pytest.importorskip("confluent_kafka.admin")

pytestmark = pytest.mark.integration

TOPIC, BROKER = 2, 4
DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG = 2, 3
INVALID_REQUEST = 42
FIRST_SEGMENT = "00000000000000000000.log"


def admin_client(bootstrap: str):
    return confluent_admin.AdminClient({"bootstrap.servers": bootstrap})


def set_broker_configs(admin, name: str, **values: str) -> None:
    """IncrementalAlterConfigs SET on one broker's resource (librdkafka takes broker ids only)."""
    entries = [
        confluent_admin.ConfigEntry(
            key.replace("_", "."), value, incremental_operation=confluent_admin.AlterConfigOpType.SET
        )
        for key, value in values.items()
    ]
    resource = confluent_admin.ConfigResource("BROKER", name, incremental_configs=entries)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


def broker_entry(admin, broker_id: int, key: str):
    resource = confluent_admin.ConfigResource("BROKER", str(broker_id))
    (future,) = admin.describe_configs([resource]).values()
    return future.result(timeout=30)[key]


def topic_entry_at(broker, topic: str, key: str) -> tuple[str, int]:
    """(value, config_source) of a topic key as this broker describes it (from its applied defaults)."""
    request = describe_v4.DescribeConfigsRequest(
        resources=(
            describe_v4.DescribeConfigsResource(
                resource_type=TOPIC, resource_name=topic, configuration_keys=(key,)
            ),
        ),
        include_synonyms=True,
        include_documentation=False,
    )
    with RawConnection(broker.bootstrap) as raw:
        (result,) = raw.request(request).results
    (entry,) = result.configs
    return entry.value, int(entry.config_source)


def segment_names(broker, topic: str) -> list[str]:
    return sorted(p.name for p in (Path(broker.properties["log.dirs"]) / f"{topic}-0").glob("*.log"))


def test_a_cluster_default_reaches_every_broker_and_a_brokers_own_value_wins(
    broker_factory, wait_for
) -> None:
    brokers = [broker_factory(i, log_retention_check_interval_ms=200) for i in (1, 2)]
    wait_until_brokers_see_each_other(brokers)
    admin = admin_client(brokers[0].bootstrap)
    topic = unique_name("inherits")
    created = admin.create_topics(
        [confluent_admin.NewTopic(topic, 1, 2, config={"segment.bytes": "1024"})], operation_timeout=30
    )
    created[topic].result(timeout=30)
    producer = confluent_kafka.Producer({"bootstrap.servers": brokers[0].bootstrap, "linger.ms": 0})
    for i in range(30):
        producer.produce(topic, b"v" * 100, key=f"k{i}".encode(), partition=0)
        producer.flush(30)
    wait_for(
        lambda: all(len(segment_names(b, topic)) > 3 for b in brokers), timeout=30, what="rolled segments"
    )
    assert all(FIRST_SEGMENT in segment_names(b, topic) for b in brokers), "7 days' retention keeps them"

    # librdkafka names brokers by id only: the cluster-wide default goes through Backbone's own Admin.
    with Admin(bootstrap_servers=brokers[1].bootstrap) as own_admin:
        own_admin.alter_configs({ConfigResource(ConfigResourceType.BROKER, ""): {"log.retention.ms": "1000"}})

    entry = broker_entry(admin, 1, "log.retention.ms")
    assert (entry.value, entry.source) == ("1000", DYNAMIC_DEFAULT_BROKER_CONFIG)
    for broker in brokers:
        wait_for(
            lambda b=broker: (
                topic_entry_at(b, topic, "retention.ms") == ("1000", DYNAMIC_DEFAULT_BROKER_CONFIG)
            ),
            timeout=20,
            what=f"broker {broker.broker_id} to apply the default",
        )
        # The open log follows it: closed segments older than a second go.
        wait_for(
            lambda b=broker: FIRST_SEGMENT not in segment_names(b, topic),
            timeout=20,
            what=f"broker {broker.broker_id} to delete segments past the new retention",
        )

    set_broker_configs(admin, "2", log_retention_ms="3600000")
    entry = broker_entry(admin, 2, "log.retention.ms")
    assert (entry.value, entry.source) == ("3600000", DYNAMIC_BROKER_CONFIG)
    wait_for(
        lambda: topic_entry_at(brokers[1], topic, "retention.ms") == ("3600000", DYNAMIC_BROKER_CONFIG),
        timeout=20,
        what="broker 2 to apply its own value",
    )
    assert topic_entry_at(brokers[0], topic, "retention.ms") == ("1000", DYNAMIC_DEFAULT_BROKER_CONFIG)


def test_keys_kafka_cannot_change_at_run_time_are_refused(broker) -> None:
    admin = admin_client(broker.bootstrap)
    for key, value in (("broker.id", "7"), ("zookeeper.connect", "127.0.0.1:1")):
        with pytest.raises(confluent_kafka.KafkaException) as refused:
            set_broker_configs(admin, "1", **{key: value})
        error = refused.value.args[0]
        assert error.code() == INVALID_REQUEST
        assert f"Cannot update these configs dynamically: {key}" in error.str()
    assert broker_entry(admin, 1, "broker.id").value == "1"


def test_a_restarted_broker_keeps_its_dynamic_configs(broker_factory) -> None:
    broker = broker_factory(1)
    admin = admin_client(broker.bootstrap)
    topic = unique_name("restarted")
    admin.create_topics([confluent_admin.NewTopic(topic, 1, 1)], operation_timeout=30)[topic].result(
        timeout=30
    )
    set_broker_configs(admin, "1", log_retention_ms="123456", background_threads="9")
    broker.stop(timeout=15)
    broker.start()
    # A topic's describe shows what the broker applied when it started.
    assert topic_entry_at(broker, topic, "retention.ms") == ("123456", DYNAMIC_BROKER_CONFIG)
    restarted = admin_client(broker.bootstrap)
    entry = broker_entry(restarted, 1, "background.threads")
    assert (entry.value, entry.source) == ("9", DYNAMIC_BROKER_CONFIG)


def test_the_configs_command_describes_and_alters_broker_configs(broker) -> None:
    server = ("--bootstrap-server", broker.bootstrap)
    done = run_ok("configs", "alter", "--broker-defaults", *server, "--config", "log.retention.ms=5000")
    assert done.decode() == "altered the cluster-wide defaults: set log.retention.ms=5000\n"
    run_ok("configs", "alter", "--broker", "1", *server, "--config", "num.io.threads=4")
    described = run_ok("configs", "describe", "--broker", "1", *server).decode().splitlines()
    assert described == [
        "log.retention.ms=5000 (DYNAMIC_DEFAULT_BROKER_CONFIG)",
        "num.io.threads=4 (DYNAMIC_BROKER_CONFIG)",
    ]
    run_ok("configs", "alter", "--broker", "1", *server, "--delete-config", "num.io.threads")
    defaults = run_ok("configs", "describe", "--broker-defaults", *server).decode()
    assert defaults == "log.retention.ms=5000 (DYNAMIC_DEFAULT_BROKER_CONFIG)\n"
    refused = run("configs", "alter", "--broker", "1", *server, "--config", "broker.id=2")
    assert refused.returncode == 1
    assert "Cannot update these configs dynamically: broker.id" in refused.stderr.decode()
