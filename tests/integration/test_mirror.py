"""The mirror copies a datacenter cluster's topics into the aggregate cluster: every record with its key,
value, headers, timestamp and partition, plus a provenance header; at least once through kill -9; new
topics without a restart; partitions shared by mirrors in one group; a refused record stops only its
partition; a record never goes back where it came from."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from cli_support import run
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
from backbone.client.producer.partitioner import partition_for_key
from backbone.mirror import provenance

pytestmark = pytest.mark.integration


@pytest.fixture
def clusters(broker_factory, zookeeper, chroot, tmp_path):
    source = broker_factory(1, **{k.replace(".", "_"): v for k, v in GROUP_SETTINGS.items()})
    with target_cluster(zookeeper.connect_string + chroot + "-aggregate", tmp_path / "aggregate") as target:
        yield source, target


def produce(bootstrap: str, topic: str, count: int, start: int = 0, partitions: int = 3) -> None:
    with Producer(bootstrap_servers=bootstrap, acks="all") as producer:
        for i in range(start, start + count):
            producer.send(
                topic,
                value=b"value-%d" % i,
                key=b"key-%d" % i,
                partition=i % partitions,
                headers=[("seq", b"%d" % i)],
                timestamp_ms=1_700_000_000_000 + i,
            )
        producer.flush()


def test_every_record_arrives_whole_in_the_same_partition(clusters, tmp_path, wait_for) -> None:
    source, target = clusters
    with Admin(bootstrap_servers=source.bootstrap) as admin:
        admin.create_topics([NewTopic("pageviews", 3, 1)])
    produce(source.bootstrap, "pageviews", 900)
    with mirrors() as started:
        started.append(
            MirrorProcess(
                tmp_path / "mirror.log",
                *mirror_args(source.bootstrap, target.bootstrap, "--topics-regex", "page.*"),
            ).start()
        )
        wait_for(
            lambda: end_total(target.bootstrap, "pageviews") >= 900, timeout=60, what="900 records mirrored"
        )
        copies = read_all(target.bootstrap, "pageviews")
        originals = {(r.partition, r.offset): r for r in read_all(source.bootstrap, "pageviews")}
        assert len(copies) == 900
        for copy in copies:
            hop = provenance.origin(copy.headers)
            assert hop is not None and hop.cluster == "dc1"
            original = originals[(hop.partition, hop.offset)]
            assert (copy.partition, copy.key, copy.value, copy.timestamp) == (
                original.partition, original.key, original.value, original.timestamp
            )  # fmt: skip
            assert copy.headers == (*original.headers, (provenance.HEADER, hop.encode()))
        assert started[0].terminate() == 0  # SIGTERM: commits and exits cleanly
        assert started[0].copied() == 900  # its last progress line, logged as it stops, counts them all
    with Admin(bootstrap_servers=target.bootstrap) as admin:
        assert len(admin.describe_topics(["pageviews"])["pageviews"].partitions) == 3


def test_a_target_topic_with_other_partitions_gets_records_by_key_hash(clusters, tmp_path, wait_for) -> None:
    source, target = clusters
    with Admin(bootstrap_servers=source.bootstrap) as admin:
        admin.create_topics([NewTopic("searches", 3, 1)])
    with Admin(bootstrap_servers=target.bootstrap) as admin:
        admin.create_topics([NewTopic("searches", 4, 1)])  # made earlier, with more partitions (never shrunk)
    produce(source.bootstrap, "searches", 300)
    with mirrors() as started:
        args = mirror_args(source.bootstrap, target.bootstrap, "--topics", "searches")
        started.append(MirrorProcess(tmp_path / "mirror.log", *args).start())
        wait_for(lambda: end_total(target.bootstrap, "searches") >= 300, timeout=60, what="300 records")
    copies = read_all(target.bootstrap, "searches")
    assert sorted(c.value for c in copies) == sorted(b"value-%d" % i for i in range(300))
    for copy in copies:
        assert copy.partition == partition_for_key(copy.key, 4), "where the key hashes among 4 partitions"
        assert provenance.origin(copy.headers).offset == int(copy.value[6:]) // 3  # partition i % 3


def test_the_admin_client_tells_a_mirrors_lag_in_records_and_seconds(clusters, tmp_path, wait_for) -> None:
    source, target = clusters
    with Admin(bootstrap_servers=source.bootstrap) as admin:
        admin.create_topics([NewTopic("carts", 3, 1)])
    produce(source.bootstrap, "carts", 300)  # timestamps 1 ms apart
    with mirrors() as started:
        args = mirror_args(source.bootstrap, target.bootstrap, "--topics", "carts", "--group", "carts-mirror")
        started.append(MirrorProcess(tmp_path / "mirror.log", *args).start())
        wait_for(lambda: caught_up(source.bootstrap, "carts-mirror", "carts"), timeout=60, what="caught up")
        with Admin(bootstrap_servers=source.bootstrap) as admin:
            caught = admin.mirror_lag("carts-mirror")
        assert [(m.partition, m.records, m.seconds) for m in caught] == [(p, 0, 0.0) for p in range(3)]
        assert started[0].terminate() == 0
    produce(source.bootstrap, "carts", 300, start=300)  # the newest is now 300 ms of event time ahead
    with Admin(bootstrap_servers=source.bootstrap) as admin:
        behind = admin.mirror_lag("carts-mirror")
    assert [(m.topic, m.partition, m.committed_offset, m.log_end_offset, m.records) for m in behind] == [
        ("carts", p, 100, 200, 100) for p in range(3)
    ]
    assert [m.seconds for m in behind] == [pytest.approx(0.3)] * 3


def test_kill_9_loses_nothing_and_new_topics_are_picked_up(clusters, tmp_path, wait_for) -> None:
    source, target = clusters
    with Admin(bootstrap_servers=source.bootstrap) as admin:
        admin.create_topics([NewTopic("clicks", 3, 1)])
    kills_done = threading.Event()
    produced = [0]

    def keep_producing() -> None:
        """Batches of 50, paced, until the kills are over (at most 40,000 records)."""
        with Producer(bootstrap_servers=source.bootstrap, acks="all", linger_ms=0) as producer:
            while not kills_done.is_set() and produced[0] < 40_000:
                for i in range(produced[0], produced[0] + 50):
                    producer.send("clicks", value=b"%d" % i, key=b"%d" % i, partition=i % 3)
                producer.flush()
                produced[0] += 50
                time.sleep(0.02)  # pacing, not waiting for a condition: a steady trickle of writes

    writer = threading.Thread(target=keep_producing)
    writer.start()
    args = mirror_args(
        source.bootstrap, target.bootstrap, "--topics-regex", "clicks|views", "--naming", "prefix",
        "--instance-id", "mirror-1",  # a restarted mirror takes its partitions straight back
    )  # fmt: skip
    with mirrors() as started:
        try:
            for _ in range(5):
                mirror = MirrorProcess(tmp_path / "mirror.log", *args).start()
                started.append(mirror)
                before = committed_total(source.bootstrap, "mirror-dc1-aggregate", "clicks")
                wait_for(
                    lambda b=before: committed_total(source.bootstrap, "mirror-dc1-aggregate", "clicks") > b,
                    timeout=60,
                    what="a commit by this mirror",
                )
                os.kill(mirror.process.pid, signal.SIGKILL)
                mirror.process.wait(timeout=30)
        finally:
            kills_done.set()
            writer.join(timeout=120)
        total = produced[0]
        started.append(MirrorProcess(tmp_path / "last.log", *args).start())
        produce(source.bootstrap, "views", 50, partitions=1)  # a new topic, picked up by the running mirror
        wait_for(
            lambda: caught_up(source.bootstrap, "mirror-dc1-aggregate", "clicks"),
            timeout=90,
            what="all clicks",
        )
        wait_for(lambda: end_total(target.bootstrap, "dc1.views") >= 50, timeout=90, what="the new topic")
    copied = origins(read_all(target.bootstrap, "dc1.clicks"))
    wanted = {(r.partition, r.offset) for r in read_all(source.bootstrap, "clicks")}
    assert len(wanted) == total
    assert wanted <= {(hop.partition, hop.offset) for hop in copied}  # nothing lost
    duplicates = len(copied) - len(set(copied))
    print(f"mirror kill -9 x5: produced={total} copied={len(copied)} lost=0 duplicates={duplicates}")


def test_two_mirrors_share_partitions_and_one_takes_over(clusters, tmp_path, wait_for) -> None:
    source, target = clusters
    with Admin(bootstrap_servers=source.bootstrap) as admin:
        admin.create_topics([NewTopic("orders", 4, 1)])
    args = mirror_args(source.bootstrap, target.bootstrap, "--topics", "orders")
    with mirrors() as started:
        started.extend(MirrorProcess(tmp_path / f"{name}.log", *args).start() for name in ("a", "b"))
        produce(source.bootstrap, "orders", 400, partitions=4)
        wait_for(lambda: end_total(target.bootstrap, "orders") >= 400, timeout=60, what="400 orders")
        wait_for(
            lambda: all("event=mirror_assigned partitions=orders" in m.output() for m in started),
            timeout=60,
            what="both mirrors holding partitions",
        )
        started[0].kill()
        produce(source.bootstrap, "orders", 400, start=400, partitions=4)
        wait_for(
            lambda: end_total(target.bootstrap, "orders") >= 800, timeout=90, what="the survivor's copies"
        )
    wanted = {(r.partition, r.offset) for r in read_all(source.bootstrap, "orders")}
    assert wanted <= {(h.partition, h.offset) for h in origins(read_all(target.bootstrap, "orders"))}


def test_a_refused_record_stops_only_its_partition(clusters, tmp_path, wait_for) -> None:
    source, target = clusters
    with Admin(bootstrap_servers=source.bootstrap) as admin:
        admin.create_topics([NewTopic("mixed", 2, 1)])
    with Producer(bootstrap_servers=source.bootstrap) as producer:
        producer.send("mixed", b"small", partition=0)
        producer.send("mixed", b"x" * 5000, partition=0)  # larger than the target topic allows
        producer.send("mixed", b"after", partition=0)
        for i in range(10):
            producer.send("mixed", b"fine-%d" % i, partition=1)
        producer.flush()
    args = mirror_args(
        source.bootstrap, target.bootstrap, "--topics", "mixed", "--group", "refusing",
        "--property", "target.topic.config.max.message.bytes=1000",
    )  # fmt: skip
    with mirrors() as started:
        mirror = MirrorProcess(tmp_path / "mirror.log", *args).start()
        started.append(mirror)
        wait_for(lambda: end_total(target.bootstrap, "mixed") >= 11, timeout=60, what="the other partition")
        wait_for(lambda: "event=mirror_partition_stopped" in mirror.output(), timeout=60, what="the stop")
        assert "offset=1" in mirror.output() and "mixed-0" in mirror.output()
        assert mirror.terminate() == 0
    with Admin(bootstrap_servers=source.bootstrap) as admin:
        committed = admin.list_consumer_group_offsets("refusing")
    assert {tp.partition: o.offset for tp, o in committed.items()} == {
        0: 1,
        1: 10,
    }  # nothing past the refusal
    values = sorted(r.value for r in read_all(target.bootstrap, "mixed"))
    assert b"small" in values and b"after" not in values and len(values) == 11


def test_records_never_return_to_the_cluster_they_came_from(clusters, tmp_path, wait_for) -> None:
    first, second = clusters
    produce(first.bootstrap, "shared", 30, partitions=1)
    produce(second.bootstrap, "shared", 20, partitions=1)
    forward = ["--source-bootstrap", first.bootstrap, "--target-bootstrap", second.bootstrap,
               "--source-alias", "dc1", "--target-alias", "dc2", "--topics", "shared"]  # fmt: skip
    backward = ["--source-bootstrap", second.bootstrap, "--target-bootstrap", first.bootstrap,
                "--source-alias", "dc2", "--target-alias", "dc1", "--topics", "shared"]  # fmt: skip
    with mirrors() as started:
        started.append(MirrorProcess(tmp_path / "forward.log", *forward).start())
        started.append(MirrorProcess(tmp_path / "backward.log", *backward).start())
        wait_for(lambda: end_total(first.bootstrap, "shared") >= 50, timeout=60, what="dc2's records in dc1")
        wait_for(lambda: end_total(second.bootstrap, "shared") >= 50, timeout=60, what="dc1's records in dc2")
        # Both mirrors are caught up when their groups' committed offsets reach each end.
        for bootstrap, group in ((first.bootstrap, "mirror-dc1-dc2"), (second.bootstrap, "mirror-dc2-dc1")):
            wait_for(
                lambda b=bootstrap, g=group: caught_up(b, g, "shared"), timeout=60, what=f"{group} caught up"
            )
    assert end_total(first.bootstrap, "shared") == 50 and end_total(second.bootstrap, "shared") == 50


def test_an_unreachable_cluster_is_a_clear_error(broker) -> None:
    done = run(
        "mirror", "--source-bootstrap", broker.bootstrap, "--target-bootstrap", "127.0.0.1:1",
        "--source-alias", "dc1", "--topics", "t", timeout=60,
    )  # fmt: skip
    assert done.returncode == 1
    assert b"the target cluster did not answer at 127.0.0.1:1" in done.stderr
