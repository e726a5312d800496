"""CreateTopics, DeleteTopics and CreatePartitions, driven by kafka-python's KafkaAdminClient (what users
run), with a raw connection only where that client cannot express a request (duplicate names, old
versions)."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path

import pytest
from broker_fixtures import wait_until_brokers_see_each_other
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic
from kio.schema.create_topics.v7 import request as create_v7
from kio.schema.delete_topics.v1 import request as delete_v1
from kio.schema.delete_topics.v6 import request as delete_v6
from kio.schema.metadata.v12 import request as metadata_v12

from tests.helpers.names import unique_name
from tests.helpers.requests import millis
from tests.helpers.wire import RawConnection

pytestmark = pytest.mark.integration

OK = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_TOPIC_EXCEPTION = 17
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_REPLICA_ASSIGNMENT = 39
INVALID_CONFIG = 40
INVALID_REQUEST = 42
LEADER_NOT_AVAILABLE = 5
TOPIC_DELETION_DISABLED = 73
UNKNOWN_TOPIC_ID = 100


def open_admin(bootstrap: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)


def outcomes(result: dict) -> dict[str, tuple[int, str | None]]:
    """{topic: (error_code, error_message)} from a create_topics/delete_topics result."""
    return {t["name"]: (t["error_code"], t.get("error_message")) for t in result["topics"]}


def leaders(admin: KafkaAdminClient, topic: str) -> dict[int, tuple[int, list[int]]]:
    """{partition: (leader, replicas)} as the broker's Metadata answers it."""
    (described,) = admin.describe_topics([topic])
    assert described["error_code"] == OK, described
    return {p["partition_index"]: (p["leader_id"], p["replica_nodes"]) for p in described["partitions"]}


def partition_dirs(broker, topic: str) -> list[str]:
    logs = Path(broker.properties["log.dirs"])
    return sorted(p.name for p in logs.glob(f"{topic}-*") if p.is_dir())


# -- CreateTopics ----------------------------------------------------------------------------------------


