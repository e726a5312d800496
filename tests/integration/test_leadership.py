"""Leadership moves on purpose: leader elections (preferred and unclean; on demand from the admin client,
kafka-python and the CLI, and the controller's automatic rebalance) give it back after a failover.
Controlled shutdown is tested in test_broker_failover.py."""

from __future__ import annotations

import json

import pytest
from kafka import KafkaAdminClient
from kio.schema.elect_leaders.v2 import request as elect_leaders_v2

from backbone.client import Admin, NewTopic, TopicPartition
from backbone.protocol.errors import (
    ElectionNotNeededError,
    PreferredLeaderNotAvailableError,
    UnknownTopicOrPartitionError,
)
from tests.helpers.requests import metadata_request, millis
from tests.helpers.wire import RawConnection
from tests.integration.cli_support import run, run_ok

pytestmark = pytest.mark.integration

TOPIC = "led"
NOT_CONTROLLER = 41
PREFERRED, UNCLEAN = 0, 1


def start(broker_factory, **props):
    brokers = [broker_factory(i, **props) for i in (1, 2, 3)]
    bootstrap = ",".join(b.bootstrap for b in brokers)
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic(TOPIC, 3, 3)])
    return brokers, bootstrap


def state(cluster_store, partition: int = 0):
    return cluster_store.get_partition_state(TOPIC, partition)


def preferred(cluster_store, partition: int = 0) -> int:
    return cluster_store.get_topic(TOPIC).partitions[partition][0]


def full_isrs(cluster_store) -> bool:
    return all(len(state(cluster_store, p).isr) == 3 for p in range(3))


def controller_view(brokers, cluster_store) -> tuple[set[int], dict[int, tuple[int, ...]]]:
    """The live brokers and ISRs in the controller's own metadata, which is what its elections go by:
    it learns of a change through its ZooKeeper watch a moment after ZooKeeper has it."""
    controller = cluster_store.get_controller().broker_id
    with RawConnection(brokers[controller - 1].bootstrap) as raw:
        response = raw.request(metadata_request(TOPIC))
    isrs = {int(p.partition_index): tuple(p.isr_nodes) for t in response.topics for p in t.partitions}
    return {int(b.node_id) for b in response.brokers}, isrs


def controller_sees_full_isrs(brokers, cluster_store) -> bool:
    _, isrs = controller_view(brokers, cluster_store)
    return len(isrs) == 3 and all(len(isr) == 3 for isr in isrs.values())


def displace(brokers, broker_id: int, cluster_store, wait_for) -> None:
    """Stop a broker and start it again: its partitions fail over and stay with the new leaders."""
    broker = brokers[broker_id - 1]
    broker.stop(timeout=30)
    broker.start()
    wait_for(
        lambda: controller_sees_full_isrs(brokers, cluster_store),
        timeout=60,
        what=f"broker {broker_id} back in every ISR",
    )


def describe_fields(bootstrap: str) -> dict[int, dict[str, str]]:
    """`backbone topics describe` as {partition: {field: value}}."""
    lines = run_ok("topics", "describe", TOPIC, "--bootstrap-server", bootstrap).decode().splitlines()
    rows = [
        dict(f.split(": ", 1) for f in line.strip().split("\t")) for line in lines if "Partition:" in line
    ]
    return {int(row["Partition"]): row for row in rows}


def elect_raw(bootstrap: str, topic: str, partition: int):
    with RawConnection(bootstrap) as raw:
        return raw.request(
            elect_leaders_v2.ElectLeadersRequest(
                election_type=PREFERRED,
                topic_partitions=(elect_leaders_v2.TopicPartitions(topic=topic, partitions=(partition,)),),
                timeout=millis(10_000),
            )
        )


