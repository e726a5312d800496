"""ZooKeeper paths and znode JSON: Kafka's layout and Kafka's encodings, field by field."""

from __future__ import annotations

import base64
import dataclasses
import json

import pytest

from backbone.coordination import paths
from backbone.coordination.errors import CoordinationError
from backbone.coordination.session import split_connect_string
from backbone.coordination.znodes import (
    AclEntry,
    BrokerRegistration,
    ClusterId,
    ControllerInfo,
    EndPoint,
    PartitionReplicas,
    PartitionState,
    ProducerIdBlock,
    TopicAssignment,
    decode_acls,
    decode_config,
    decode_config_change,
    decode_controller_epoch,
    decode_partition_list,
    decode_reassignment,
    encode_acls,
    encode_config,
    encode_config_change,
    encode_controller_epoch,
    encode_partition_list,
    encode_reassignment,
    new_kafka_uuid,
)
from backbone.protocol.errors import InvalidTopicError

pytestmark = pytest.mark.unit


def as_json(data: bytes) -> object:
    return json.loads(data)


# -- paths --------------------------------------------------------------------------------------


def test_kafka_well_known_paths() -> None:
    assert paths.broker_path(3) == "/brokers/ids/3"
    assert paths.topic_path("orders") == "/brokers/topics/orders"
    assert paths.topic_partitions_path("orders") == "/brokers/topics/orders/partitions"
    assert paths.partition_path("orders", 2) == "/brokers/topics/orders/partitions/2"
    assert paths.partition_state_path("orders", 2) == "/brokers/topics/orders/partitions/2/state"
    assert paths.CONTROLLER == "/controller" and paths.CONTROLLER_EPOCH == "/controller_epoch"
    assert paths.topic_config_path("orders") == "/config/topics/orders"
    assert paths.broker_config_path(1) == "/config/brokers/1"
    assert paths.broker_config_path(None) == "/config/brokers/<default>"
    assert paths.config_change_prefix_path() == "/config/changes/config_change_"
    assert paths.config_change_path("config_change_0000000004") == "/config/changes/config_change_0000000004"
    assert paths.delete_topic_path("orders") == "/admin/delete_topics/orders"
    assert paths.REASSIGN_PARTITIONS == "/admin/reassign_partitions"
    assert paths.PREFERRED_REPLICA_ELECTION == "/admin/preferred_replica_election"
    assert paths.isr_change_prefix_path() == "/isr_change_notification/isr_change_"
    assert paths.acl_path("Topic", "orders") == "/kafka-acl/Topic/orders"
    assert paths.acl_change_prefix_path() == "/kafka-acl-changes/acl_changes_"
    assert paths.CLUSTER_ID == "/cluster/id"
    assert paths.PRODUCER_ID_BLOCK == "/latest_producer_id_block"


def test_persistent_paths_match_kafkas_startup_set() -> None:
    assert set(paths.PERSISTENT_PATHS) >= {
        "/consumers",
        "/brokers/ids",
        "/brokers/topics",
        "/config/changes",
        "/admin/delete_topics",
        "/brokers/seqid",
        "/isr_change_notification",
        "/latest_producer_id_block",
        "/log_dir_event_notification",
        "/config/topics",
        "/config/clients",
        "/config/users",
        "/config/brokers",
        "/config/ips",
    }


def test_entity_paths_and_sequence_numbers() -> None:
    assert paths.entity_path("topics", "orders") == "topics/orders"
    assert paths.entity_path("brokers", "<default>") == "brokers/<default>"
    assert paths.sequence_number("config_change_0000000042", paths.CONFIG_CHANGE_PREFIX) == 42
    with pytest.raises(ValueError, match="not a sequential node"):
        paths.sequence_number("other_0000000042", paths.CONFIG_CHANGE_PREFIX)
    with pytest.raises(ValueError, match="unknown config entity type"):
        paths.config_entity_path("nonsense", "x")
    assert paths.join_chroot("/dc1", "/brokers/ids") == "/dc1/brokers/ids"
    assert paths.join_chroot("", "/brokers") == "/brokers"
    assert paths.parent_of("/brokers/ids/1") == "/brokers/ids" and paths.parent_of("/brokers") == "/"


@pytest.mark.parametrize("name", ["a/b", "..", ".", "", "nul\x00"])
def test_names_that_would_escape_their_path_are_refused(name: str) -> None:
    with pytest.raises(InvalidTopicError):
        paths.topic_path(name)
    with pytest.raises(InvalidTopicError):
        paths.delete_topic_path(name)
    with pytest.raises(ValueError, match="path segment"):
        paths.config_entity_path("clients", name)


@pytest.mark.parametrize("name", ["orders", "a.b_c-D9", "x" * 249])
def test_kafka_legal_topic_names(name: str) -> None:
    paths.validate_topic_name(name)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "empty"),
        (".", r"\."),
        ("..", r"\.\."),
        ("x" * 250, "longer than 249"),
        ("sp ace", "character"),
        ("é", "ASCII"),
    ],
)
def test_kafka_illegal_topic_names(name: str, message: str) -> None:
    with pytest.raises(InvalidTopicError, match=message):
        paths.validate_topic_name(name)