def test_create_topic_uses_broker_defaults_returns_configs_and_is_ready_at_once(broker_factory) -> None:
    broker = broker_factory(1, num_partitions=3)
    topic = unique_name("created")
    with open_admin(broker.bootstrap) as admin:
        result = admin.create_topics(
            {topic: {"configs": {"retention.ms": "3600000", "cleanup.policy": "delete"}}}
        )
        (created,) = result["topics"]
        assert (created["error_code"], created["num_partitions"], created["replication_factor"]) == (OK, 3, 1)
        configs = created["configs"]
        assert configs["retention.ms"]["value"] == "3600000"
        assert configs["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
        assert configs["segment.bytes"]["config_source"] == "DEFAULT_CONFIG"
        assert configs["min.insync.replicas"]["value"] == "1"
        # The answer waited for this broker's metadata: every partition already has its leader.
        assert leaders(admin, topic) == {p: (1, [1]) for p in range(3)}
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    try:
        sent = producer.send(topic, b"first", partition=2).get(timeout=30)
    finally:
        producer.close(10)
    assert (sent.partition, sent.offset) == (2, 0)
    assert partition_dirs(broker, topic) == [f"{topic}-{p}" for p in range(3)]


def test_create_topics_answers_each_topic_with_its_own_error(broker_factory) -> None:
    broker = broker_factory(1)
    existing, good = unique_name("existing"), unique_name("good")
    bad = {
        "zero-partitions": {"num_partitions": 0, "replication_factor": 1},
        "too-many-replicas": {"num_partitions": 1, "replication_factor": 3},
        "bad name!": {"num_partitions": 1, "replication_factor": 1},
        "unknown-config": {"num_partitions": 1, "replication_factor": 1, "configs": {"retention.mss": "1"}},
        "bad-value": {"num_partitions": 1, "replication_factor": 1, "configs": {"retention.ms": "soon"}},
        "both-ways": {"num_partitions": 2, "replication_factor": 1, "assignments": {0: [1]}},
        "unknown-broker": {"assignments": {0: [1], 1: [9]}},
    }
    with open_admin(broker.bootstrap) as admin:
        admin.create_topics({existing: {"num_partitions": 1, "replication_factor": 1}})
        result = admin.create_topics(
            {existing: {"num_partitions": 1}, good: {"num_partitions": 2}, **bad}, raise_errors=False
        )
        answers = outcomes(result)
        listed = set(admin.list_topics())
    assert answers[good] == (OK, None)
    assert answers[existing][0] == TOPIC_ALREADY_EXISTS
    codes = {name: answers[name][0] for name in bad}
    assert codes == {
        "zero-partitions": INVALID_PARTITIONS,
        "too-many-replicas": INVALID_REPLICATION_FACTOR,
        "bad name!": INVALID_TOPIC_EXCEPTION,
        "unknown-config": INVALID_CONFIG,
        "bad-value": INVALID_CONFIG,
        "both-ways": INVALID_REQUEST,
        "unknown-broker": INVALID_REPLICA_ASSIGNMENT,
    }
    assert "retention.mss" in answers["unknown-config"][1]
    assert "retention.ms" in answers["bad-value"][1]
    assert "larger than available brokers: 1" in answers["too-many-replicas"][1]
    assert not listed & set(bad), "no failed topic may be created"
    assert {existing, good} <= listed


def test_create_topics_refuses_a_name_given_twice(broker) -> None:
    topic = unique_name("twice")
    with open_admin(broker.bootstrap) as admin:
        result = admin.create_topics([NewTopic(topic, 1, 1), NewTopic(topic, 2, 1)], raise_errors=False)
        assert {t["error_code"] for t in result["topics"]} == {INVALID_REQUEST}
        assert topic not in admin.list_topics()


def test_default_replication_factor_larger_than_the_cluster_is_refused(broker_factory) -> None:
    broker = broker_factory(1, default_replication_factor=2)
    topic = unique_name("defaults")
    with open_admin(broker.bootstrap) as admin:
        answers = outcomes(admin.create_topics({topic: {"num_partitions": 1}}, raise_errors=False))
    assert answers[topic][0] == INVALID_REPLICATION_FACTOR


def test_validate_only_checks_without_creating(broker) -> None:
    topic = unique_name("dry-run")
    with open_admin(broker.bootstrap) as admin:
        result = admin.create_topics(
            {topic: {"num_partitions": 4, "replication_factor": 1, "configs": {"retention.bytes": "1000"}}},
            validate_only=True,
        )
        (checked,) = result["topics"]
        assert (checked["error_code"], checked["num_partitions"]) == (OK, 4)
        assert checked["configs"]["retention.bytes"]["value"] == "1000"
        refused = admin.create_topics(
            {topic: {"num_partitions": 1, "configs": {"no.such.key": "1"}}},
            validate_only=True,
            raise_errors=False,
        )
        assert outcomes(refused)[topic][0] == INVALID_CONFIG
        assert topic not in admin.list_topics()
    assert partition_dirs(broker, topic) == []


def test_explicit_assignment_places_replicas_and_leaders(broker_factory) -> None:
    first = broker_factory(1)
    broker_factory(2)
    topic = unique_name("placed")
    with open_admin(first.bootstrap) as admin:
        result = admin.create_topics(
            {topic: {"assignments": {0: [2, 1], 1: [1, 2], 2: [2]}}}, raise_errors=False
        )
        assert outcomes(result)[topic][0] == INVALID_REPLICA_ASSIGNMENT, "replica lists must have one length"
        result = admin.create_topics({topic: {"assignments": {0: [2, 1], 1: [1, 2]}}})
        (created,) = result["topics"]
        assert (created["num_partitions"], created["replication_factor"]) == (2, 2)
        assert leaders(admin, topic) == {0: (2, [2, 1]), 1: (1, [1, 2])}


def test_created_topic_gets_a_log_on_every_assigned_broker(broker_factory, wait_for) -> None:
    first = broker_factory(1)
    second = broker_factory(2)
    topic = unique_name("spread")
    with open_admin(second.bootstrap) as admin:
        admin.create_topics({topic: {"num_partitions": 2, "replication_factor": 2}})
    for broker in (first, second):
        wait_for(
            lambda b=broker: partition_dirs(b, topic) == [f"{topic}-0", f"{topic}-1"],
            timeout=20,
            what=f"replicas of {topic} on broker {broker.broker_id}",
        )


def test_a_topic_of_36_partitions_times_3_replicas_is_created_and_grown_with_every_state_right(
    broker_factory, cluster_store, wait_for
) -> None:
    # librdkafka's admin test creates topics of up to 36 partitions x 3 replicas in one request and
    # expects the answer within its timeout; every replica's log is created as the states arrive.
    brokers = [broker_factory(broker_id) for broker_id in (1, 2, 3)]
    wait_until_brokers_see_each_other(brokers)
    big, grown = unique_name("wide"), unique_name("grown")
    with open_admin(brokers[0].bootstrap) as admin:
        result = admin.create_topics(
            {
                big: {"num_partitions": 36, "replication_factor": 3},
                grown: {"num_partitions": 12, "replication_factor": 3},
            }
        )
        assert {name: code for name, (code, _) in outcomes(result).items()} == {big: OK, grown: OK}
        response = admin.create_partitions({grown: 36})
        assert [r.error_code for r in response.results] == [OK]
        for topic in (big, grown):
            placed = leaders(admin, topic)  # the answer came once every partition had a leader
            assert sorted(placed) == list(range(36))
            assert all(
                sorted(replicas) == [1, 2, 3] and leader == replicas[0]
                for leader, replicas in placed.values()
            )
            assert sorted(Counter(leader for leader, _ in placed.values()).values()) == [12, 12, 12]
    for topic in (big, grown):
        states = cluster_store.get_partition_states(topic)
        assert sorted(states) == list(range(36))
        for partition, state in states.items():
            replicas = cluster_store.get_topic(topic).partitions[partition]
            assert (state.leader, state.leader_epoch, sorted(state.isr)) == (replicas[0], 0, [1, 2, 3])
    for broker in brokers:
        wait_for(
            lambda b=broker: len(partition_dirs(b, big)) == 36 and len(partition_dirs(b, grown)) == 36,
            timeout=30,
            what=f"72 replicas on broker {broker.broker_id}",
        )


# -- DeleteTopics ----------------------------------------------------------------------------------------


def test_delete_topic_removes_it_and_its_logs_and_the_name_can_be_reused(
    broker, cluster_store, wait_for
) -> None:
    topic = unique_name("doomed")
    with open_admin(broker.bootstrap) as admin:
        admin.create_topics({topic: {"num_partitions": 2, "replication_factor": 1}})
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
        try:
            for i in range(10):
                producer.send(topic, f"record {i}".encode(), partition=i % 2).get(timeout=30)
        finally:
            producer.close(10)
        assert partition_dirs(broker, topic) == [f"{topic}-0", f"{topic}-1"]
        result = admin.delete_topics([topic, "never-existed", uuid.uuid4()], raise_errors=False)
        by_name = {t["name"]: t["error_code"] for t in result["topics"] if t["name"] is not None}
        by_id = [t["error_code"] for t in result["topics"] if t["name"] is None]
        assert by_name == {topic: OK, "never-existed": UNKNOWN_TOPIC_OR_PARTITION}
        assert by_id == [UNKNOWN_TOPIC_ID]
        # The answer waited until this broker's metadata dropped the topic.
        assert topic not in admin.list_topics()
        wait_for(
            lambda: partition_dirs(broker, topic) == [], timeout=20, what="deleted partition directories"
        )
        # The broker says it deleted its data, which frees the name (until then it is marked for deletion).
        wait_for(lambda: not cluster_store.topics_marked_for_deletion(), timeout=20, what="completion")
        again = admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}})
        assert outcomes(again)[topic] == (OK, None)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    try:
        assert producer.send(topic, b"fresh", partition=0).get(timeout=30).offset == 0
    finally:
        producer.close(10)


