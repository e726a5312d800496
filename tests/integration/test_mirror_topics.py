"""The mirror follows its source topics as MirrorMaker 2 does: a source topic that grows grows its target
(records keep their partition), and a source topic deleted and created again (a new topic id) is copied from
its start once, with the decision logged, rather than copied twice or skipped."""

from __future__ import annotations

import pytest
from broker_fixtures import wait_until_brokers_see_each_other
from mirror_support import (
    GROUP_SETTINGS,
    MirrorProcess,
    caught_up,
    committed_total,
    end_total,
    mirror_args,
    mirrors,
    origins,
    read_all,
    target_cluster,
)

from backbone.client import Admin, NewTopic, Producer
from backbone.protocol.errors import KafkaError

pytestmark = pytest.mark.integration

GROUP = "topics-mirror"


def produce(bootstrap: str, topic: str, count: int, partitions: int, tag: str) -> None:
    with Producer(bootstrap_servers=bootstrap, acks="all") as producer:
        for i in range(count):
            producer.send(topic, value=f"{tag}-{i}".encode(), key=b"k%d" % i, partition=i % partitions)


def recreate(bootstrap: str, topic: str, partitions: int, wait_for, on_broker: int | None = None) -> str:
    """Delete `topic` and create it again (all its partitions on `on_broker` if given); its new topic id."""
    assignment = None if on_broker is None else {p: [on_broker] for p in range(partitions)}
    with Admin(bootstrap_servers=bootstrap) as admin:
        old = admin.describe_topics([topic])[topic].topic_id
        admin.delete_topics([topic])
        wait_for(lambda: topic not in admin.list_topics(), timeout=30, what=f"{topic} deleted")

        def created() -> bool:
            try:
                if assignment is None:
                    admin.create_topics([NewTopic(topic, partitions, 1)])
                else:
                    admin.create_topics([NewTopic(topic, replica_assignment=assignment)])
            except KafkaError:  # the deletion is still being finished
                return False
            return True

        wait_for(created, timeout=30, what=f"{topic} created again")
        new = admin.describe_topics([topic])[topic].topic_id
    assert old and new and old != new, "the broker gives a re-created topic a new topic id"
    return new


def test_a_grown_source_grows_the_target_and_a_recreated_one_is_copied_once(
    broker_factory, zookeeper, chroot, tmp_path, wait_for
) -> None:
    source = broker_factory(1, **{k.replace(".", "_"): v for k, v in GROUP_SETTINGS.items()})
    with target_cluster(zookeeper.connect_string + chroot + "-aggregate", tmp_path / "aggregate") as target:
        with Admin(bootstrap_servers=source.bootstrap) as admin:
            admin.create_topics([NewTopic("grows", 2, 1), NewTopic("reborn", 1, 1)])
        produce(source.bootstrap, "grows", 20, 2, "first")
        produce(source.bootstrap, "reborn", 50, 1, "old")
        args = mirror_args(
            source.bootstrap, target.bootstrap, "--topics-regex", "grows|reborn", "--group", GROUP
        )
        with mirrors() as started:
            mirror = MirrorProcess(tmp_path / "mirror.log", *args).start()
            started.append(mirror)
            for topic in ("grows", "reborn"):
                wait_for(
                    lambda t=topic: caught_up(source.bootstrap, GROUP, t), timeout=60, what=f"{topic} copied"
                )

            with Admin(bootstrap_servers=source.bootstrap) as admin:
                admin.create_partitions({"grows": 4})
            produce(source.bootstrap, "grows", 40, 4, "second")
            new_id = recreate(source.bootstrap, "reborn", 3, wait_for)
            produce(source.bootstrap, "reborn", 30, 3, "new")

            wait_for(lambda: end_total(target.bootstrap, "grows") >= 60, timeout=60, what="grows copied")
            wait_for(
                lambda: caught_up(source.bootstrap, GROUP, "reborn"), timeout=60, what="new reborn copied"
            )
            wait_for(lambda: end_total(target.bootstrap, "reborn") >= 80, timeout=30, what="reborn in target")

            with Admin(bootstrap_servers=target.bootstrap) as admin:
                described = admin.describe_topics(["grows", "reborn"])
            assert len(described["grows"].partitions) == 4
            assert len(described["reborn"].partitions) == 3
            copies = read_all(target.bootstrap, "grows")
            assert len(copies) == 60
            assert all(c.partition == o.partition for c, o in zip(copies, origins(copies), strict=True))

            reborn = sorted(c.value for c in read_all(target.bootstrap, "reborn"))
            expected = sorted([b"old-%d" % i for i in range(50)] + [b"new-%d" % i for i in range(30)])
            assert reborn == expected, (
                "every record once: the old topic's copies kept, the new one's not twice"
            )
            assert "event=mirror_target_partitions_grown topic=grows from=2 to=4" in mirror.output()
            decision = [
                line for line in mirror.output().splitlines() if "mirror_source_topic_recreated" in line
            ]
            assert (
                len(decision) == 1 and f"new_topic_id={new_id}" in decision[0] and "decision=" in decision[0]
            )
            assert mirror.terminate() == 0


