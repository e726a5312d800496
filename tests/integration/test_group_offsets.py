"""Committed offsets on real brokers: FindCoordinator, OffsetCommit, OffsetFetch, OffsetDelete, DeleteGroups,
through kafka-python and raw requests of every version served, coordinator failover, bad input, and the
cleanup of offsets of deleted topics."""

from __future__ import annotations

import importlib
import struct
from collections.abc import Iterable
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata
from kio.schema.errors import ErrorCode

from backbone.broker.handlers.common import build, by_topic
from backbone.client import Admin, NewTopic, Producer
from backbone.dev.processes import BrokerProcess
from backbone.protocol.errors import InvalidTopicError
from tests.helpers.requests import metadata_request, millis
from tests.helpers.wire import RawConnection

pytestmark = pytest.mark.integration

TOPIC = "orders"
PARTITIONS = 3
# Small offsets topics keep the tests quick; the hash still spreads groups over them.
OFFSETS_PARTITIONS = 5
RETRIABLE = {
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.not_coordinator,
    ErrorCode.coordinator_not_available,
}


def request_module(api: str, version: int) -> Any:
    return importlib.import_module(f"kio.schema.{api}.v{version}.request")


def find_coordinator(
    bootstrap: str, group: str, version: int = 4, key_type: int = 0
) -> tuple[ErrorCode, int, str]:
    module = request_module("find_coordinator", version)
    with RawConnection(bootstrap) as connection:
        if version >= 4:
            request = module.FindCoordinatorRequest(key_type=key_type, coordinator_keys=(group,))
            answer = connection.request(request).coordinators[0]
        else:
            answer = connection.request(build(module.FindCoordinatorRequest, key=group, key_type=key_type))
    return answer.error_code, answer.node_id, f"{answer.host}:{answer.port}"


def await_coordinator(bootstrap: str, group: str, wait_for, not_on: Iterable[int] = ()) -> tuple[int, str]:
    found: dict[str, Any] = {}

    def ready() -> bool:
        error, node, address = find_coordinator(bootstrap, group)
        found.update(error=error, node=node, address=address)
        return error == ErrorCode.none and node not in not_on

    wait_for(ready, timeout=60, what=f"a coordinator for {group} (last answer {found})")
    return found["node"], found["address"]


def commit_request(
    version: int,
    group: str,
    offsets: dict[tuple[str, int], int],
    *,
    generation: int = -1,
    member: str = "",
    metadata: str | None = "",
) -> Any:
    module = request_module("offset_commit", version)
    topics = by_topic(
        (
            topic,
            build(
                module.OffsetCommitRequestPartition,
                partition_index=partition,
                committed_offset=offset,
                committed_leader_epoch=-1,
                committed_metadata=metadata,
            ),
        )
        for (topic, partition), offset in offsets.items()
    )
    return build(
        module.OffsetCommitRequest,
        group_id=group,
        generation_id_or_member_epoch=generation,
        member_id=member,
        group_instance_id=None,
        topics=tuple(
            build(module.OffsetCommitRequestTopic, name=t, partitions=tuple(p)) for t, p in topics.items()
        ),
    )


def commit_errors(answer: Any) -> dict[tuple[str, int], ErrorCode]:
    return {(t.name, p.partition_index): p.error_code for t in answer.topics for p in t.partitions}


def fetch_request(version: int, group: str, partitions: list[tuple[str, int]] | None) -> Any:
    module = request_module("offset_fetch", version)
    topics = (
        None
        if partitions is None
        else tuple(
            build(
                getattr(module, "OffsetFetchRequestTopics", None) or module.OffsetFetchRequestTopic,
                name=t,
                partition_indexes=tuple(ps),
            )
            for t, ps in by_topic(partitions).items()
        )
    )
    if version >= 8:
        group_entry = module.OffsetFetchRequestGroup(group_id=group, topics=topics)
        return module.OffsetFetchRequest(groups=(group_entry,))
    return build(module.OffsetFetchRequest, group_id=group, topics=topics)


def offset_delete_request(group: str, topic: str, partition: int) -> Any:
    module = request_module("offset_delete", 0)
    partitions = (module.OffsetDeleteRequestPartition(partition_index=partition),)
    topics = (module.OffsetDeleteRequestTopic(name=topic, partitions=partitions),)
    return module.OffsetDeleteRequest(group_id=group, topics=topics)


