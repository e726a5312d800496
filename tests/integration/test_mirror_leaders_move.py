"""The target partitions' leaders move while a mirror copies into them: a reassignment that gives every
partition another preferred leader followed by a preferred-leader election, then the broker leading the
most partitions killed with SIGKILL (the others take over), started again at the same address, and made
leader again by an election. Records keep being produced into the source all along. The mirror copies
after every move, and every acknowledged source record is in the target exactly once."""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

import pytest
from mirror_support import (
    GROUP_SETTINGS,
    TARGET_BROKERS,
    KeyedProducer,
    MirrorProcess,
    TargetCluster,
    mirror_args,
    mirrors,
    origins,
    read_all,
)

from backbone.client import Admin, NewTopic, TopicPartition
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.integration

GROUP = "moving-leaders-mirror"
TOPIC = "moves"
PARTITIONS = 6


def leaders(bootstrap: str) -> dict[int, int]:
    with Admin(bootstrap_servers=bootstrap) as admin:
        found = admin.describe_topics([TOPIC])[TOPIC].partitions
    return {p.partition: p.leader for p in found}


def fully_in_sync(bootstrap: str) -> bool:
    with Admin(bootstrap_servers=bootstrap) as admin:
        found = admin.describe_topics([TOPIC])[TOPIC].partitions
    return all(len(p.isr) == TARGET_BROKERS for p in found)


def test_target_leaders_moving_under_a_running_mirror(broker_factory, tmp_path: Path) -> None:
    source = broker_factory(1, **{k.replace(".", "_"): v for k, v in GROUP_SETTINGS.items()})
    with Admin(bootstrap_servers=source.bootstrap) as admin:
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])
    target = TargetCluster(tmp_path / "aggregate")
    try:
        target.start()
        args = mirror_args(source.bootstrap, target.bootstrap, "--topics-regex", TOPIC, "--group", GROUP)
        with mirrors() as started, KeyedProducer(source.bootstrap, TOPIC) as producer:
            mirror = MirrorProcess(tmp_path / "mirror.log", *args).start()
            started.append(mirror)

            def copies_on(after: str) -> None:
                before = mirror.copied()
                wait_until(
                    lambda: mirror.copied() > before + 200, 90, what=f"the mirror copying after {after}"
                )

            wait_until(lambda: mirror.copied() > 500, 60, what="records copied before the moves")
            wait_until(lambda: fully_in_sync(target.bootstrap), 60, what="every target replica in sync")

            # 1. Every partition gets another preferred leader, and it is elected.
            before = leaders(target.bootstrap)
            with Admin(bootstrap_servers=target.bootstrap) as admin:
                replicas = {p.partition: p.replicas for p in admin.describe_topics([TOPIC])[TOPIC].partitions}
                rotated = {
                    TopicPartition(TOPIC, p): [*ids[1:], ids[0]] for p, ids in replicas.items()
                }  # same replicas, the second one first
                assert set(admin.alter_partition_reassignments(rotated).values()) == {None}
                wait_until(lambda: not admin.list_partition_reassignments(), 60, what="the reassignment")
                admin.elect_leaders("preferred", list(rotated))
            wait_until(
                lambda: all(leader != before[p] for p, leader in leaders(target.bootstrap).items()),
                60,
                what="every target leader moved",
            )
            copies_on("the preferred-leader election")

            # 2. The broker leading the most partitions dies; the others take over; it comes back.
            led = Counter(leaders(target.bootstrap).values())
            victim = next(b for b in target.brokers if b.broker_id == led.most_common(1)[0][0])
            victim.process.send_signal(signal.SIGKILL)
            victim.stop(timeout=30)
            wait_until(
                lambda: victim.broker_id not in leaders(target.bootstrap).values(), 60, what="new leaders"
            )
            copies_on(f"target broker {victim.broker_id} was killed")
            victim.start(timeout=60)
            wait_until(lambda: fully_in_sync(target.bootstrap), 90, what="the restarted broker in sync")
            with Admin(bootstrap_servers=target.bootstrap) as admin:
                admin.elect_leaders("preferred", [TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
            wait_until(
                lambda: victim.broker_id in leaders(target.bootstrap).values(),
                60,
                what="the restarted broker leading again",
            )
            copies_on(f"target broker {victim.broker_id} leads again")

            producer.stop()
            mirror.wait_caught_up(source.bootstrap, GROUP, TOPIC)
            arrived = Counter(
                (hop.partition, hop.offset) for hop in origins(read_all(target.bootstrap, TOPIC, 120))
            )
            missing = producer.acknowledged - set(arrived)
            twice = {origin: n for origin, n in arrived.items() if n > 1}
            assert not missing, f"{len(missing)} acknowledged records missing, e.g. {sorted(missing)[:5]}"
            assert not twice, f"{len(twice)} records copied more than once, e.g. {sorted(twice)[:5]}"
            assert producer.failed == 0
            assert mirror.terminate() == 0
    finally:
        target.stop()