def test_connect_string_splits_hosts_and_chroot() -> None:
    assert split_connect_string("127.0.0.1:2181") == ("127.0.0.1:2181", "")
    assert split_connect_string("h1:2181,h2:2181/dc1") == ("h1:2181,h2:2181", "/dc1")
    assert split_connect_string("h:2181/dc1/") == ("h:2181", "/dc1")
    assert split_connect_string("h:2181/") == ("h:2181", "")
    with pytest.raises(CoordinationError, match="no host"):
        split_connect_string("/dc1")
    with pytest.raises(CoordinationError, match="normalized"):
        split_connect_string("h:2181/a//b")


# -- brokers ------------------------------------------------------------------------------------


def test_broker_registration_v5_field_by_field() -> None:
    registration = BrokerRegistration(
        1,
        (EndPoint("PLAINTEXT", "kafka1", 9092), EndPoint("INTERNAL", "10.0.0.1", 9093, "SASL_SSL")),
        rack="us-east-1a",
        jmx_port=9999,
        timestamp_ms=1588103435542,
        features={"metadata.version": {"min_version": 1, "max_version": 7}},
    )
    assert as_json(registration.encode()) == {
        "version": 5,
        "host": "kafka1",
        "port": 9092,
        "endpoints": ["PLAINTEXT://kafka1:9092", "INTERNAL://10.0.0.1:9093"],
        "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT", "INTERNAL": "SASL_SSL"},
        "jmx_port": 9999,
        "rack": "us-east-1a",
        "timestamp": "1588103435542",
        "features": {"metadata.version": {"min_version": 1, "max_version": 7}},
    }
    assert b" " not in registration.encode()  # compact, as Jackson writes it
    assert BrokerRegistration.decode(1, registration.encode(), epoch=42) == dataclasses.replace(
        registration, epoch=42
    )


def test_broker_without_rack_or_plaintext_listener_is_encoded_like_kafka() -> None:
    registration = BrokerRegistration(2, (EndPoint("SSL", "kafka2", 9094, "SSL"),), timestamp_ms=1)
    value = as_json(registration.encode())
    assert isinstance(value, dict)
    assert "rack" not in value and value["host"] is None and value["port"] == -1


def test_decodes_registrations_written_by_kafka() -> None:
    v4 = (
        b'{"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},"endpoints":["PLAINTEXT://kafka1:9092"],'
        b'"jmx_port":-1,"host":"kafka1","timestamp":"1588103435542","port":9092,"version":4}'
    )
    decoded = BrokerRegistration.decode(0, v4)
    assert decoded.endpoints == (EndPoint("PLAINTEXT", "kafka1", 9092),) and decoded.rack is None
    assert decoded.version == 4 and decoded.timestamp_ms == 1588103435542
    v1 = b'{"jmx_port":-1,"timestamp":"1","host":"old","version":1,"port":9092}'
    assert BrokerRegistration.decode(0, v1).endpoints == (EndPoint("PLAINTEXT", "old", 9092),)
    ipv6 = BrokerRegistration(3, (EndPoint("PLAINTEXT", "::1", 9092),), timestamp_ms=1)
    assert as_json(ipv6.encode())["endpoints"] == ["PLAINTEXT://[::1]:9092"]  # type: ignore[index]
    assert BrokerRegistration.decode(3, ipv6.encode()).endpoints[0].host == "::1"


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b"[1, 2]",
        b'{"version": 0}',
        b'{"version": 1, "host": "h"}',
        b'{"version": 5, "endpoints": ["nonsense"]}',
        b'{"version": 5, "endpoints": ["CUSTOM://h:1"]}',  # no protocol for a custom listener name
    ],
)
def test_malformed_broker_registration_is_a_coordination_error(data: bytes) -> None:
    with pytest.raises(CoordinationError, match=r"broker 9|endpoint"):
        BrokerRegistration.decode(9, data)


# -- controller ---------------------------------------------------------------------------------


def test_controller_json_and_epoch() -> None:
    assert as_json(ControllerInfo(1, timestamp_ms=1588103435749).encode()) == {
        "version": 2,
        "brokerid": 1,
        "timestamp": "1588103435749",
        "kraftControllerEpoch": -1,
    }
    old = ControllerInfo.decode(b'{"version":1,"brokerid":0,"timestamp":"1588103435749"}')
    assert old == ControllerInfo(0, 1588103435749, -1)
    assert encode_controller_epoch(7) == b"7" and decode_controller_epoch(b"7") == 7
    with pytest.raises(CoordinationError, match="controller_epoch"):
        decode_controller_epoch(b"seven")


# -- topics and partitions ----------------------------------------------------------------------


