"""DescribeCluster and DeleteRecords, driven by kafka-python's KafkaAdminClient and KafkaConsumer; a raw
connection asks for controller endpoints (DescribeCluster v1), which kafka-python never does."""

from __future__ import annotations

import pytest
from broker_fixtures import wait_until_brokers_see_each_other
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import NotLeaderForPartitionError, OffsetOutOfRangeError
from kio.schema.delete_records.v2 import request as delete_records_v2
from kio.schema.describe_cluster.v1 import request as describe_cluster_v1

from tests.helpers.names import unique_name
from tests.helpers.requests import millis
from tests.helpers.wire import RawConnection

pytestmark = pytest.mark.integration

UNKNOWN_TOPIC_OR_PARTITION = 3
MISMATCHED_ENDPOINT_TYPE = 114
BROKER_ENDPOINT, CONTROLLER_ENDPOINT = 1, 2


def open_admin(bootstrap: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)


def describe_cluster_raw(bootstrap: str, endpoint_type: int) -> object:
    with RawConnection(bootstrap) as raw:
        return raw.request(
            describe_cluster_v1.DescribeClusterRequest(
                include_cluster_authorized_operations=False, endpoint_type=endpoint_type
            )
        )


# -- DescribeCluster -------------------------------------------------------------------------------------


def test_describe_cluster_lists_every_broker_with_rack(broker_factory, wait_for) -> None:
    first = broker_factory(1, broker_rack="rack-a")
    second = broker_factory(2, broker_rack="rack-b")
    expected = [
        {"broker_id": 1, "host": first.host, "port": first.port, "rack": "rack-a"},
        {"broker_id": 2, "host": second.host, "port": second.port, "rack": "rack-b"},
    ]
    with open_admin(first.bootstrap) as admin:
        wait_for(
            lambda: len(admin.describe_cluster()["brokers"]) == 2, timeout=20, what="both brokers registered"
        )
        described = admin.describe_cluster()
    assert sorted(described["brokers"], key=lambda b: b["broker_id"]) == expected
    assert described["controller_id"] in (1, 2)
    assert described["cluster_id"]
    # Every broker gives the same picture.
    wait_for(
        lambda: all(
            len(describe_cluster_raw(b.bootstrap, BROKER_ENDPOINT).brokers) == 2 for b in (first, second)
        ),
        timeout=20,
        what="both brokers seeing each other",
    )
    answers = [describe_cluster_raw(b.bootstrap, BROKER_ENDPOINT) for b in (first, second)]
    assert {(a.cluster_id, int(a.controller_id)) for a in answers} == {
        (described["cluster_id"], described["controller_id"])
    }
    assert [int(a.error_code) for a in answers] == [0, 0]


def test_describe_cluster_refuses_controller_endpoints(broker) -> None:
    answer = describe_cluster_raw(broker.bootstrap, CONTROLLER_ENDPOINT)
    assert int(answer.error_code) == MISMATCHED_ENDPOINT_TYPE
    assert "CONTROLLER" in answer.error_message
    assert answer.brokers == ()


# -- DeleteRecords ---------------------------------------------------------------------------------------


def produce(bootstrap: str, topic: str, count: int, partition: int = 0) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    try:
        for i in range(count):
            producer.send(topic, f"record {i}".encode(), partition=partition).get(timeout=30)
    finally:
        producer.close(10)


def test_delete_records_moves_the_low_watermark(broker) -> None:
    topic = unique_name("trimmed")
    partition = TopicPartition(topic, 0)
    with open_admin(broker.bootstrap) as admin:
        admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}})
        produce(broker.bootstrap, topic, 20)
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, consumer_timeout_ms=10_000)
        try:
            result = admin.delete_records({partition: 5})
            assert result[partition]["low_watermark"] == 5
            assert consumer.beginning_offsets([partition])[partition] == 5
            consumer.assign([partition])
            consumer.seek_to_beginning(partition)
            offsets = []
            for record in consumer:
                offsets.append(record.offset)
                if record.offset == 19:
                    break
            assert offsets == list(range(5, 20))
            # An earlier offset changes nothing; -1 means "everything below the high watermark".
            assert admin.delete_records({partition: 2})[partition]["low_watermark"] == 5
            assert admin.delete_records({partition: -1})[partition]["low_watermark"] == 20
            assert consumer.beginning_offsets([partition])[partition] == 20
            with pytest.raises(OffsetOutOfRangeError):
                admin.delete_records({partition: 21})
            assert consumer.beginning_offsets([partition])[partition] == 20
        finally:
            consumer.close()


def test_delete_records_only_on_the_leader(broker_factory) -> None:
    first = broker_factory(1)
    second = broker_factory(2)
    wait_until_brokers_see_each_other([first, second])
    topic = unique_name("led")
    partition = TopicPartition(topic, 0)
    with open_admin(first.bootstrap) as admin:
        admin.create_topics({topic: {"assignments": {0: [1]}}})
        produce(first.bootstrap, topic, 5)
        with pytest.raises(NotLeaderForPartitionError):
            admin.delete_records({partition: 3}, partition_leader_id=2)
        assert admin.delete_records({partition: 3})[partition]["low_watermark"] == 3
    request = delete_records_v2.DeleteRecordsRequest(
        topics=(
            delete_records_v2.DeleteRecordsTopic(
                name="no-such-topic",
                partitions=(delete_records_v2.DeleteRecordsPartition(partition_index=0, offset=1),),
            ),
        ),
        timeout=millis(5000),
    )
    with RawConnection(second.bootstrap) as raw:
        response = raw.request(request)
    (answer,) = response.topics[0].partitions
    assert (int(answer.error_code), answer.low_watermark) == (UNKNOWN_TOPIC_OR_PARTITION, -1)
