"""The mirror follows its source topics as MirrorMaker 2 does: a source topic that grows grows its target
(records keep their partition), and a source topic deleted and created again (a new topic id) is copied from
its start once, with the decision logged, rather than copied twice or skipped."""

from __future__ import annotations

import pytest
from mirror_support import (
    GROUP_SETTINGS,
    MirrorProcess,
    caught_up,
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


def recreate(bootstrap: str, topic: str, partitions: int, wait_for) -> str:
    """Delete `topic` and create it again; its new topic id."""
    with Admin(bootstrap_servers=bootstrap) as admin:
        old = admin.describe_topics([topic])[topic].topic_id
        admin.delete_topics([topic])
        wait_for(lambda: topic not in admin.list_topics(), timeout=30, what=f"{topic} deleted")

        def created() -> bool:
            try:
                admin.create_topics([NewTopic(topic, partitions, 1)])
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
