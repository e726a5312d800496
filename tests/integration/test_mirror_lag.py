"""A mirror's lag is true from its first moment: a mirror restarted with nothing to copy reports 0 for every
assigned partition in its progress line, on its metrics endpoint and through Admin.mirror_lag, the partitions
it never copied anything from included."""

from __future__ import annotations

import re
import urllib.request

import pytest
from mirror_support import GROUP_SETTINGS, MirrorProcess, caught_up, mirror_args, mirrors, target_cluster
from prometheus_client.parser import text_string_to_metric_families

from backbone.client import Admin, NewTopic, Producer
from backbone.coordination import find_free_port

pytestmark = pytest.mark.integration

GROUP = "lag-mirror"


def lag_samples(port: int) -> dict[tuple[str, str], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {
        (s.labels["topic"], s.labels["partition"]): s.value
        for family in text_string_to_metric_families(text)
        if family.name == "backbone_mirror_lag_records"
        for s in family.samples
    }


def test_a_restarted_mirror_with_nothing_to_copy_reports_no_lag_anywhere(
    broker_factory, zookeeper, chroot, tmp_path, wait_for
) -> None:
    source = broker_factory(1, **{k.replace(".", "_"): v for k, v in GROUP_SETTINGS.items()})
    with target_cluster(zookeeper.connect_string + chroot + "-aggregate", tmp_path / "aggregate") as target:
        with Admin(bootstrap_servers=source.bootstrap) as admin:
            admin.create_topics([NewTopic("carts", 3, 1), NewTopic("quiet", 2, 1)])  # quiet: never written
        with Producer(bootstrap_servers=source.bootstrap, acks="all") as producer:
            for i in range(300):
                producer.send("carts", value=b"v%d" % i, partition=i % 3)
        args = mirror_args(
            source.bootstrap, target.bootstrap, "--topics-regex", "carts|quiet", "--group", GROUP
        )
        with mirrors() as started:
            started.append(MirrorProcess(tmp_path / "first.log", *args).start())
            wait_for(lambda: caught_up(source.bootstrap, GROUP, "carts"), timeout=60, what="first copy")
            assert started[0].terminate() == 0
            port = find_free_port()
            again = MirrorProcess(tmp_path / "again.log", *args, "--metrics-port", str(port)).start()
            started.append(again)
            every = {("carts", str(p)) for p in range(3)} | {("quiet", str(p)) for p in range(2)}

            def all_partitions_reported() -> bool:
                try:
                    return set(lag_samples(port)) == every
                except OSError:  # not listening yet
                    return False

            wait_for(all_partitions_reported, timeout=60, what="lag samples for all five partitions")
            assert set(lag_samples(port).values()) == {0.0}
            wait_for(lambda: "event=mirror_progress" in again.output(), timeout=30, what="a progress line")
            assert re.findall(r"event=mirror_progress .* lag=(\d+)", again.output()) != []
            assert set(re.findall(r"event=mirror_progress .* lag=(\d+)", again.output())) == {"0"}
            with Admin(bootstrap_servers=source.bootstrap) as admin:
                lag = admin.mirror_lag(GROUP)
            assert sorted((m.topic, m.partition, m.records) for m in lag) == sorted(
                (topic, int(p), 0) for topic, p in every
            )
            assert again.terminate() == 0