def fetched(answer: Any) -> tuple[ErrorCode, dict[tuple[str, int], tuple[int, str | None, ErrorCode]]]:
    """(group error, {partition: (offset, metadata, error)}) of any OffsetFetch version's answer."""
    body = answer.groups[0] if hasattr(answer, "groups") else answer
    rows = {
        (t.name, p.partition_index): (p.committed_offset, p.metadata, p.error_code)
        for t in body.topics
        for p in t.partitions
    }
    return getattr(body, "error_code", ErrorCode.none), rows


def served(address: str, request: Any, wait_for) -> Any:
    """The coordinator's answer once it is past loading (retriable coordinator errors are retried)."""
    answers: list[Any] = []

    def attempt() -> bool:
        with RawConnection(address) as connection:
            answer = connection.request(request)
        answers.append(answer)
        codes = set(_codes(answer))
        return not codes & RETRIABLE

    wait_for(attempt, timeout=60, what=f"a settled answer from {address} (last: {answers[-1:]})")
    return answers[-1]


def _codes(answer: Any) -> Iterable[ErrorCode]:
    if hasattr(answer, "error_code"):
        yield answer.error_code
    for group in getattr(answer, "groups", ()):
        yield group.error_code
    for result in getattr(answer, "results", ()):
        yield result.error_code
    for topic in getattr(answer, "topics", ()):
        for partition in topic.partitions:
            yield partition.error_code


def create_topic(bootstrap: str, wait_for, replication: int = 1) -> None:
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, replication)])

    def led() -> bool:
        with RawConnection(bootstrap) as connection:
            topic = connection.request(metadata_request(TOPIC)).topics[0]
        return topic.error_code == ErrorCode.none and all(p.leader_id >= 0 for p in topic.partitions)

    wait_for(led, timeout=30, what="the topic's leaders")


@pytest.fixture
def single(broker_factory, wait_for) -> BrokerProcess:
    broker = broker_factory(
        1, offsets_topic_num_partitions=OFFSETS_PARTITIONS, group_initial_rebalance_delay_ms=0
    )
    create_topic(broker.bootstrap, wait_for)
    return broker


def test_kafka_python_commits_and_reads_back(single: BrokerProcess) -> None:
    partitions = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    consumer = KafkaConsumer(
        bootstrap_servers=single.bootstrap, group_id="kp-group", enable_auto_commit=False
    )
    try:
        consumer.assign(partitions)
        consumer.commit(
            {tp: OffsetAndMetadata(100 + tp.partition, f"meta-{tp.partition}", -1) for tp in partitions}
        )
        assert [consumer.committed(tp) for tp in partitions] == [100, 101, 102]
        consumer.commit({partitions[0]: OffsetAndMetadata(7, "", -1)})
        assert consumer.committed(partitions[0]) == 7
    finally:
        consumer.close()
    admin = KafkaAdminClient(bootstrap_servers=single.bootstrap)
    try:
        offsets = admin.list_group_offsets({"kp-group": None, "never-committed": None})
    finally:
        admin.close()
    assert {tp: (o.offset, o.metadata) for tp, o in offsets["kp-group"].items()} == {
        partitions[0]: (7, ""),
        partitions[1]: (101, "meta-1"),
        partitions[2]: (102, "meta-2"),
    }
    assert offsets["never-committed"] == {}


@pytest.mark.parametrize("version", range(2, 9))
def test_every_offset_commit_version(single: BrokerProcess, wait_for, version: int) -> None:
    group = f"raw-commit-v{version}"
    _, address = await_coordinator(single.bootstrap, group, wait_for)
    offsets = {(TOPIC, p): 1000 * version + p for p in range(PARTITIONS)}
    answer = served(address, commit_request(version, group, offsets, metadata=f"v{version}"), wait_for)
    assert commit_errors(answer) == dict.fromkeys(offsets, ErrorCode.none)
    for fetch_version in range(1, 9):
        error, rows = fetched(served(address, fetch_request(fetch_version, group, list(offsets)), wait_for))
        assert error == ErrorCode.none
        assert rows == {key: (offset, f"v{version}", ErrorCode.none) for key, offset in offsets.items()}


