"""The cluster the mirror publishes its audit counts to is down (all its brokers: nothing answers there),
while the target takes records: the mirror goes on copying at its pace. A publish waits up to 30 s for its
cluster; the copy must not wait with it (it did: one cycle of `poll.max.records` per publish attempt)."""

from __future__ import annotations

import pytest
from mirror_support import GROUP_SETTINGS, MirrorProcess, end_total, mirror_args, mirrors, target_cluster

from backbone.client import Admin, NewTopic, Producer
from backbone.coordination import find_free_port

pytestmark = pytest.mark.integration

RECORDS = 3000
PER_CYCLE = 100  # poll.max.records: the copy takes 30 cycles


def produce(bootstrap: str, first: int, end: int) -> None:
    with Producer(bootstrap_servers=bootstrap, acks="all") as producer:
        for number in range(first, end):
            producer.send("views", b"%d" % number)


def test_copying_goes_on_while_the_audit_cluster_is_down(
    broker_factory, zookeeper, chroot, tmp_path, wait_for
) -> None:
    source = broker_factory(1, **{k.replace(".", "_"): v for k, v in GROUP_SETTINGS.items()})
    with Admin(bootstrap_servers=source.bootstrap) as admin:
        admin.create_topics([NewTopic("views", 1, 1)])
    audit_cluster_down = f"127.0.0.1:{find_free_port()}"
    with target_cluster(zookeeper.connect_string + chroot + "-aggregate", tmp_path / "aggregate") as target:
        args = mirror_args(
            source.bootstrap, target.bootstrap, "--topics-regex", "views", "--group", "audit-outage",
            "--property", f"audit.bootstrap.servers={audit_cluster_down}",
            "--property", "audit.interval.ms=1000", "--property", f"poll.max.records={PER_CYCLE}",
        )  # fmt: skip
        with mirrors() as started:
            mirror = MirrorProcess(tmp_path / "mirror.log", *args).start()
            started.append(mirror)
            produce(source.bootstrap, 0, PER_CYCLE)
            wait_for(
                lambda: end_total(target.bootstrap, "views") >= PER_CYCLE, timeout=60, what="first copies"
            )
            # Their counts wait to be published from now on, and every publish fails after its 30 s.
            wait_for(lambda: "audit_publish_failed" in mirror.output(), timeout=90, what="a failed publish")
            produce(source.bootstrap, PER_CYCLE, RECORDS)
            wait_for(
                lambda: end_total(target.bootstrap, "views") >= RECORDS,
                timeout=120,
                what=f"all {RECORDS} records copied while every audit publish fails",
            )
            assert mirror.terminate() == 0
