"""Static membership (group.instance.id) as Kafka has it: a member that restarts takes its place back with
no rebalance, though its subscription bytes changed (they carry its owned partitions); one that comes back
subscribed to other topics gets its old assignment first, sees topics it does not subscribe to, and
rejoins, so the group converges on the new subscriptions."""

from __future__ import annotations

import uuid

import pytest

from backbone.client import Admin, Consumer, ConsumerRebalanceListener, NewTopic, TopicPartition

pytestmark = pytest.mark.integration

GROUP_BROKER = {
    "group_initial_rebalance_delay_ms": 0,
    "group_min_session_timeout_ms": 1000,
    "offsets_topic_replication_factor": 1,
    "offsets_topic_num_partitions": 2,
}


class Calls(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.revoked: list[set[TopicPartition]] = []

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.revoked.append(revoked)


def consumer(bootstrap: str, group: str, topics: list[str], instance: str | None, listener=None) -> Consumer:
    made = Consumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        group_instance_id=instance,
        session_timeout_ms=30_000,
        heartbeat_interval_ms=500,
        auto_offset_reset="earliest",
    )
    made.subscribe(topics=topics, listener=listener)
    return made


def settle(members: list[Consumer], wanted: list[set[TopicPartition]], wait_for) -> None:
    """Poll every member (rebalances happen in poll) until each holds what it should."""

    def settled() -> bool:
        for member in members:
            member.poll(timeout_ms=50)
        return [m.assignment() for m in members] == wanted

    wait_for(settled, timeout=60, what=f"assignments {wanted}")


def test_a_restarted_static_member_takes_its_place_and_follows_a_new_subscription(
    broker_factory, wait_for
) -> None:
    broker = broker_factory(1, **GROUP_BROKER)
    first, second = (f"static-{name}-{uuid.uuid4().hex[:6]}" for name in ("a", "b"))
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        admin.create_topics([NewTopic(first, 4, 1), NewTopic(second, 2, 1)])
    group = f"static-{uuid.uuid4().hex[:6]}"
    all_first = {TopicPartition(first, p) for p in range(4)}
    calls = Calls()
    other = consumer(broker.bootstrap, group, [first], None, calls)
    static = consumer(broker.bootstrap, group, [first], "worker-1")
    try:
        wait_for(
            lambda: (
                [m.poll(timeout_ms=50) for m in (other, static)]
                and len(other.assignment()) == 2
                and static.assignment() == all_first - other.assignment()
            ),
            timeout=60,
            what="the partitions shared",
        )
        kept = static.assignment()
        static.close()  # a static member sends no LeaveGroup: its place waits for it (session timeout)
        revocations = len(calls.revoked)

        static = consumer(broker.bootstrap, group, [first], "worker-1")
        settle([other, static], [all_first - kept, kept], wait_for)
        assert len(calls.revoked) == revocations  # no rebalance: the other member gave nothing up
        static.close()

        static = consumer(broker.bootstrap, group, [second], "worker-1")
        settle([other, static], [all_first, {TopicPartition(second, 0), TopicPartition(second, 1)}], wait_for)
    finally:
        static.close()
        other.close()