def test_a_topic_recreated_while_no_mirror_ran_is_copied_once_from_its_start(
    broker_factory, zookeeper, chroot, tmp_path, wait_for
) -> None:
    """A mirror's commits name the topic id they were made on. Its group's commits on a topic outlive the
    topic when the group's coordinator is away while the topic is deleted (it finds the topic existing again
    when it returns): a mirror started then, on a topic created again with fewer records than the old
    committed offset or with more, copies the new topic from its start, each record once, rather than
    resuming at the old offset (which skips the first records)."""
    settings = {**GROUP_SETTINGS, "offsets.topic.num.partitions": 1, "offsets.topic.replication.factor": 1}
    coordinator = broker_factory(1, **{k.replace(".", "_"): v for k, v in settings.items()})
    with Admin(bootstrap_servers=coordinator.bootstrap) as admin:
        # The offsets topic is made now, while broker 1 is alone: broker 1 coordinates every group.
        wait_for(lambda: admin.list_consumer_group_offsets(GROUP) == {}, timeout=30, what="offsets topic")
    keeper = broker_factory(2, **{k.replace(".", "_"): v for k, v in settings.items()})
    wait_until_brokers_see_each_other([coordinator, keeper])
    new_counts = {"fewer": 20, "more": 80}  # below and above the old committed offset (50)
    with target_cluster(zookeeper.connect_string + chroot + "-aggregate", tmp_path / "aggregate") as target:
        with Admin(bootstrap_servers=keeper.bootstrap) as admin:
            admin.create_topics([NewTopic(t, replica_assignment={0: [keeper.broker_id]}) for t in new_counts])
        for topic in new_counts:
            produce(keeper.bootstrap, topic, 50, 1, "old")
        sources = f"{coordinator.bootstrap},{keeper.bootstrap}"
        args = mirror_args(sources, target.bootstrap, "--topics-regex", "fewer|more", "--group", GROUP)
        with mirrors() as started:
            first = MirrorProcess(tmp_path / "first.log", *args).start()
            started.append(first)
            for topic in new_counts:
                wait_for(lambda t=topic: caught_up(sources, GROUP, t), timeout=60, what=f"old {topic} copied")
            assert first.terminate() == 0

            coordinator.stop(timeout=15)
            new_ids = {
                t: recreate(keeper.bootstrap, t, 1, wait_for, on_broker=keeper.broker_id) for t in new_counts
            }
            for topic, count in new_counts.items():
                produce(keeper.bootstrap, topic, count, 1, "new")
            coordinator.start()
            with Admin(bootstrap_servers=sources) as admin:
                kept = admin.list_consumer_group_offsets(GROUP)
            assert {tp.topic: o.offset for tp, o in kept.items()} == dict.fromkeys(new_counts, 50), (
                "the old topics' commits outlived them (the case this test is about)"
            )

            again = MirrorProcess(tmp_path / "again.log", *args).start()
            started.append(again)
            for topic, count in new_counts.items():
                wait_for(
                    lambda t=topic, c=count: committed_total(sources, GROUP, t) == c,
                    timeout=60,
                    what=f"new {topic} copied",
                )
                wait_for(
                    lambda t=topic, c=count: end_total(target.bootstrap, t) >= 50 + c,
                    timeout=30,
                    what=f"new {topic} in the target",
                )
            for topic, count in new_counts.items():
                copied = sorted(c.value for c in read_all(target.bootstrap, topic))
                expected = sorted([b"old-%d" % i for i in range(50)] + [b"new-%d" % i for i in range(count)])
                assert copied == expected, f"{topic}: every record of both topics once"
                decision = [
                    line
                    for line in again.output().splitlines()
                    if "mirror_source_topic_recreated" in line and f"topic={topic} " in line
                ]
                assert len(decision) == 1 and f"new_topic_id={new_ids[topic]}" in decision[0]
            assert again.terminate() == 0