def test_topic_assignment_v3_field_by_field() -> None:
    assignment = TopicAssignment("t", {1: (2, 3), 0: (1, 2)}, topic_id="dGVzdHRvcGljaWQxMjM0NQ")
    assert as_json(assignment.encode()) == {
        "version": 3,
        "partitions": {"0": [1, 2], "1": [2, 3]},
        "adding_replicas": {},
        "removing_replicas": {},
        "topic_id": "dGVzdHRvcGljaWQxMjM0NQ",
    }
    assert TopicAssignment.decode("t", assignment.encode()) == assignment
    assert assignment.partition_count == 2 and assignment.replication_factor == 2
    without_id = as_json(TopicAssignment("t", {0: (1,)}).encode())
    assert isinstance(without_id, dict) and "topic_id" not in without_id


def test_decodes_assignments_written_by_older_kafka() -> None:
    v2 = (
        b'{"version":2,"partitions":{"2":[1,0],"1":[0,1],"0":[1,0]},'
        b'"adding_replicas":{"0":[2]},"removing_replicas":{}}'
    )
    decoded = TopicAssignment.decode("t", v2)
    assert decoded.partitions == {0: (1, 0), 1: (0, 1), 2: (1, 0)} and decoded.adding_replicas == {0: (2,)}
    assert decoded.topic_id is None
    assert TopicAssignment.decode("t", b'{"version":1,"partitions":{"0":[0]}}').partitions == {0: (0,)}


def test_partition_state_field_by_field() -> None:
    state = PartitionState(leader=1, leader_epoch=4, isr=(1, 2), controller_epoch=3)
    assert as_json(state.encode()) == {
        "controller_epoch": 3,
        "leader": 1,
        "version": 1,
        "leader_epoch": 4,
        "isr": [1, 2],
    }
    assert PartitionState.decode(state.encode(), zk_version=9) == PartitionState(
        1, 4, (1, 2), 3, zk_version=9
    )
    recovering = PartitionState(
        leader=1, leader_epoch=4, isr=(1,), controller_epoch=3, leader_recovery_state=1
    )
    assert as_json(recovering.encode())["leader_recovery_state"] == 1  # type: ignore[index]
    with pytest.raises(CoordinationError, match="partition state"):
        PartitionState.decode(b'{"leader": 1}')


def test_admin_znodes_field_by_field() -> None:
    entries = [PartitionReplicas("t", 0, (1, 2))]
    assert as_json(encode_reassignment(entries)) == {
        "version": 1,
        "partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2]}],
    }
    assert decode_reassignment(encode_reassignment(entries)) == entries
    listed = encode_partition_list([("b", 1), ("a", 0), ("a", 0)])
    assert as_json(listed) == {
        "version": 1,
        "partitions": [{"topic": "a", "partition": 0}, {"topic": "b", "partition": 1}],
    }
    assert decode_partition_list(listed) == {("a", 0), ("b", 1)}


# -- configs ------------------------------------------------------------------------------------


def test_config_and_change_notification_field_by_field() -> None:
    assert as_json(encode_config({"retention.ms": "1000", "cleanup.policy": "compact"})) == {
        "version": 1,
        "config": {"retention.ms": "1000", "cleanup.policy": "compact"},
    }
    assert decode_config(b'{"version":1,"config":{"a":"1"}}') == {"a": "1"}
    assert decode_config(b"") == {} and decode_config(None) == {}
    assert as_json(encode_config_change("topics/orders")) == {"version": 2, "entity_path": "topics/orders"}
    assert decode_config_change(encode_config_change("brokers/<default>")) == ("brokers", "<default>")
    with pytest.raises(CoordinationError, match="version 1"):
        decode_config_change(b'{"version":1,"entity_type":"topics","entity_name":"x"}')
    with pytest.raises(CoordinationError, match="malformed entity_path"):
        decode_config_change(b'{"version":2,"entity_path":"topics"}')


# -- cluster id, producer ids, ACLs ---------------------------------------------------------------


def test_cluster_id_and_kafka_uuids() -> None:
    assert as_json(ClusterId("abc").encode()) == {"version": "1", "id": "abc"}
    assert ClusterId.decode(b'{"version":"1","id":"xyz"}') == ClusterId("xyz")
    drawn = {new_kafka_uuid() for _ in range(500)}
    assert len(drawn) == 500
    for text in drawn:
        assert len(text) == 22 and not text.startswith("-")
        assert len(base64.urlsafe_b64decode(text + "==")) == 16


def test_producer_id_block_keeps_kafkas_string_bounds() -> None:
    block = ProducerIdBlock(broker_id=2, first=1000, last=1999)
    assert as_json(block.encode()) == {"version": 1, "broker": 2, "block_start": "1000", "block_end": "1999"}
    assert ProducerIdBlock.decode(block.encode()) == block


def test_acl_node_field_by_field() -> None:
    acls = [AclEntry("User:alice", "Allow", "Read", "*")]
    assert as_json(encode_acls(acls)) == {
        "version": 1,
        "acls": [{"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}],
    }
    assert decode_acls(encode_acls(acls)) == acls