def test_a_topic_marked_for_deletion_is_neither_auto_created_nor_created(
    broker, cluster_store, wait_for
) -> None:
    """Between a deletion and the moment its replicas' data is gone, Kafka refuses the name (its
    AdminZkClient: "marked for deletion"); a Metadata request allowed to create it gets LEADER_NOT_AVAILABLE
    and creates nothing. Otherwise a client still refreshing the topic it just deleted brings it back."""
    topic = unique_name("dying")
    with open_admin(broker.bootstrap) as admin:
        admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}})
        admin.delete_topics([topic])
        wait_for(lambda: not cluster_store.topics_marked_for_deletion(), timeout=20, what="completion")
        # Held open as by a broker slow to delete its data: the marker names broker 1 again.
        marker = f"/admin/delete_topics/{topic}"
        cluster_store._client.create(marker, json.dumps({"version": 1, "brokers": [1]}).encode())
        asked = metadata_v12.MetadataRequest(
            topics=(metadata_v12.MetadataRequestTopic(name=topic, topic_id=None),),
            allow_auto_topic_creation=True,
            include_topic_authorized_operations=False,
        )
        with RawConnection(broker.bootstrap) as connection:
            (answer,) = connection.request(asked).topics
        assert (answer.name, answer.error_code, answer.partitions) == (topic, LEADER_NOT_AVAILABLE, ())
        assert not cluster_store.topic_exists(topic)
        refused = admin.create_topics(
            {topic: {"num_partitions": 1, "replication_factor": 1}}, raise_errors=False
        )
        assert outcomes(refused)[topic] == (TOPIC_ALREADY_EXISTS, f"Topic '{topic}' is marked for deletion.")
        cluster_store.replica_data_deleted(topic, 1)
        again = admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}})
        assert outcomes(again)[topic] == (OK, None)


