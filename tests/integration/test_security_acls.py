"""The ACL matrix with a standard client (kafka-python over SASL_PLAINTEXT, SCRAM-SHA-512): allowed, denied,
prefixed, deny beating allow, host rules, the super user, a resource no ACL names; Metadata hides what a
principal may not describe; ACLs are created with CreateAcls, which only the cluster's ALTER permits."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import kafka
import kafka.errors
import pytest
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from security_fixtures import broker_with_acls

from backbone.client import Admin, ConfigResource, ConfigResourceType
from backbone.coordination import ClusterStore
from backbone.dev.processes import BrokerProcess
from backbone.protocol.errors import TopicAuthorizationFailedError

pytestmark = pytest.mark.integration

USERS = {"admin": "admin-pw", "alice": "alice-pw", "bob": "bob-pw"}
TOPICS = ("orders", "payments", "logs-app", "mixed-open", "mixed-secret", "hosted", "unnamed")


@pytest.fixture
def acl_broker(zookeeper, chroot: str, tmp_path: Path, store_factory) -> Iterator[tuple[BrokerProcess, int]]:
    store: ClusterStore = store_factory()
    with broker_with_acls(
        zookeeper.connect_string + chroot, tmp_path / "broker", store, USERS, TOPICS
    ) as started:
        yield started


def sasl(port: int, user: str) -> dict[str, object]:
    return {
        "bootstrap_servers": f"127.0.0.1:{port}",
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": user,
        "sasl_plain_password": USERS[user],
    }


def acl(
    principal: str, name: str, operation: int, *, host: str = "*", deny: bool = False, prefixed: bool = False
):
    pattern = ACLResourcePatternType.PREFIXED if prefixed else ACLResourcePatternType.LITERAL
    return ACL(
        principal=principal,
        host=host,
        operation=operation,
        permission_type=ACLPermissionType.DENY if deny else ACLPermissionType.ALLOW,
        resource_pattern=ResourcePattern(ResourceType.TOPIC, name, pattern),
    )


def produce(producer: kafka.KafkaProducer, topic: str) -> str:
    """ "ok", or the name of the error the broker answered."""
    try:
        producer.send(topic, uuid.uuid4().bytes).get(timeout=15)
        return "ok"
    except kafka.errors.KafkaError as exc:
        return type(exc).__name__


def consume(port: int, group: str) -> str:
    """ "ok" once alice's consumer in `group` reads a record of orders, or the error's name."""
    consumer = kafka.KafkaConsumer(
        "orders", group_id=group, auto_offset_reset="earliest", **sasl(port, "alice")
    )
    try:
        for _ in range(40):
            if any(consumer.poll(timeout_ms=500).values()):
                return "ok"
        return "nothing read"
    except kafka.errors.KafkaError as exc:
        return type(exc).__name__
    finally:
        consumer.close()


def test_the_acl_matrix(acl_broker, wait_for) -> None:
    process, port = acl_broker
    admin = kafka.KafkaAdminClient(**sasl(port, "admin"))
    alice_admin = kafka.KafkaAdminClient(**sasl(port, "alice"))
    producers = {
        user: kafka.KafkaProducer(**sasl(port, user), max_block_ms=5000, retries=0) for user in USERS
    }
    try:
        result = admin.create_acls(
            [
                acl("User:alice", "orders", ACLOperation.WRITE),
                acl("User:bob", "payments", ACLOperation.WRITE),
                acl("User:alice", "logs-", ACLOperation.WRITE, prefixed=True),
                acl("User:alice", "mixed-", ACLOperation.ALL, prefixed=True),
                acl("User:alice", "mixed-secret", ACLOperation.WRITE, deny=True),
                acl("User:alice", "hosted", ACLOperation.WRITE, host="10.9.9.9"),
                acl("User:bob", "hosted", ACLOperation.WRITE, host="127.0.0.1"),
                acl("User:alice", "orders", ACLOperation.READ),
                ACL(
                    principal="User:alice",
                    host="*",
                    operation=ACLOperation.READ,
                    permission_type=ACLPermissionType.ALLOW,
                    resource_pattern=ResourcePattern(ResourceType.GROUP, "alice-group"),
                ),
            ]
        )
        assert not result["failed"] and len(result["succeeded"]) == 9
        alice, bob, root = producers["alice"], producers["bob"], producers["admin"]
        # The broker reloads its ACLs on the change notification; wait until the first one counts.
        wait_for(lambda: produce(alice, "orders") == "ok", timeout=20, what="alice's ACL to take effect")
        refused = "TopicAuthorizationFailedError"
        assert produce(bob, "orders") == refused  # no ACL for bob on orders
        assert produce(alice, "payments") == refused  # payments names bob only
        assert produce(alice, "logs-app") == "ok"  # prefixed
        assert produce(alice, "mixed-open") == "ok"  # ALL on the prefix
        assert produce(alice, "mixed-secret") == refused  # deny beats allow
        assert produce(alice, "hosted") == refused  # only from 10.9.9.9
        assert produce(bob, "hosted") == "ok"  # from 127.0.0.1
        assert produce(alice, "unnamed") == refused  # no ACL found, allow.everyone.if.no.acl.found=false
        assert produce(root, "unnamed") == "ok"  # super user
        # Metadata shows alice what she may describe (WRITE implies DESCRIBE), nothing else.
        consumer = kafka.KafkaConsumer(**sasl(port, "alice"))
        try:
            assert consumer.topics() == {"orders", "logs-app", "mixed-open", "mixed-secret"}
        finally:
            consumer.close()
        # Only the cluster's ALTER may create ACLs; DESCRIBE lists what is there.
        denied = alice_admin.create_acls([acl("User:alice", "payments", ACLOperation.WRITE)])
        assert denied["failed"] == [kafka.errors.ClusterAuthorizationFailedError]
        everything = ACLFilter(
            principal=None,
            host=None,
            operation=ACLOperation.ANY,
            permission_type=ACLPermissionType.ANY,
            resource_pattern=ResourcePatternFilter(ResourceType.TOPIC, None, ACLResourcePatternType.ANY),
        )
        described, error = admin.describe_acls(everything)
        assert error is kafka.errors.NoError and len(described) == 8  # the topics' ACLs
        # Administration: alice may neither create nor delete topics, nor read their configs.
        with pytest.raises(kafka.errors.TopicAuthorizationFailedError):
            alice_admin.create_topics([kafka.admin.NewTopic("alice-made", 1, 1)])
        with pytest.raises(kafka.errors.TopicAuthorizationFailedError):
            alice_admin.delete_topics(["orders"])
        ours = {
            "bootstrap.servers": f"127.0.0.1:{port}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.username": "alice",
            "sasl.password": USERS["alice"],
        }
        with Admin(ours) as our_admin, pytest.raises(TopicAuthorizationFailedError):
            our_admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "orders")])
        admin.create_topics([kafka.admin.NewTopic("admin-made", 1, 1)])  # the super user may
        # Groups: alice consumes in the group she may read, and is refused another.
        assert consume(port, "alice-group") == "ok"
        assert consume(port, "bob-group") == "GroupAuthorizationFailedError"
        assert (
            "event=authorization_refused principal=User:alice host=127.0.0.1 operation=WRITE"
            in process.output()
        )
    finally:
        for producer in producers.values():
            producer.close()
        admin.close()
        alice_admin.close()
