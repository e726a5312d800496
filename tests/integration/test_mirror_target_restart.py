"""The whole target cluster restarted under a running mirror: its ZooKeeper and every broker stop together
and start again (as `docker compose restart` does to the aggregate), every leader moves, while records keep
being produced into the source. The mirror goes on copying afterwards, and every acknowledged source record
reaches the target."""

from __future__ import annotations

import signal

import pytest
from mirror_support import (
    GROUP_SETTINGS,
    KeyedProducer,
    MirrorProcess,
    TargetCluster,
    mirror_args,
    mirrors,
    origins,
    read_all,
)

from backbone.client import Admin, NewTopic
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.integration

GROUP = "restart-mirror"
TOPIC = "clicks"
PARTITIONS = 6


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["stopped", "killed"])
def test_the_whole_target_cluster_restarted_under_a_running_mirror(broker_factory, tmp_path, how) -> None:
    source = broker_factory(1, **{k.replace(".", "_"): v for k, v in GROUP_SETTINGS.items()})
    with Admin(bootstrap_servers=source.bootstrap) as admin:
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])
    target = TargetCluster(tmp_path / "aggregate")
    try:
        target.start()
        # As the datacenters' mirrors run: a static member, publishing audit counts into the target.
        args = mirror_args(
            source.bootstrap, target.bootstrap, "--topics-regex", TOPIC, "--group", GROUP,
            "--property", f"instance.id={GROUP}-1", "--property", "audit.interval.ms=1000",
            "--property", f"audit.bootstrap.servers={target.bootstrap}",
        )  # fmt: skip
        with mirrors() as started, KeyedProducer(source.bootstrap, TOPIC) as producer:
            mirror = MirrorProcess(tmp_path / "mirror.log", *args).start()
            started.append(mirror)

            wait_until(lambda: mirror.copied() > 500, 60, what="records copied before the restart")
            target.stop(how)
            acknowledged = producer.count()
            wait_until(
                lambda: producer.count() > acknowledged + 2000, 60, what="records while the target is down"
            )
            target.start()
            copied_before = mirror.copied()
            wait_until(
                lambda: mirror.copied() > copied_before, 90, what="the mirror copying after the restart"
            )
            produced_after = producer.count()
            wait_until(lambda: producer.count() > produced_after + 2000, 60, what="records after the restart")
            producer.stop()
            mirror.wait_caught_up(source.bootstrap, GROUP, TOPIC)
            found = {(hop.partition, hop.offset) for hop in origins(read_all(target.bootstrap, TOPIC, 120))}
            missing = producer.acknowledged - found
            assert not missing, f"{len(missing)} acknowledged records missing, e.g. {sorted(missing)[:5]}"
            assert producer.failed == 0
            assert mirror.terminate() == 0
    finally:
        target.stop()
