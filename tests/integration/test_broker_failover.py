"""Failure detection and controlled shutdown on a real 3-broker cluster.

The brokers run with the DEFAULT `zookeeper.session.timeout.ms`: a killed broker's registration outlives it,
so what moves leadership within seconds is the liveness probe (backbone/broker/controller/liveness.py),
not ZooKeeper.
"""

from __future__ import annotations

import signal
import time

import pytest

from backbone.broker.config import BROKER_PROPERTIES
from backbone.client import Admin, NewTopic, Producer
from backbone.coordination import ClusterStore, PartitionState
from backbone.dev.processes import BrokerProcess

pytestmark = pytest.mark.integration

TOPIC = "watched"
PARTITIONS = 3
DEFAULT_SESSION_MS = BROKER_PROPERTIES["zookeeper.session.timeout.ms"].default
# The bound for failover; the probe finds a killed broker in well under a second.
FAILOVER_S = 3.0


def start_cluster(broker_factory) -> list[BrokerProcess]:
    return [broker_factory(i, zookeeper_session_timeout_ms=DEFAULT_SESSION_MS) for i in (1, 2, 3)]


def create_topic(brokers: list[BrokerProcess], cluster_store: ClusterStore, wait_for) -> None:
    with Admin(bootstrap_servers=brokers[0].bootstrap) as admin:
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])
    wait_for(
        lambda: (
            len(states(cluster_store)) == PARTITIONS
            and all(len(s.isr) == 3 for s in states(cluster_store).values())
        ),
        timeout=30,
        what="every partition with a full ISR",
    )


def states(cluster_store: ClusterStore) -> dict[int, PartitionState]:
    return cluster_store.get_partition_states(TOPIC)


def controller(cluster_store: ClusterStore) -> int:
    info = cluster_store.get_controller()
    return -1 if info is None else info.broker_id


def led_by(cluster_store: ClusterStore, broker_id: int) -> list[int]:
    return [p for p, s in states(cluster_store).items() if s.leader == broker_id]


def a_leader(cluster_store: ClusterStore, *, controller_too: bool) -> int:
    """A broker that leads some partition and is (or is not) the controller."""
    active = controller(cluster_store)
    leaders = {s.leader for s in states(cluster_store).values()}
    found = [b for b in sorted(leaders) if (b == active) == controller_too]
    assert found, f"no leader that is {'' if controller_too else 'not '}the controller among {leaders}"
    return found[0]


def moved_off(cluster_store: ClusterStore, victim: int) -> bool:
    """Every partition has a leader other than `victim`, and `victim` is in no ISR."""
    return all(
        s.leader >= 0 and s.leader != victim and victim not in s.isr for s in states(cluster_store).values()
    )


def await_failover(cluster_store: ClusterStore, victim: int) -> float:
    """Seconds until leadership moved off the killed `victim`; fails if its registration expired first (then
    ZooKeeper did the work, not the probe)."""
    started = time.monotonic()
    while time.monotonic() - started < FAILOVER_S:
        if moved_off(cluster_store, victim):
            elapsed = time.monotonic() - started
            assert victim in cluster_store.broker_ids(), "the session expired first: the probe found nothing"
            return elapsed
        time.sleep(0.02)
    pytest.fail(
        f"leadership still not off broker {victim} {FAILOVER_S}s after it was killed: {states(cluster_store)}"
    )


def produce_to_every_partition(brokers: list[BrokerProcess]) -> None:
    bootstrap = ",".join(b.bootstrap for b in brokers if b.is_running())
    with Producer(bootstrap_servers=bootstrap, acks="all") as producer:
        futures = [producer.send(TOPIC, value=b"after %d" % p, partition=p) for p in range(PARTITIONS)]
        producer.flush()
        for future in futures:
            future.get(timeout=15)


def test_a_killed_leader_loses_leadership_and_its_isr_places_within_seconds(
    broker_factory, cluster_store, wait_for
) -> None:
    brokers = start_cluster(broker_factory)
    create_topic(brokers, cluster_store, wait_for)
    victim = a_leader(cluster_store, controller_too=False)

    brokers[victim - 1].kill()
    await_failover(cluster_store, victim)
    produce_to_every_partition(brokers)  # acks=all does not wait for the dead replica

    # Metadata says so too, while the dead broker's ZooKeeper session still lives: an offline replica.
    alive = ",".join(b.bootstrap for b in brokers if b.broker_id != victim)
    with Admin(bootstrap_servers=alive) as admin:

        def shown_offline() -> bool:
            partitions = admin.describe_topics([TOPIC])[TOPIC].partitions
            return all(p.leader != victim and victim in p.offline_replicas for p in partitions)

        wait_for(shown_offline, timeout=10, what=f"broker {victim} shown offline in Metadata")

    # Back again, it is reachable once it answers, and rejoins the ISRs through the leaders.
    brokers[victim - 1].start()
    wait_for(
        lambda: all(victim in s.isr for s in states(cluster_store).values()),
        timeout=30,
        what=f"broker {victim} back in every ISR",
    )


def test_a_killed_controller_is_replaced_and_the_new_one_detects_failures_too(
    broker_factory, cluster_store, wait_for
) -> None:
    brokers = start_cluster(broker_factory)
    create_topic(brokers, cluster_store, wait_for)
    old_controller = controller(cluster_store)

    brokers[old_controller - 1].kill()
    started = time.monotonic()
    wait_for(
        lambda: controller(cluster_store) not in (-1, old_controller),
        timeout=FAILOVER_S,
        what="a new controller",
    )
    assert old_controller in cluster_store.broker_ids(), "the new controller waited for the session to expire"
    await_failover(cluster_store, old_controller)
    assert time.monotonic() - started < 2 * FAILOVER_S

    # The new controller probes too: killing the last other leader moves leadership to it within seconds.
    new_controller = controller(cluster_store)
    victim = next(b for b in (1, 2, 3) if b not in (old_controller, new_controller))
    brokers[victim - 1].kill()
    await_failover(cluster_store, victim)
    assert led_by(cluster_store, new_controller) == list(range(PARTITIONS))


@pytest.mark.parametrize("is_controller", [False, True], ids=["follower-broker", "controller"])
def test_sigterm_moves_leadership_away_before_the_broker_exits(
    broker_factory, cluster_store, wait_for, is_controller: bool
) -> None:
    brokers = start_cluster(broker_factory)
    create_topic(brokers, cluster_store, wait_for)
    produce_to_every_partition(brokers)
    victim_id = a_leader(cluster_store, controller_too=is_controller)
    victim = brokers[victim_id - 1]
    assert victim.process is not None

    victim.process.send_signal(signal.SIGTERM)
    moved_while_running = False
    while victim.is_running():
        # Read the state first, then see the process still running: the state was written before it exited.
        moved = moved_off(cluster_store, victim_id)
        if moved and victim.is_running():
            moved_while_running = True
            break
        time.sleep(0.01)
    assert victim.process.wait(30) == 0
    assert moved_while_running, f"leadership had not moved off broker {victim_id} when it exited"
    assert "still_leading=0" in victim.output(), "the controlled shutdown did not finish"
    for partition in range(PARTITIONS):
        marker = victim.directory / "logs" / f"{TOPIC}-{partition}" / ".clean_shutdown"
        assert marker.exists(), f"{TOPIC}-{partition} was not closed cleanly"
    if is_controller:
        wait_for(
            lambda: controller(cluster_store) not in (-1, victim_id), timeout=10, what="a new controller"
        )
    produce_to_every_partition(brokers)