def test_fetch_all_and_unknown_partitions(single: BrokerProcess, wait_for) -> None:
    group = "fetch-all"
    _, address = await_coordinator(single.bootstrap, group, wait_for)
    served(address, commit_request(8, group, {(TOPIC, 1): 5}), wait_for)
    for version in range(2, 9):
        assert fetched(served(address, fetch_request(version, group, None), wait_for)) == (
            ErrorCode.none,
            {(TOPIC, 1): (5, "", ErrorCode.none)},
        )
    # Nothing committed: -1, no error (as Kafka).
    assert fetched(served(address, fetch_request(8, group, [(TOPIC, 0)]), wait_for))[1] == {
        (TOPIC, 0): (-1, "", ErrorCode.none)
    }


def test_find_coordinator_versions_agree(single: BrokerProcess, wait_for) -> None:
    node, address = await_coordinator(single.bootstrap, "any-group", wait_for)
    for version in range(4):
        assert find_coordinator(single.bootstrap, "any-group", version) == (ErrorCode.none, node, address)
    # Transactions are not offered; an unknown key type is a bad request.
    assert (
        find_coordinator(single.bootstrap, "txn", 4, key_type=1)[0]
        == ErrorCode.transactional_id_authorization_failed
    )
    assert (
        find_coordinator(single.bootstrap, "txn", 3, key_type=1)[0]
        == ErrorCode.transactional_id_authorization_failed
    )
    assert find_coordinator(single.bootstrap, "x", 4, key_type=7)[0] == ErrorCode.invalid_request


def test_bad_input_gets_error_codes_and_the_broker_stays_healthy(single: BrokerProcess, wait_for) -> None:
    _, address = await_coordinator(single.bootstrap, "good", wait_for)
    for bad_group in ("", "g" * 10_000):
        assert find_coordinator(single.bootstrap, bad_group)[0] == ErrorCode.invalid_group_id
        with RawConnection(address) as connection:
            answer = connection.request(commit_request(8, bad_group, {(TOPIC, 0): 1}))
            assert commit_errors(answer) == {(TOPIC, 0): ErrorCode.invalid_group_id}
            assert (
                fetched(connection.request(fetch_request(8, bad_group, None)))[0]
                == ErrorCode.invalid_group_id
            )
    mixed = {(TOPIC, 0): 1, (TOPIC, 99): 1, ("no-such-topic", 0): 1}
    answer = served(address, commit_request(8, "good", mixed), wait_for)
    assert commit_errors(answer) == {
        (TOPIC, 0): ErrorCode.none,
        (TOPIC, 99): ErrorCode.unknown_topic_or_partition,
        ("no-such-topic", 0): ErrorCode.unknown_topic_or_partition,
    }
    answer = served(address, commit_request(8, "good", {(TOPIC, 1): 1}, metadata="m" * 5000), wait_for)
    assert commit_errors(answer) == {(TOPIC, 1): ErrorCode.offset_metadata_too_large}
    # A generation for a group that has none: only assign()-style commits (generation -1) need no group.
    answer = served(
        address, commit_request(8, "no-members", {(TOPIC, 0): 1}, generation=3, member="m"), wait_for
    )
    assert commit_errors(answer) == {(TOPIC, 0): ErrorCode.illegal_generation}
    # "good" has committed without members: a member id and generation it never handed out are refused.
    answer = served(
        address, commit_request(8, "good", {(TOPIC, 0): 2}, generation=1, member="stranger"), wait_for
    )
    assert commit_errors(answer)[(TOPIC, 0)] in {ErrorCode.unknown_member_id, ErrorCode.illegal_generation}
    # Nothing bad was stored, and the broker still answers.
    rows = fetched(served(address, fetch_request(8, "good", None), wait_for))[1]
    assert rows == {(TOPIC, 0): (1, "", ErrorCode.none)}
    assert single.is_running()
    with RawConnection(single.bootstrap) as connection:
        assert connection.request(metadata_request(TOPIC)).topics[0].error_code == ErrorCode.none


def test_clients_cannot_produce_to_the_offsets_topic(single: BrokerProcess, wait_for) -> None:
    await_coordinator(single.bootstrap, "creator", wait_for)  # the offsets topic exists from here on
    with Producer(bootstrap_servers=single.bootstrap, retries=0) as producer:
        future = producer.send("__consumer_offsets", b"forged", key=b"k", partition=0)
        with pytest.raises(InvalidTopicError, match="internal topic"):
            future.get(timeout=30)