def test_delete_topic_disabled(broker_factory) -> None:
    broker = broker_factory(1, delete_topic_enable="false")
    topic = unique_name("kept")
    with open_admin(broker.bootstrap) as admin:
        admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}})
        result = admin.delete_topics([topic], raise_errors=False)
        assert outcomes(result)[topic][0] == TOPIC_DELETION_DISABLED
        assert topic in admin.list_topics()
    # Versions before 3 have no TOPIC_DELETION_DISABLED: Kafka answers them INVALID_REQUEST.
    with RawConnection(broker.bootstrap) as raw:
        old = raw.request(delete_v1.DeleteTopicsRequest(topic_names=(topic,), timeout=millis(5000)))
    assert [(r.name, int(r.error_code)) for r in old.responses] == [(topic, INVALID_REQUEST)]


def test_create_topics_raw_v7_duplicate_and_timeout_zero(broker) -> None:
    topic, other = unique_name("raw"), unique_name("raw-other")

    def creatable(name: str) -> create_v7.CreatableTopic:
        return create_v7.CreatableTopic(
            name=name, num_partitions=1, replication_factor=1, assignments=(), configs=()
        )

    with RawConnection(broker.bootstrap) as raw:
        response = raw.request(
            create_v7.CreateTopicsRequest(
                topics=(creatable(topic), creatable(topic), creatable(other)),
                timeout=millis(0),
                validate_only=False,
            )
        )
    answers = {t.name: int(t.error_code) for t in response.topics}
    assert answers == {topic: INVALID_REQUEST, other: OK}


# -- CreatePartitions ------------------------------------------------------------------------------------


def test_create_partitions_grows_only(broker_factory) -> None:
    first = broker_factory(1)
    broker_factory(2)
    topic, missing = unique_name("grow"), unique_name("missing")
    with open_admin(first.bootstrap) as admin:
        admin.create_topics({topic: {"assignments": {0: [1], 1: [2]}}})
        response = admin.create_partitions({topic: 4}, validate_only=True)
        assert [r.error_code for r in response.results] == [OK]
        assert len(leaders(admin, topic)) == 2, "validate_only must not add partitions"
        response = admin.create_partitions({topic: {"count": 4, "assignments": [[2], [1]]}})
        assert [r.error_code for r in response.results] == [OK]
        # Answered once the new partitions have leaders in the broker's metadata.
        assert leaders(admin, topic) == {0: (1, [1]), 1: (2, [2]), 2: (2, [2]), 3: (1, [1])}
        response = admin.create_partitions({topic: 3, missing: 2}, raise_errors=False)
        codes = {r.name: r.error_code for r in response.results}
        assert codes == {topic: INVALID_PARTITIONS, missing: UNKNOWN_TOPIC_OR_PARTITION}
        response = admin.create_partitions({topic: 4}, raise_errors=False)
        assert [r.error_code for r in response.results] == [INVALID_PARTITIONS]
        response = admin.create_partitions({topic: {"count": 6, "assignments": [[1]]}}, raise_errors=False)
        assert [r.error_code for r in response.results] == [INVALID_REPLICA_ASSIGNMENT]
        response = admin.create_partitions({topic: {"count": 5, "assignments": [[7]]}}, raise_errors=False)
        assert [r.error_code for r in response.results] == [INVALID_REPLICA_ASSIGNMENT]
        assert len(leaders(admin, topic)) == 4
    producer = KafkaProducer(bootstrap_servers=first.bootstrap)
    try:
        assert producer.send(topic, b"on a new partition", partition=3).get(timeout=30).offset == 0
    finally:
        producer.close(10)


def test_delete_topics_v6_refuses_a_name_with_an_id(broker) -> None:
    topic = unique_name("named")
    with open_admin(broker.bootstrap) as admin:
        admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}})
        with RawConnection(broker.bootstrap) as raw:
            response = raw.request(
                delete_v6.DeleteTopicsRequest(
                    topics=(delete_v6.DeleteTopicState(name=topic, topic_id=uuid.uuid4()),),
                    timeout=millis(5000),
                )
            )
        assert [(r.name, int(r.error_code)) for r in response.responses] == [(topic, INVALID_REQUEST)]
        assert topic in admin.list_topics()
