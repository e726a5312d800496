"""Authorized operations, where a client asks for them, list every operation (there is no authorizer)."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v10 import request as metadata_v10

from tests.helpers.wire import RawConnection

pytestmark = pytest.mark.integration

TOPIC = "described"
NOT_REQUESTED = -(2**31)
# AclOperation codes, as Kafka lists them for a topic and for the cluster.
TOPIC_OPERATIONS = {"READ": 3, "WRITE": 4, "CREATE": 5, "DELETE": 6, "ALTER": 7, "DESCRIBE": 8}
TOPIC_OPERATIONS |= {"DESCRIBE_CONFIGS": 10, "ALTER_CONFIGS": 11}
CLUSTER_OPERATIONS = {"CREATE": 5, "ALTER": 7, "DESCRIBE": 8, "CLUSTER_ACTION": 9, "DESCRIBE_CONFIGS": 10}
CLUSTER_OPERATIONS |= {"ALTER_CONFIGS": 11, "IDEMPOTENT_WRITE": 12}


def bits(operations: dict[str, int]) -> int:
    return sum(1 << code for code in operations.values())


def metadata(include: bool) -> metadata_v10.MetadataRequest:
    return metadata_v10.MetadataRequest(
        topics=(metadata_v10.MetadataRequestTopic(name=TOPIC, topic_id=None),),
        allow_auto_topic_creation=True,
        include_cluster_authorized_operations=include,
        include_topic_authorized_operations=include,
    )


def test_metadata_lists_every_operation_when_asked(broker, wait_for) -> None:
    # librdkafka's DescribeTopics and DescribeCluster ask, and check the count (8 and 7).
    with RawConnection(broker.bootstrap) as connection:
        wait_for(
            lambda: connection.request(metadata(False)).topics[0].error_code == ErrorCode.none, timeout=20
        )
        asked = connection.request(metadata(True))
        not_asked = connection.request(metadata(False))
    assert (asked.cluster_authorized_operations, asked.topics[0].topic_authorized_operations) == (
        bits(CLUSTER_OPERATIONS),
        bits(TOPIC_OPERATIONS),
    )
    assert (not_asked.cluster_authorized_operations, not_asked.topics[0].topic_authorized_operations) == (
        NOT_REQUESTED,
        NOT_REQUESTED,
    )