def test_offset_delete_and_delete_groups(single: BrokerProcess, wait_for) -> None:
    group = "to-delete"
    _, address = await_coordinator(single.bootstrap, group, wait_for)
    served(address, commit_request(8, group, {(TOPIC, 0): 10, (TOPIC, 1): 11}), wait_for)
    answer = served(address, offset_delete_request(group, TOPIC, 0), wait_for)
    assert answer.error_code == ErrorCode.none
    assert answer.topics[0].partitions[0].error_code == ErrorCode.none
    assert fetched(served(address, fetch_request(8, group, None), wait_for))[1] == {
        (TOPIC, 1): (11, "", ErrorCode.none)
    }
    delete_groups = request_module("delete_groups", 2)
    answer = served(
        address, delete_groups.DeleteGroupsRequest(groups_names=(group, "never-existed")), wait_for
    )
    assert {r.group_id: r.error_code for r in answer.results} == {
        group: ErrorCode.none,
        "never-existed": ErrorCode.group_id_not_found,
    }
    assert fetched(served(address, fetch_request(8, group, None), wait_for))[1] == {}
    answer = served(address, delete_groups.DeleteGroupsRequest(groups_names=(group,)), wait_for)
    assert answer.results[0].error_code == ErrorCode.group_id_not_found


def test_offsets_of_a_deleted_topic_are_removed(single: BrokerProcess, wait_for) -> None:
    group = "loses-a-topic"
    _, address = await_coordinator(single.bootstrap, group, wait_for)
    with Admin(bootstrap_servers=single.bootstrap) as admin:
        admin.create_topics([NewTopic("short-lived", 1, 1)])
    wait_for(
        lambda: (
            commit_errors(served(address, commit_request(8, group, {("short-lived", 0): 3}), wait_for))
            == {("short-lived", 0): ErrorCode.none}
        ),
        timeout=30,
        what="the new topic known to the coordinator",
    )
    served(address, commit_request(8, group, {(TOPIC, 0): 4}), wait_for)
    with Admin(bootstrap_servers=single.bootstrap) as admin:
        admin.delete_topics(["short-lived"])
    wait_for(
        lambda: (
            fetched(served(address, fetch_request(8, group, None), wait_for))[1]
            == {(TOPIC, 0): (4, "", ErrorCode.none)}
        ),
        timeout=30,
        what="the deleted topic's offsets gone",
    )


def test_offsets_survive_coordinator_failover(broker_factory, cluster_store, wait_for) -> None:
    brokers = {
        i: broker_factory(
            i,
            offsets_topic_num_partitions=3,
            offsets_topic_replication_factor=3,
            zookeeper_session_timeout_ms=18000,  # the liveness probe, not session expiry, moves leaders
        )
        for i in (1, 2, 3)
    }
    create_topic(brokers[1].bootstrap, wait_for, replication=3)
    group = "survivor"
    node, address = await_coordinator(brokers[1].bootstrap, group, wait_for)
    wait_for(
        lambda: all(
            len(s.isr) == 3 for s in cluster_store.get_partition_states("__consumer_offsets").values()
        ),
        timeout=60,
        what="every offsets partition fully in sync",
    )
    offsets = {(TOPIC, p): 500 + p for p in range(PARTITIONS)}
    answer = served(address, commit_request(8, group, offsets, metadata="before the crash"), wait_for)
    assert commit_errors(answer) == dict.fromkeys(offsets, ErrorCode.none)
    brokers[node].kill()
    survivor = next(b for i, b in brokers.items() if i != node)
    new_node, new_address = await_coordinator(survivor.bootstrap, group, wait_for, not_on={node})
    assert new_node != node
    error, rows = fetched(served(new_address, fetch_request(8, group, list(offsets)), wait_for))
    assert error == ErrorCode.none
    assert rows == {key: (offset, "before the crash", ErrorCode.none) for key, offset in offsets.items()}
    # The new coordinator takes commits too.
    answer = served(new_address, commit_request(8, group, {(TOPIC, 0): 900}), wait_for)
    assert commit_errors(answer) == {(TOPIC, 0): ErrorCode.none}