def test_preferred_election_gives_leadership_back(broker_factory, cluster_store, wait_for) -> None:
    brokers, bootstrap = start(broker_factory, auto_leader_rebalance_enable="false")
    wait_for(lambda: full_isrs(cluster_store), timeout=30, what="full ISRs")
    first = brokers[preferred(cluster_store) - 1]
    first.stop(timeout=30)
    wait_for(
        lambda: state(cluster_store).leader not in (-1, first.broker_id), timeout=30, what="a new leader"
    )
    tp = TopicPartition(TOPIC, 0)
    with Admin(bootstrap_servers=bootstrap) as admin:
        outcome = admin.elect_leaders("preferred", [tp])[tp]
        assert isinstance(outcome, PreferredLeaderNotAvailableError)
        assert "not live or not in sync" in str(outcome)
        first.start()
        wait_for(
            lambda: controller_sees_full_isrs(brokers, cluster_store), timeout=30, what="it back in the ISR"
        )
        # Leadership does not come back by itself while automatic rebalancing is off, and describe says so.
        assert state(cluster_store).leader != first.broker_id
        assert describe_fields(bootstrap)[0]["PreferredLeader"] == "no"
        before = state(cluster_store).leader_epoch
        assert admin.elect_leaders("preferred", [tp]) == {tp: None}
        after = state(cluster_store)
        assert (after.leader, after.leader_epoch) == (first.broker_id, before + 1)
        wait_for(
            lambda: describe_fields(bootstrap)[0]["PreferredLeader"] == "yes",
            timeout=30,
            what="describe showing the preferred leader",
        )
        assert isinstance(admin.elect_leaders("preferred", [tp])[tp], ElectionNotNeededError)
        missing = TopicPartition(TOPIC, 7)
        assert isinstance(admin.elect_leaders("preferred", [missing])[missing], UnknownTopicOrPartitionError)
        # No partitions named: every partition of the cluster, each already led by its preferred replica.
        everything = admin.elect_leaders("preferred")
        assert set(everything) == {TopicPartition(TOPIC, p) for p in range(3)}
        assert all(isinstance(e, ElectionNotNeededError) for e in everything.values()), everything

    # Only the controller answers, as in Kafka: another broker says NOT_CONTROLLER at both levels.
    controller = cluster_store.get_controller().broker_id
    other = next(b for b in brokers if b.broker_id != controller)
    response = elect_raw(other.bootstrap, TOPIC, 0)
    assert response.error_code == NOT_CONTROLLER
    rows = [
        (r.topic, int(p.partition_id), p.error_code)
        for r in response.replica_election_results
        for p in r.partition_result
    ]
    assert rows == [(TOPIC, 0, NOT_CONTROLLER)]
    assert elect_raw(brokers[controller - 1].bootstrap, TOPIC, 0).error_code == 0

    # The CLI: nothing to do now, and it says so (exit 0: an election not needed is no failure).
    done = run_ok("leaders", "elect", "--topic", TOPIC, "--bootstrap-server", bootstrap).decode()
    assert f"{TOPIC}-0: election not needed" in done, done


