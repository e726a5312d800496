"""The coordination room against a real ZooKeeper server: launcher, registration, topics, state, configs,
controller election, watches and session expiry."""

from __future__ import annotations

import json
import os
import queue
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from backbone.coordination import (
    BrokerAlreadyRegisteredError,
    BrokerRegistration,
    ClusterStore,
    ConfigChange,
    CoordinationError,
    CoordinationUnavailableError,
    EndPoint,
    PartitionState,
    PortInUseError,
    SessionEvent,
    TopicAssignment,
    VersionConflictError,
    ZooKeeperNotInstalledError,
    ZooKeeperServer,
    find_free_port,
)
from backbone.coordination.zookeeper_server import MAIN_CLASS, find_java, four_letter_word
from backbone.protocol.errors import (
    DuplicateBrokerRegistrationError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    InvalidUpdateVersionError,
    NotControllerError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

StoreFactory = Callable[..., ClusterStore]
WaitFor = Callable[..., None]
TICK_TIME_MS = 200  # for servers these tests start themselves


def broker(broker_id: int, rack: str | None = None, port: int | None = None) -> BrokerRegistration:
    return BrokerRegistration(
        broker_id, (EndPoint("PLAINTEXT", "127.0.0.1", port or 9092 + broker_id),), rack=rack
    )


def register_brokers(store_factory: StoreFactory, racks: dict[int, str | None]) -> list[ClusterStore]:
    """One store (one session) per broker, as real brokers have."""
    stores = []
    for broker_id, rack in racks.items():
        store = store_factory()
        store.register_broker(broker(broker_id, rack))
        stores.append(store)
    return stores


@pytest.fixture
def raw_zk(zookeeper: ZooKeeperServer, chroot: str, cluster_store: ClusterStore) -> Iterator[KazooClient]:
    """A plain kazoo client on the test's chroot (which cluster_store created), to check bytes written."""
    client = KazooClient(hosts=zookeeper.connect_string + chroot)
    client.start(timeout=10)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def raw_json(client: KazooClient, path: str) -> dict[str, object]:
    data, _ = client.get(path)
    return dict(json.loads(data))


def expire_session(zookeeper: ZooKeeperServer, store: ClusterStore) -> None:
    """Expire `store`'s session: a second client joins it with the same id and password, then closes it."""
    credentials = store.session_credentials
    assert credentials is not None
    twin = KazooClient(hosts=zookeeper.connect_string, client_id=credentials, timeout=store.session_timeout)
    twin.start(timeout=10)
    twin.stop()
    twin.close()


class Recorder:
    """Collects callback arguments from watch threads for the test thread to wait on."""

    def __init__(self) -> None:
        self.calls: list[object] = []
        self._lock = threading.Lock()

    def __call__(self, value: object) -> None:
        with self._lock:
            self.calls.append(value)

    @property
    def last(self) -> object:
        with self._lock:
            return self.calls[-1] if self.calls else None

    def snapshot(self) -> list[object]:
        with self._lock:
            return list(self.calls)


# -- the launcher -------------------------------------------------------------------------------


@pytest.mark.integration
def test_server_serves_with_generated_config_and_logs_to_its_directory(zookeeper: ZooKeeperServer) -> None:
    assert "Mode: standalone" in four_letter_word(zookeeper.host, zookeeper.port, "srvr")
    assert zookeeper.is_running() and zookeeper.pid is not None
    assert zookeeper.ready_seconds is not None and zookeeper.ready_seconds > 0
    command = zookeeper.command
    assert MAIN_CLASS in command and "-Xmx256m" in command and command[-1] == str(zookeeper.config_file)
    config = zookeeper.config_file.read_text().splitlines()
    for line in ("clientPortAddress=127.0.0.1", f"clientPort={zookeeper.port}", "admin.enableServer=false"):
        assert line in config
    assert f"tickTime={zookeeper.tick_time_ms}" in config
    assert zookeeper.log_file.is_file() and "binding to port" in zookeeper.log_file.read_text()
    assert zookeeper.pid_file.read_text().strip() == str(zookeeper.pid)


@pytest.mark.integration
def test_context_manager_starts_and_stop_reaps_even_without_grace(tmp_path: Path) -> None:
    server = ZooKeeperServer(tmp_path, find_free_port(), tick_time_ms=TICK_TIME_MS, force_sync=False)
    with server:
        pid = server.pid
        assert pid is not None
        assert "Mode: standalone" in four_letter_word(server.host, server.port, "srvr")
        assert server.wait(timeout=0.05) is None  # still serving
        # No grace period: SIGTERM, then SIGKILL at once unless the JVM is already gone.
        status = server.stop(timeout=0.0)
    assert status in (143, -9)
    assert server.pid is None and not server.is_running()
    assert not server.pid_file.exists()
    with pytest.raises(ChildProcessError):  # reaped: no longer our child
        os.waitpid(pid, os.WNOHANG)


@pytest.mark.integration
def test_port_in_use_is_refused_before_launching(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    second = ZooKeeperServer(tmp_path, zookeeper.port)
    with pytest.raises(PortInUseError, match=str(zookeeper.port)):
        second.start(timeout=10)
    assert second.pid is None


@pytest.mark.integration
def test_restarted_server_keeps_its_data(tmp_path: Path) -> None:
    server = ZooKeeperServer(tmp_path, find_free_port(), tick_time_ms=TICK_TIME_MS, force_sync=False)
    with server, ClusterStore(server.connect_string + "/kept") as store:
        cluster_id = store.get_or_create_cluster_id()
    server.port = find_free_port()  # a new port proves the data, not a lingering socket, answers
    with server, ClusterStore(server.connect_string + "/kept") as store:
        assert store.get_cluster_id() == cluster_id


@pytest.mark.unit
def test_missing_jars_or_java_say_what_to_install(tmp_path: Path) -> None:
    server = ZooKeeperServer(tmp_path, 2181, java="/usr/bin/java", java_dir=tmp_path / "no-jars")
    with pytest.raises(ZooKeeperNotInstalledError, match="apt-get install zookeeper"):
        server.start()
    assert not server.config_file.exists()  # nothing written before the check
    with pytest.raises(ZooKeeperNotInstalledError, match="apt-get install zookeeper"):
        find_java([str(tmp_path / "java")])


# -- connection and cluster id ------------------------------------------------------------------


@pytest.mark.integration
def test_start_creates_chroot_and_kafka_persistent_paths(
    cluster_store: ClusterStore, raw_zk: KazooClient
) -> None:
    for path in (
        "/brokers/ids",
        "/brokers/topics",
        "/config/changes",
        "/config/topics",
        "/admin/delete_topics",
    ):
        assert raw_zk.exists(path) is not None, path
    assert cluster_store.list_topics() == [] and cluster_store.list_brokers() == []


@pytest.mark.integration
def test_unreachable_zookeeper_is_a_clear_retriable_error() -> None:
    store = ClusterStore(f"127.0.0.1:{find_free_port()}/x", connect_timeout=0.5)
    try:
        with pytest.raises(CoordinationUnavailableError, match="backbone zookeeper start"):
            store.start()
    finally:
        store.close()


@pytest.mark.integration
def test_cluster_id_is_created_once(store_factory: StoreFactory, raw_zk: KazooClient) -> None:
    first, second = store_factory(), store_factory()
    assert first.get_cluster_id() is None
    cluster_id = first.get_or_create_cluster_id()
    assert second.get_or_create_cluster_id() == cluster_id
    assert raw_json(raw_zk, "/cluster/id") == {"version": "1", "id": cluster_id}


# -- brokers ------------------------------------------------------------------------------------


@pytest.mark.integration
def test_registering_a_live_broker_id_twice_fails_naming_the_id(store_factory: StoreFactory) -> None:
    first, second = store_factory(), store_factory()
    registered = first.register_broker(broker(1))
    assert registered.epoch > 0
    with pytest.raises(BrokerAlreadyRegisteredError, match="broker id 1 is already registered") as caught:
        second.register_broker(broker(1, port=9999))
    assert isinstance(caught.value, DuplicateBrokerRegistrationError)
    # The same session registering again (a retry after a lost answer) is not a conflict.
    assert first.register_broker(broker(1)).epoch == registered.epoch
    assert second.get_broker(1) is not None and second.get_broker(1).port == 9093


@pytest.mark.integration
def test_broker_znode_is_kafka_v5_json(cluster_store: ClusterStore, raw_zk: KazooClient) -> None:
    registration = BrokerRegistration(
        7,
        (EndPoint("PLAINTEXT", "10.0.0.7", 9092), EndPoint("REPLICATION", "10.0.0.7", 9093, "SSL")),
        rack="rack-a",
        timestamp_ms=1700000000000,
    )
    cluster_store.register_broker(registration)
    assert raw_json(raw_zk, "/brokers/ids/7") == {
        "version": 5,
        "host": "10.0.0.7",
        "port": 9092,
        "endpoints": ["PLAINTEXT://10.0.0.7:9092", "REPLICATION://10.0.0.7:9093"],
        "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT", "REPLICATION": "SSL"},
        "jmx_port": -1,
        "rack": "rack-a",
        "timestamp": "1700000000000",
        "features": {},
    }
    _, stat = raw_zk.get("/brokers/ids/7")
    assert stat.ephemeralOwner == cluster_store.session_id


@pytest.mark.integration
def test_broker_node_disappears_when_its_session_closes_and_watchers_see_it(
    store_factory: StoreFactory, wait_for: WaitFor
) -> None:
    observer = store_factory()
    seen = Recorder()
    observer.watch_brokers(lambda brokers: seen([b.broker_id for b in brokers]))
    assert seen.last == []
    brokers = register_brokers(store_factory, {1: "r1", 2: "r2"})
    wait_for(lambda: seen.last == [1, 2], what="both brokers in the watch")
    listed = observer.list_brokers()
    assert [(b.broker_id, b.rack, b.endpoints[0].port) for b in listed] == [(1, "r1", 9093), (2, "r2", 9094)]
    brokers[0].close()
    wait_for(lambda: seen.last == [2], what="broker 1 gone from the watch")
    assert observer.broker_ids() == [2] and observer.get_broker(1) is None


@pytest.mark.integration
def test_unregister_deletes_only_our_own_node(store_factory: StoreFactory) -> None:
    first = store_factory()
    first.register_broker(broker(3))
    first.unregister_broker()
    assert first.get_broker(3) is None and first.registered_broker is None
    second = store_factory()
    second.register_broker(broker(3))
    first.unregister_broker()  # holds nothing any more: must not touch the other session's node
    assert first.get_broker(3) is not None


# -- topics -------------------------------------------------------------------------------------


@pytest.mark.integration
def test_create_topic_writes_assignment_config_and_states_in_kafka_format(
    store_factory: StoreFactory, raw_zk: KazooClient
) -> None:
    store = register_brokers(store_factory, {1: None, 2: None, 3: None})[0]
    created = store.create_topic("orders", 3, 2, configs={"retention.ms": "3600000"}, start_index=0)
    assert created.partitions == {0: (1, 2), 1: (2, 3), 2: (3, 1)}
    assert raw_json(raw_zk, "/brokers/topics/orders") == {
        "version": 3,
        "partitions": {"0": [1, 2], "1": [2, 3], "2": [3, 1]},
        "adding_replicas": {},
        "removing_replicas": {},
        "topic_id": created.topic_id,
    }
    assert created.topic_id is not None and len(created.topic_id) == 22
    assert raw_json(raw_zk, "/brokers/topics/orders/partitions/1/state") == {
        "controller_epoch": 0,
        "leader": 2,
        "version": 1,
        "leader_epoch": 0,
        "isr": [2, 3],
    }
    assert raw_json(raw_zk, "/config/topics/orders") == {"version": 1, "config": {"retention.ms": "3600000"}}
    assert store.get_topic("orders") == created
    assert store.get_topic_config("orders") == {"retention.ms": "3600000"}
    assert store.list_topics() == ["orders"] and store.topic_exists("orders")
    with pytest.raises(TopicAlreadyExistsError, match="'orders' already exists"):
        store.create_topic("orders", 1, 1)


@pytest.mark.integration
def test_create_topic_rejects_bad_requests_and_validate_only_writes_nothing(
    store_factory: StoreFactory,
) -> None:
    store = register_brokers(store_factory, {1: None, 2: None})[0]
    planned = store.create_topic("dry", 4, 2, validate_only=True)
    assert planned.partition_count == 4 and not store.topic_exists("dry")
    with pytest.raises(InvalidReplicationFactorError, match="larger than available brokers: 2"):
        store.create_topic("t", 1, 3)
    with pytest.raises(InvalidPartitionsError):
        store.create_topic("t", 0, 1)
    with pytest.raises(InvalidTopicError):
        store.create_topic("bad/name", 1, 1)
    with pytest.raises(InvalidReplicaAssignmentError, match=r"Unknown broker\(s\) \[9\]"):
        store.create_topic("t", assignment={0: [1, 9]})
    with pytest.raises(InvalidConfigError):
        store.create_topic("t", 1, 1, configs={"retention.ms": 1000})  # type: ignore[dict-item]
    store.create_topic("metrics.cpu", 1, 1)
    with pytest.raises(InvalidTopicError, match="collides"):
        store.create_topic("metrics_cpu", 1, 1)
    assert store.list_topics() == ["metrics.cpu"]


@pytest.mark.integration
def test_manual_assignment_is_kept_as_given(store_factory: StoreFactory) -> None:
    store = register_brokers(store_factory, {1: None, 2: None, 3: None})[0]
    created = store.create_topic("manual", assignment={0: [3, 1], 1: [1, 2]})
    assert store.get_topic("manual").partitions == {0: (3, 1), 1: (1, 2)} == created.partitions
    assert store.get_partition_state("manual", 0).leader == 3


@pytest.mark.integration
def test_assignment_spreads_leaders_and_respects_racks(store_factory: StoreFactory) -> None:
    racks = {1: "a", 2: "a", 3: "b", 4: "b"}
    store = register_brokers(store_factory, racks)[0]
    topic = store.create_topic("spread", 8, 2)
    leaders = Counter(replicas[0] for replicas in topic.partitions.values())
    assert leaders == {1: 2, 2: 2, 3: 2, 4: 2}
    for replicas in topic.partitions.values():
        assert {racks[r] for r in replicas} == {"a", "b"}, topic.partitions


@pytest.mark.integration
def test_add_partitions_continues_the_assignment(store_factory: StoreFactory, raw_zk: KazooClient) -> None:
    store = register_brokers(store_factory, {1: None, 2: None, 3: None})[0]
    created = store.create_topic("grow", 3, 2, start_index=0)
    grown = store.add_partitions("grow", 5)
    assert grown.topic_id == created.topic_id
    assert {p: grown.partitions[p] for p in (0, 1, 2)} == created.partitions
    assert sorted(grown.partitions) == [0, 1, 2, 3, 4]
    assert all(len(set(r)) == 2 for r in grown.partitions.values())
    assert raw_zk.exists("/brokers/topics/grow/partitions/4/state") is not None
    assert store.get_topic("grow") == grown
    with pytest.raises(InvalidPartitionsError, match="already has 5"):
        store.add_partitions("grow", 5)
    with pytest.raises(InvalidPartitionsError, match="higher than the requested 4"):
        store.add_partitions("grow", 4)
    with pytest.raises(InvalidPartitionsError, match="2 assignments provided"):
        store.add_partitions("grow", 6, assignment=[[1, 2], [2, 3]])
    manual = store.add_partitions("grow", 6, assignment=[[3, 2]])
    assert manual.partitions[5] == (3, 2)
    with pytest.raises(UnknownTopicOrPartitionError):
        store.add_partitions("missing", 2)
    store.mark_topic_for_deletion("grow")
    with pytest.raises(InvalidTopicError, match="queued for deletion"):
        store.add_partitions("grow", 7)


@pytest.mark.integration
def test_topic_deletion_marks_then_removes_everything(
    store_factory: StoreFactory, raw_zk: KazooClient, wait_for: WaitFor
) -> None:
    store = register_brokers(store_factory, {1: None})[0]
    store.create_topic("doomed", 2, 1, configs={"cleanup.policy": "compact"})
    queued, assignment = Recorder(), Recorder()
    store.watch_topic_deletions(queued)
    store.watch_topic("doomed", assignment)
    assert isinstance(assignment.last, TopicAssignment)
    store.mark_topic_for_deletion("doomed")
    store.mark_topic_for_deletion("doomed")  # marking twice is harmless
    wait_for(lambda: queued.last == ["doomed"], what="deletion queue watch")
    assert store.topics_marked_for_deletion() == ["doomed"]
    store.delete_topic("doomed")
    wait_for(lambda: assignment.last is None, what="topic watch to report the deletion")
    for path in ("/brokers/topics/doomed", "/config/topics/doomed"):
        assert raw_zk.exists(path) is None, path
    assert store.list_topics() == []
    with pytest.raises(UnknownTopicOrPartitionError):
        store.delete_topic("doomed")
    with pytest.raises(UnknownTopicOrPartitionError):
        store.mark_topic_for_deletion("doomed")
    # As in Kafka, the name stays taken until the replica's broker has deleted its data.
    assert json.loads(raw_zk.get("/admin/delete_topics/doomed")[0]) == {"version": 1, "brokers": [1]}
    with pytest.raises(TopicAlreadyExistsError, match="'doomed' is marked for deletion"):
        store.create_topic("doomed", 1, 1)
    store.replica_data_deleted("doomed", 1)
    assert store.topics_marked_for_deletion() == []
    store.replica_data_deleted("doomed", 1)  # said twice: harmless
    store.create_topic("doomed", 1, 1)  # the name is free again, with a fresh (empty) config
    assert store.get_topic_config("doomed") == {}


@pytest.mark.integration
def test_topic_deletion_waits_for_live_replicas_only(store_factory: StoreFactory) -> None:
    one, two, three = register_brokers(store_factory, {1: None, 2: None, 3: None})
    one.create_topic("spread", 3, 3)
    one.delete_topic("spread")
    one.replica_data_deleted("spread", 1)
    with pytest.raises(TopicAlreadyExistsError, match="marked for deletion"):
        one.create_topic("spread", 1, 1)  # brokers 2 and 3 still hold its data
    two.replica_data_deleted("spread", 2)
    three.close()  # broker 3 is gone: no live broker holds data of the topic any more
    one.create_topic("spread", 1, 1)
    assert one.topics_marked_for_deletion() == []


@pytest.mark.integration
def test_topic_watches_fire_on_create_and_change(store_factory: StoreFactory, wait_for: WaitFor) -> None:
    store = register_brokers(store_factory, {1: None})[0]
    topics, assignment = Recorder(), Recorder()
    store.watch_topics(topics)
    store.watch_topic("watched", assignment)
    assert topics.last == [] and assignment.last is None
    store.create_topic("watched", 1, 1)
    wait_for(lambda: topics.last == ["watched"], what="topic list watch")
    wait_for(lambda: isinstance(assignment.last, TopicAssignment), what="topic watch on creation")
    store.add_partitions("watched", 2)
    wait_for(
        lambda: isinstance(assignment.last, TopicAssignment) and assignment.last.partition_count == 2,
        what="topic watch on new partitions",
    )


@pytest.mark.integration
def test_cancelled_watch_stops_calling_back(store_factory: StoreFactory, wait_for: WaitFor) -> None:
    store = register_brokers(store_factory, {1: None})[0]
    kept, cancelled = Recorder(), Recorder()
    store.watch_topics(kept)
    watch = store.watch_topics(cancelled)
    watch.cancel()
    store.create_topic("after-cancel", 1, 1)
    wait_for(lambda: kept.last == ["after-cancel"], what="the live watch")
    assert cancelled.snapshot() == [[]] and not watch.active


# -- partition state ----------------------------------------------------------------------------


@pytest.mark.integration
def test_versioned_isr_update_rejects_a_stale_writer(store_factory: StoreFactory) -> None:
    store = register_brokers(store_factory, {1: None, 2: None})[0]
    store.create_topic("isr", 1, 2, start_index=0)
    seen_by_a = store.get_partition_state("isr", 0)
    seen_by_b = store.get_partition_state("isr", 0)
    shrunk = type(seen_by_a)(leader=1, leader_epoch=0, isr=(1,), controller_epoch=0)
    new_version = store.set_partition_state("isr", 0, shrunk, seen_by_a.zk_version)
    assert new_version == seen_by_a.zk_version + 1
    other = type(seen_by_b)(leader=2, leader_epoch=1, isr=(2,), controller_epoch=0)
    with pytest.raises(VersionConflictError, match="no longer at version 0") as caught:
        store.set_partition_state("isr", 0, other, seen_by_b.zk_version)
    assert isinstance(caught.value, InvalidUpdateVersionError)
    current = store.get_partition_state("isr", 0)
    assert (current.leader, current.isr, current.zk_version) == (1, (1,), new_version)
    with pytest.raises(UnknownTopicOrPartitionError):
        store.set_partition_state("isr", 5, shrunk, 0)


@pytest.mark.integration
def test_partition_state_write_is_fenced_by_the_controller_epoch(store_factory: StoreFactory) -> None:
    store = register_brokers(store_factory, {1: None})[0]
    store.create_topic("fenced", 1, 1)
    elected = store.try_become_controller(1)
    assert elected is not None
    state = store.get_partition_state("fenced", 0)
    version = store.set_partition_state(
        "fenced", 0, state, state.zk_version, controller_epoch_version=elected.zk_version
    )
    store.increment_controller_epoch(elected.zk_version)  # a newer controller took over
    with pytest.raises(NotControllerError):
        store.set_partition_state("fenced", 0, state, version, controller_epoch_version=elected.zk_version)
    assert store.get_partition_state("fenced", 0).zk_version == version


@pytest.mark.integration
def test_isr_change_notifications_are_read_once(cluster_store: ClusterStore, wait_for: WaitFor) -> None:
    pending = Recorder()
    cluster_store.watch_isr_change_notifications(pending)
    name = cluster_store.notify_isr_change([("a", 0), ("b", 1)])
    cluster_store.notify_isr_change([("a", 0)])
    assert name.startswith("isr_change_")
    wait_for(lambda: pending.last is not None and len(pending.last) == 2, what="two notifications")
    assert cluster_store.pop_isr_change_notifications() == {("a", 0), ("b", 1)}
    assert cluster_store.pop_isr_change_notifications() == set()


# -- configs ------------------------------------------------------------------------------------


@pytest.mark.integration
def test_configs_round_trip_with_change_notifications(
    store_factory: StoreFactory, raw_zk: KazooClient, wait_for: WaitFor
) -> None:
    store = register_brokers(store_factory, {1: None})[0]
    store.create_topic("configured", 1, 1)
    store.set_broker_config(None, {"log.retention.ms": "1"})  # before the watch: counts as seen
    changes = Recorder()
    store.watch_config_changes(changes)
    store.set_topic_config("configured", {"retention.ms": "60000", "cleanup.policy": "delete"})
    store.set_broker_config(1, {"log.cleaner.threads": "2"})
    store.set_broker_config(None, {"log.retention.ms": "86400000"})
    wait_for(lambda: len(changes.snapshot()) == 3, what="three config change notifications")
    received = changes.snapshot()
    assert [(c.entity_type, c.entity_name) for c in received if isinstance(c, ConfigChange)] == [
        ("topics", "configured"),
        ("brokers", "1"),
        ("brokers", "<default>"),
    ]
    sequences = [c.sequence for c in received if isinstance(c, ConfigChange)]
    assert sequences == sorted(sequences)
    assert store.get_topic_config("configured") == {"retention.ms": "60000", "cleanup.policy": "delete"}
    assert store.get_broker_config(1) == {"log.cleaner.threads": "2"}
    assert store.get_broker_config() == {"log.retention.ms": "86400000"}
    assert raw_json(raw_zk, "/config/brokers/<default>") == {
        "version": 1,
        "config": {"log.retention.ms": "86400000"},
    }
    last = sorted(raw_zk.get_children("/config/changes"))[-1]
    assert raw_json(raw_zk, f"/config/changes/{last}") == {"version": 2, "entity_path": "brokers/<default>"}
    assert [c.entity_name for c in store.config_changes(after_sequence=sequences[0])] == ["1", "<default>"]
    with pytest.raises(UnknownTopicOrPartitionError):
        store.set_topic_config("missing", {"retention.ms": "1"})
    with pytest.raises(InvalidConfigError):
        store.set_broker_config(1, {"num.io.threads": 8})  # type: ignore[dict-item]


@pytest.mark.integration
def test_old_config_notifications_are_purged(cluster_store: ClusterStore, wait_for: WaitFor) -> None:
    cluster_store.set_broker_config(None, {"a": "1"})
    cluster_store.set_broker_config(None, {"a": "2"})
    assert cluster_store.purge_config_changes(older_than_ms=60_000) == 0  # both are fresh
    purged = 0

    def purge_all() -> bool:
        # "Older than 0 ms" turns true within a millisecond of creation: poll instead of sleeping.
        nonlocal purged
        purged += cluster_store.purge_config_changes(older_than_ms=0)
        return purged == 2

    wait_for(purge_all, what="both notifications purged")
    assert cluster_store.config_changes() == []


# -- controller ---------------------------------------------------------------------------------


@pytest.mark.integration
def test_controller_election_epochs_and_failover(
    store_factory: StoreFactory, raw_zk: KazooClient, wait_for: WaitFor
) -> None:
    first, second = store_factory(), store_factory()
    seen = Recorder()
    second.watch_controller(lambda info: seen(info.broker_id if info else None))
    assert seen.last is None and second.get_controller_epoch() is None
    won = first.try_become_controller(1)
    assert won is not None and won.epoch == 1
    assert second.try_become_controller(2) is None
    assert first.try_become_controller(1) == won  # asking again while holding it changes nothing
    wait_for(lambda: seen.last == 1, what="controller watch to see broker 1")
    controller = raw_json(raw_zk, "/controller")
    assert (
        controller["version"] == 2
        and controller["brokerid"] == 1
        and controller["kraftControllerEpoch"] == -1
    )
    assert isinstance(controller["timestamp"], str)
    assert raw_zk.get("/controller_epoch")[0] == b"1"
    first.close()  # the controller's session ends: /controller goes with it
    wait_for(lambda: seen.last is None, what="controller watch to see no controller")
    taken = second.try_become_controller(2)
    assert taken is not None and taken.epoch == 2
    with pytest.raises(VersionConflictError):
        second.increment_controller_epoch(won.zk_version)
    assert second.resign_controller() is True and second.get_controller() is None
    assert second.resign_controller() is False


@pytest.mark.integration
def test_producer_id_blocks_never_overlap(store_factory: StoreFactory, raw_zk: KazooClient) -> None:
    first, second = store_factory(), store_factory()
    a = first.allocate_producer_id_block(1, size=100)
    b = second.allocate_producer_id_block(2, size=100)
    assert (a.first, a.last, b.first, b.last) == (0, 99, 100, 199)
    assert raw_json(raw_zk, "/latest_producer_id_block") == {
        "version": 1,
        "broker": 2,
        "block_start": "100",
        "block_end": "199",
    }


# -- sessions -----------------------------------------------------------------------------------


@pytest.mark.integration
def test_session_expiry_re_registers_the_broker_and_keeps_watches(
    zookeeper: ZooKeeperServer, store_factory: StoreFactory, wait_for: WaitFor
) -> None:
    store = store_factory()
    events = Recorder()
    store.add_session_listener(events)
    before = store.register_broker(broker(5))
    old_session = store.session_id
    topics = Recorder()
    store.watch_topics(topics)

    expire_session(zookeeper, store)

    wait_for(lambda: SessionEvent.NEW_SESSION in events.snapshot(), timeout=20, what="a new session")
    assert SessionEvent.EXPIRED in events.snapshot()
    assert events.snapshot().index(SessionEvent.EXPIRED) < events.snapshot().index(SessionEvent.NEW_SESSION)
    assert store.session_id not in (None, old_session)
    after = store.get_broker(5)
    assert after is not None and after.epoch > before.epoch
    assert store.registered_broker is not None and store.registered_broker.epoch == after.epoch
    assert not store.registration_pending
    store.register_broker(broker(5))  # the new session owns the node: registering again is fine
    other = store_factory()
    other.create_topic("after-expiry", assignment={0: [5]})
    wait_for(lambda: topics.last == ["after-expiry"], what="the topic watch to survive the expiry")


@pytest.mark.integration
def test_failed_re_registration_is_reported(zookeeper: ZooKeeperServer, store_factory: StoreFactory) -> None:
    store, usurper = store_factory(), store_factory()
    store.register_broker(broker(6))
    expired_seen, release = threading.Event(), threading.Event()
    events: queue.Queue[SessionEvent] = queue.Queue()

    def listener(event: SessionEvent) -> None:
        events.put(event)
        if event is SessionEvent.EXPIRED:
            # Hold the store's session thread until another broker has taken id 6 (bounded wait).
            expired_seen.set()
            release.wait(timeout=20)

    store.add_session_listener(listener)
    expire_session(zookeeper, store)
    assert expired_seen.wait(timeout=20), "the store never reported the expiry"
    try:
        usurper.register_broker(broker(6, port=9999))
    finally:
        release.set()
    received: list[SessionEvent] = []
    while SessionEvent.REGISTRATION_FAILED not in received and len(received) < 10:
        received.append(events.get(timeout=20))
    assert SessionEvent.EXPIRED in received
    assert received.index(SessionEvent.EXPIRED) < received.index(SessionEvent.REGISTRATION_FAILED)
    assert SessionEvent.NEW_SESSION not in received
    assert store.registration_pending
    current = store.get_broker(6)
    assert current is not None and current.port == 9999


@pytest.mark.integration
def test_corrupt_znode_is_a_coordination_error(cluster_store: ClusterStore, raw_zk: KazooClient) -> None:
    raw_zk.create("/brokers/topics/corrupt", b"{not json")
    with pytest.raises(CoordinationError, match="corrupt"):
        cluster_store.get_topic("corrupt")


def test_partition_state_watch_sees_every_change(cluster_store) -> None:
    cluster_store.register_broker(BrokerRegistration(1, (EndPoint("PLAINTEXT", "127.0.0.1", 9092),)))
    cluster_store.create_topic("watched", partitions=1, replication_factor=1)
    seen: list[int | None] = []
    changed = threading.Condition()

    def on_state(state: PartitionState | None) -> None:
        with changed:
            seen.append(None if state is None else state.leader_epoch)
            changed.notify_all()

    watch = cluster_store.watch_partition_state("watched", 0, on_state)
    try:
        current = cluster_store.get_partition_state("watched", 0)
        bumped = PartitionState(leader=1, leader_epoch=current.leader_epoch + 1, isr=(1,), controller_epoch=0)
        cluster_store.set_partition_state("watched", 0, bumped, current.zk_version)
        with changed:
            assert changed.wait_for(lambda: len(seen) >= 2, timeout=10)
        assert seen[:2] == [current.leader_epoch, current.leader_epoch + 1]
    finally:
        watch.cancel()
