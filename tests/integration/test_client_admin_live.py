"""Our Admin client against real brokers: topics, partitions, configs, cluster, records and offsets."""

from __future__ import annotations

import pytest

from backbone.client import (
    Admin,
    ConfigResource,
    ConfigResourceType,
    NewTopic,
    OffsetAndTimestamp,
    Producer,
    TopicPartition,
)
from backbone.protocol.errors import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from tests.helpers.names import unique_name

pytestmark = pytest.mark.integration


@pytest.fixture
def two_brokers(broker_factory):
    return [broker_factory(1), broker_factory(2)]


def test_topics_are_created_described_grown_and_deleted(two_brokers, wait_for) -> None:
    name, other = unique_name("admin"), unique_name("admin")
    with Admin(bootstrap_servers=two_brokers[0].bootstrap) as admin:
        assert admin.create_topics([NewTopic(name, 4, 2), NewTopic(other, 1, 1)]) == {name: None, other: None}
        assert {name, other} <= admin.list_topics()
        described = admin.describe_topics([name])[name]
        assert [p.partition for p in described.partitions] == [0, 1, 2, 3]
        for partition in described.partitions:
            assert sorted(partition.replicas) == [1, 2]
            assert partition.leader in partition.replicas
            assert set(partition.isr) <= {1, 2} and partition.leader in partition.isr
        admin.create_partitions({name: 6})
        assert len(admin.describe_topics([name])[name].partitions) == 6
        assert admin.delete_topics([other]) == {other: None}
        wait_for(lambda: other not in admin.list_topics(), timeout=20, what=f"{other} deleted")


def test_errors_come_back_per_topic_as_their_classes(two_brokers) -> None:
    name = unique_name("admin")
    with Admin(bootstrap_servers=two_brokers[0].bootstrap) as admin:
        admin.create_topics([NewTopic(name, 1, 1)])
        with pytest.raises(TopicAlreadyExistsError) as caught:
            admin.create_topics([NewTopic(name, 1, 1), NewTopic(unique_name("wide"), 1, 5)])
        errors = caught.value.errors  # type: ignore[attr-defined]
        assert isinstance(errors[name], TopicAlreadyExistsError)
        assert any(isinstance(e, InvalidReplicationFactorError) for e in errors.values())
        with pytest.raises(InvalidPartitionsError):
            admin.create_partitions({name: 1})
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.delete_topics([unique_name("missing")])
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.describe_topics([unique_name("missing")])


def test_validate_only_creates_nothing(broker) -> None:
    name = unique_name("dry")
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        admin.create_topics([NewTopic(name, 2, 1)], validate_only=True)
        assert name not in admin.list_topics()


def test_topic_configs_are_described_and_altered(broker) -> None:
    name = unique_name("cfg")
    resource = ConfigResource(ConfigResourceType.TOPIC, name)
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        admin.create_topics([NewTopic(name, 1, 1, configs={"retention.ms": "3600000"})])
        configs = admin.describe_configs([resource])[resource]
        assert configs["retention.ms"].value == "3600000"
        assert not configs["retention.ms"].read_only
        admin.alter_configs({resource: {"retention.ms": None, "cleanup.policy": "compact"}})
        configs = admin.describe_configs([resource])[resource]
        assert configs["cleanup.policy"].value == "compact"
        assert configs["retention.ms"].value != "3600000", "deleted overrides fall back to the default"


def test_broker_configs_are_described(broker) -> None:
    resource = ConfigResource(ConfigResourceType.BROKER, "1")
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        configs = admin.describe_configs([resource])[resource]
    assert configs["broker.id"].value == "1"


def test_describe_cluster(two_brokers) -> None:
    with Admin(bootstrap_servers=two_brokers[1].bootstrap) as admin:
        cluster = admin.describe_cluster()
    assert cluster.cluster_id
    assert cluster.controller_id in (1, 2)
    assert [(b.node_id, b.port) for b in cluster.brokers] == [(b.broker_id, b.port) for b in two_brokers]


def test_records_are_deleted_and_offsets_listed(broker) -> None:
    name = unique_name("offsets")
    tp = TopicPartition(name, 0)
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        admin.create_topics([NewTopic(name, 1, 1)])
        with Producer(bootstrap_servers=broker.bootstrap, linger_ms=0) as producer:
            for i in range(20):
                producer.send(name, b"v", partition=0, timestamp_ms=1_000_000 + i).get(timeout=30)
        assert admin.list_offsets({tp: "earliest"})[tp].offset == 0
        assert admin.list_offsets({tp: "latest"})[tp].offset == 20
        assert admin.list_offsets({tp: 1_000_007}) == {tp: OffsetAndTimestamp(7, 1_000_007)}
        assert admin.list_offsets({tp: "max_timestamp"})[tp].offset == 19
        assert admin.delete_records({tp: 12}) == {tp: 12}
        assert admin.list_offsets({tp: "earliest"})[tp].offset == 12
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.delete_records({TopicPartition(name, 5): 1})