# A consumer-protocol subscription (v0) to TOPIC, without user data.
SUBSCRIPTION = struct.pack(">hih", 0, 1, len(TOPIC)) + TOPIC.encode() + struct.pack(">i", -1)


def join_as_only_member(address: str, group: str, wait_for) -> tuple[str, int]:
    """Join `group` (JoinGroup v3, SyncGroup v3) as its only member and leader: (member id, generation)."""
    join = request_module("join_group", 3)
    joined = served(
        address,
        join.JoinGroupRequest(
            group_id=group,
            session_timeout=millis(30_000),
            rebalance_timeout=millis(30_000),
            member_id="",
            protocol_type="consumer",
            protocols=(join.JoinGroupRequestProtocol(name="range", metadata=SUBSCRIPTION),),
        ),
        wait_for,
    )
    assert joined.error_code == ErrorCode.none
    assert joined.leader == joined.member_id
    sync = request_module("sync_group", 3)
    synced = served(
        address,
        sync.SyncGroupRequest(
            group_id=group,
            generation_id=joined.generation_id,
            member_id=joined.member_id,
            group_instance_id=None,
            assignments=(sync.SyncGroupRequestAssignment(member_id=joined.member_id, assignment=b""),),
        ),
        wait_for,
    )
    assert synced.error_code == ErrorCode.none
    return joined.member_id, joined.generation_id


def test_commits_of_a_group_with_members_are_checked(single: BrokerProcess, wait_for) -> None:
    group = "with-members"
    _, address = await_coordinator(single.bootstrap, group, wait_for)
    member, generation = join_as_only_member(address, group, wait_for)
    attempts = {
        "current generation": (generation, member, ErrorCode.none),
        "stale generation": (generation - 1, member, ErrorCode.illegal_generation),
        "unknown member": (generation, "someone-else", ErrorCode.unknown_member_id),
        "no generation while members exist": (-1, "", ErrorCode.unknown_member_id),
    }
    for what, (attempt_generation, attempt_member, expected) in attempts.items():
        request = commit_request(
            8, group, {(TOPIC, 0): 10}, generation=attempt_generation, member=attempt_member
        )
        with RawConnection(address) as connection:
            assert commit_errors(connection.request(request)) == {(TOPIC, 0): expected}, what
    # A group with members cannot be deleted, nor the offsets of a topic its members subscribe to.
    delete_groups = request_module("delete_groups", 2)
    with RawConnection(address) as connection:
        answer = connection.request(delete_groups.DeleteGroupsRequest(groups_names=(group,)))
        assert answer.results[0].error_code == ErrorCode.non_empty_group
        answer = connection.request(offset_delete_request(group, TOPIC, 0))
    assert answer.error_code == ErrorCode.none
    assert answer.topics[0].partitions[0].error_code == ErrorCode.group_subscribed_to_topic
    assert fetched(served(address, fetch_request(8, group, None), wait_for))[1] == {
        (TOPIC, 0): (10, "", ErrorCode.none)
    }
    assert single.is_running()


def test_offsets_expire_after_retention(broker_factory, wait_for) -> None:
    # offsets.retention.minutes is whole minutes (Kafka's unit): the smallest retention is one minute.
    broker = broker_factory(
        1,
        offsets_topic_num_partitions=OFFSETS_PARTITIONS,
        offsets_retention_minutes=1,
        offsets_retention_check_interval_ms=500,
    )
    create_topic(broker.bootstrap, wait_for)
    group = "forgetful"
    _, address = await_coordinator(broker.bootstrap, group, wait_for)
    served(address, commit_request(8, group, {(TOPIC, 0): 3}), wait_for)
    assert fetched(served(address, fetch_request(8, group, None), wait_for))[1] == {
        (TOPIC, 0): (3, "", ErrorCode.none)
    }
    wait_for(
        lambda: fetched(served(address, fetch_request(8, group, None), wait_for))[1] == {},
        timeout=180,
        what="the offset expired after one minute",
    )
    # The group, empty and without offsets, went with them.
    delete_groups = request_module("delete_groups", 2)
    answer = served(address, delete_groups.DeleteGroupsRequest(groups_names=(group,)), wait_for)
    assert answer.results[0].error_code == ErrorCode.group_id_not_found