def test_the_cli_and_kafka_python_elect_preferred_leaders(
    broker_factory, cluster_store, wait_for, tmp_path
) -> None:
    brokers, bootstrap = start(broker_factory, auto_leader_rebalance_enable="false")
    wait_for(lambda: full_isrs(cluster_store), timeout=30, what="full ISRs")
    # Two partitions whose preferred leaders fail over and come back: neither leads them afterwards. The
    # second is one whose preferred replica did not take over the first (stopping it would move that back).
    displace(brokers, preferred(cluster_store, 0), cluster_store, wait_for)
    second = next(
        p
        for p in (1, 2)
        if preferred(cluster_store, p) not in (state(cluster_store, 0).leader, preferred(cluster_store, 0))
    )
    displace(brokers, preferred(cluster_store, second), cluster_store, wait_for)
    for partition in (0, second):
        assert state(cluster_store, partition).leader != preferred(cluster_store, partition)

    # kafka-python's KafkaAdminClient.elect_leaders speaks the same ElectLeaders.
    with KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000) as client:
        client.elect_leaders(PREFERRED, {TOPIC: [0]})
    assert state(cluster_store, 0).leader == preferred(cluster_store, 0)

    # The CLI with Kafka's JSON file of partitions.
    listing = tmp_path / "partitions.json"
    listing.write_text(json.dumps({"partitions": [{"topic": TOPIC, "partition": second}]}))
    done = run_ok(
        "leaders", "elect", "--type", "preferred", "--path-to-json-file", str(listing),
        "--bootstrap-server", bootstrap,
    ).decode()  # fmt: skip
    assert done == f"{TOPIC}-{second}: new preferred leader elected\n"
    assert state(cluster_store, second).leader == preferred(cluster_store, second)
    everything = run_ok(
        "leaders", "elect", "--all-topic-partitions", "--bootstrap-server", bootstrap
    ).decode()
    assert everything.count("election not needed") == 3, everything
    with KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000) as client:
        client.elect_leaders(PREFERRED, {TOPIC: [0]})  # ELECTION_NOT_NEEDED is not an error to kafka-python

    # A partition that does not exist is a failure: a clear message and a non-zero exit code.
    failed = run("leaders", "elect", "--topic", TOPIC, "--partition", "9", "--bootstrap-server", bootstrap)
    assert failed.returncode == 1
    assert f"{TOPIC}-9: UNKNOWN_TOPIC_OR_PARTITION" in failed.stderr.decode()


def test_an_unclean_election_gives_an_offline_partition_an_out_of_sync_leader(
    broker_factory, cluster_store, wait_for
) -> None:
    brokers = [broker_factory(i) for i in (1, 2, 3)]
    bootstrap = ",".join(b.bootstrap for b in brokers)
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic(TOPIC, replica_assignment={0: [1, 2]})])
    wait_for(lambda: state(cluster_store).isr == (1, 2), timeout=30, what="both replicas in sync")
    brokers[1].stop(timeout=30)
    wait_for(lambda: state(cluster_store).isr == (1,), timeout=30, what="broker 2 out of the ISR")
    brokers[0].stop(timeout=30)
    wait_for(lambda: state(cluster_store).leader == -1, timeout=30, what="the partition offline")
    survivor = brokers[2].bootstrap
    args = ("leaders", "elect", "--type", "unclean", "--topic", TOPIC, "--bootstrap-server", survivor)

    nobody = run(*args)
    assert nobody.returncode == 1
    assert f"{TOPIC}-0: ELIGIBLE_LEADERS_NOT_AVAILABLE" in nobody.stderr.decode()
    assert "start one of its brokers" in nobody.stderr.decode()

    brokers[1].start()
    wait_for(lambda: 2 in controller_view(brokers, cluster_store)[0], timeout=30, what="broker 2 registered")
    assert state(cluster_store).leader == -1  # out of sync: only an unclean election may pick it
    with Admin(bootstrap_servers=survivor) as admin:
        preferred_outcome = admin.elect_leaders("preferred", [TopicPartition(TOPIC, 0)])
    assert isinstance(preferred_outcome[TopicPartition(TOPIC, 0)], PreferredLeaderNotAvailableError)
    assert run_ok(*args).decode() == f"{TOPIC}-0: new unclean leader elected\n"
    assert (state(cluster_store).leader, state(cluster_store).isr) == (2, (2,))
    assert run_ok(*args).decode().startswith(f"{TOPIC}-0: election not needed")


def test_leaders_rebalance_automatically(broker_factory, cluster_store, wait_for) -> None:
    brokers, _ = start(broker_factory, leader_imbalance_check_interval_seconds=1)
    wait_for(lambda: full_isrs(cluster_store), timeout=30, what="full ISRs")
    first = brokers[preferred(cluster_store) - 1]
    first.stop(timeout=30)
    wait_for(
        lambda: state(cluster_store).leader not in (-1, first.broker_id), timeout=30, what="a new leader"
    )
    first.start()
    wait_for(
        lambda: state(cluster_store).leader == first.broker_id, timeout=30, what="the preferred leader back"
    )
    output = "".join(b.output() for b in brokers)
    assert "event=preferred_leader_rebalance" in output
