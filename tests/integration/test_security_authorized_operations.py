"""Authorized operations with an authorizer: those a client asks for (Metadata, DescribeCluster,
DescribeGroups) are the operations its principal's ACLs allow, as Kafka computes them, not every operation.
The client is librdkafka (confluent-kafka), whose DescribeTopics, DescribeCluster and DescribeConsumerGroups
ask for them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import TopicCollection
from confluent_kafka.admin import AclOperation, AdminClient
from security_fixtures import broker_with_acls

from backbone.coordination import AclBinding, ClusterStore

pytestmark = pytest.mark.integration

USERS = {"admin": "admin-pw", "alice": "alice-pw"}
TOPIC, GROUP = "orders", "alice-group"
TIMEOUT = 30
EVERY_TOPIC_OPERATION = {"READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE"}
EVERY_TOPIC_OPERATION |= {"DESCRIBE_CONFIGS", "ALTER_CONFIGS"}


@pytest.fixture
def acl_broker(zookeeper, chroot: str, tmp_path: Path, store_factory) -> Iterator[tuple[ClusterStore, int]]:
    store: ClusterStore = store_factory()
    connect = zookeeper.connect_string + chroot
    with broker_with_acls(connect, tmp_path / "broker", store, USERS, [TOPIC]) as (_, sasl_port):
        yield store, sasl_port


def admin_as(user: str, port: int) -> AdminClient:
    return AdminClient(
        {
            "bootstrap.servers": f"127.0.0.1:{port}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user,
            "sasl.password": USERS[user],
        }
    )


def names(operations: list[AclOperation] | None) -> set[str]:
    assert operations is not None, "no authorized operations in the answer"
    return {operation.name for operation in operations}


def topic_operations(admin: AdminClient) -> set[str]:
    described = admin.describe_topics(TopicCollection([TOPIC]), include_authorized_operations=True)
    return names(described[TOPIC].result(TIMEOUT).authorized_operations)


def cluster_operations(admin: AdminClient) -> set[str]:
    described = admin.describe_cluster(include_authorized_operations=True)
    return names(described.result(TIMEOUT).authorized_operations)


def group_operations(admin: AdminClient) -> set[str]:
    described = admin.describe_consumer_groups([GROUP], include_authorized_operations=True)
    return names(described[GROUP].result(TIMEOUT).authorized_operations)


def test_authorized_operations_are_those_the_principals_acls_allow(acl_broker, wait_for) -> None:
    store, port = acl_broker
    store.add_acls(
        [
            AclBinding("TOPIC", TOPIC, "LITERAL", "User:alice", "*", "READ", "ALLOW"),
            AclBinding("CLUSTER", "kafka-cluster", "LITERAL", "User:alice", "*", "ALTER", "ALLOW"),
            AclBinding("GROUP", GROUP, "LITERAL", "User:alice", "*", "READ", "ALLOW"),
        ]
    )
    alice, root = admin_as("alice", port), admin_as("admin", port)
    # READ implies DESCRIBE, ALTER implies DESCRIBE: what Kafka's authorizer reports for these ACLs.
    wait_for(lambda: topic_operations(alice) == {"READ", "DESCRIBE"}, what="alice's topic operations")
    assert cluster_operations(alice) == {"ALTER", "DESCRIBE"}
    assert group_operations(alice) == {"READ", "DESCRIBE"}
    # A super user may do everything.
    assert topic_operations(root) == EVERY_TOPIC_OPERATION
    assert "CLUSTER_ACTION" in cluster_operations(root)
    assert group_operations(root) == {"READ", "DESCRIBE", "DELETE"}
