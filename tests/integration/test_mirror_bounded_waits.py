"""A target that stops answering (its broker frozen with SIGSTOP: connections stay open, nothing is
answered, and the producer's request and delivery timeouts are set far beyond the test) must not stop the
mirror's loop: with more records in flight than `max.in.flight.records` the mirror stops reading and keeps
going (progress lines, heartbeats), and a rebalance waits for the revoked partitions' answers only
`revoke.wait.ms`, committing nothing the target did not acknowledge. Once the target answers again,
every source record is in it."""

from __future__ import annotations

import signal

import pytest
from mirror_support import (
    GROUP_SETTINGS,
    MirrorProcess,
    caught_up,
    committed_total,
    mirror_args,
    mirrors,
    origins,
    read_all,
    target_cluster,
)

from backbone.client import Admin, NewTopic, Producer
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.integration

TOPIC = "bounded"
GROUP = "bounded-mirror"
PARTITIONS = 2


def produce(bootstrap: str, start: int, count: int) -> None:
    with Producer(bootstrap_servers=bootstrap, acks="all") as producer:
        for i in range(start, start + count):
            producer.send(TOPIC, value=b"value-%d" % i, partition=i % PARTITIONS)
        producer.flush()


def assignments(mirror: MirrorProcess) -> int:
    return mirror.output().count("event=mirror_assigned partitions=bounded")


def test_a_target_that_stops_answering_stalls_neither_the_loop_nor_a_rebalance(
    broker_factory, zookeeper, chroot, tmp_path
) -> None:
    source = broker_factory(1, **{k.replace(".", "_"): v for k, v in GROUP_SETTINGS.items()})
    with Admin(bootstrap_servers=source.bootstrap) as admin:
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])
    produce(source.bootstrap, 0, 200)
    args = mirror_args(
        source.bootstrap, "", "--topics-regex", TOPIC, "--group", GROUP,
        "--property", "max.in.flight.records=50", "--property", "poll.max.records=100",
        "--property", "revoke.wait.ms=2000", "--property", "progress.interval.ms=500",
        # Without the bounds above, the mirror would wait for answers until these run out.
        "--property", "target.producer.request.timeout.ms=300000",
        "--property", "target.producer.delivery.timeout.ms=600000",
    )  # fmt: skip
    with target_cluster(zookeeper.connect_string + chroot + "-aggregate", tmp_path / "aggregate") as target:
        args[args.index("--target-bootstrap") + 1] = target.bootstrap
        with mirrors() as started:
            first = MirrorProcess(tmp_path / "first.log", *args).start()
            started.append(first)
            wait_until(lambda: caught_up(source.bootstrap, GROUP, TOPIC), 90, what="the first copy")
            second = MirrorProcess(tmp_path / "second.log", *args).start()
            started.append(second)
            wait_until(lambda: assignments(first) == 2, 60, what="the partitions shared by both mirrors")
            target.process.send_signal(signal.SIGSTOP)
            try:
                produce(source.bootstrap, 200, 500)
                wait_until(lambda: "event=mirror_reading_held" in first.output(), 30, what="reading held")
                held_at = first.output().count("event=mirror_progress")
                wait_until(
                    lambda: first.output().count("event=mirror_progress") >= held_at + 3,
                    30,
                    what="the loop going on while the target does not answer",
                )
                second.kill()  # its partitions come back to the first mirror once its session expires
                wait_until(
                    lambda: assignments(first) == 3,
                    40,
                    what="the rebalance ending while the target does not answer",
                )
                assert (
                    first.output()
                    .rsplit("event=mirror_assigned ", 1)[1]
                    .startswith("partitions=bounded-0,bounded-1")
                )
                # Only what the target acknowledged (the first 200) is committed.
                assert committed_total(source.bootstrap, GROUP, TOPIC) == 200
            finally:
                target.process.send_signal(signal.SIGCONT)
            wait_until(lambda: caught_up(source.bootstrap, GROUP, TOPIC), 120, what="the copy after")
            copied = {(hop.partition, hop.offset) for hop in origins(read_all(target.bootstrap, TOPIC, 60))}
            expected = {(p, o) for p in range(PARTITIONS) for o in range(350)}
            assert expected - copied == set()
            assert "event=mirror_reading_resumed" in first.output()
            assert first.terminate() == 0
