"""The whole backbone as separate hosts (docker/compose.yml), broken the way datacenters break.

One topology for the module, built by docker/build and brought up under a project name of its own: dc1,
dc2 and aggregate (a ZooKeeper and three brokers each, on their own networks), a mirror and an audit
counter per datacenter on both its network and the aggregate's, an audit counter in the aggregate.
The host produces numbered records (acks=all, audited) into the published listeners while each test
breaks something; afterwards every acknowledged record is where it must be, record by record and in the
audit report, and each test prints "acknowledged N, lost 0". Everything the module made (containers,
networks, volumes) is removed at the end, however it ends.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from compose_support import (
    ComposeTopology,
    Traffic,
    audit_report,
    build_images,
    docker_engine,
    lost_in_aggregate,
    lost_in_source,
    read_topic,
    records_in,
    wait_for,
)

from backbone.client import Admin, KafkaClientError, NewTopic, Producer

# Bringing the topology up (and a first image build) happens in the first test's set-up.
pytestmark = [pytest.mark.system, pytest.mark.timeout(1500)]

MIRROR_CUT_S = 60.0
ZOOKEEPER_OUTAGE_S = 30.0
CATCH_UP_S = 180.0


@pytest.fixture(scope="module")
def backbone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComposeTopology]:
    client = docker_engine()
    topology = ComposeTopology(client, build_images())
    try:
        started = time.monotonic()
        topology.up()
        print(f"topology {topology.project} healthy after {time.monotonic() - started:.1f} s")
        yield topology
    finally:
        topology.close(tmp_path_factory.mktemp("container-logs"))
        client.close()


def create_topic(backbone: ComposeTopology, cluster: str, topic: str) -> None:
    with Admin(bootstrap_servers=backbone.bootstrap(cluster)) as admin:
        admin.create_topics([NewTopic(topic, 3, 3)])


def traffic(backbone: ComposeTopology, cluster: str, topic: str, **options) -> Traffic:
    return Traffic(
        backbone.bootstrap(cluster), topic, backbone.bootstrap("aggregate"), tag=cluster, **options
    )


def assert_kept_in_source(backbone: ComposeTopology, cluster: str, sent: Traffic) -> None:
    """Every acknowledged record is at its acknowledged offset, and no offset was acknowledged twice (two
    leaders accepting writes for one partition in one epoch would hand out the same offsets)."""
    with sent.lock:
        positions = list(sent.acknowledged.values())
    assert len(set(positions)) == len(positions), "one offset acknowledged for two records: split brain"
    lost = lost_in_source(sent, read_topic(backbone.bootstrap(cluster), sent.topic))
    print(f"{cluster} {sent.topic}: acknowledged {len(positions)}, lost {len(lost)}")
    assert len(positions) > 0
    assert lost == [], f"acknowledged but not in {cluster}: {lost[:20]}"


def assert_complete_in_aggregate(backbone: ComposeTopology, topic: str, *sent: Traffic) -> None:
    """The mirrors brought every acknowledged record into the aggregate, and the audit report agrees."""
    aggregate = backbone.bootstrap("aggregate")
    acknowledged = sum(t.acked for t in sent)
    missing: list[str] = []

    def complete() -> bool:
        try:
            missing[:] = lost_in_aggregate(sent, read_topic(aggregate, topic))
        except KafkaClientError:  # the aggregate does not answer (yet), or the mirror made no topic yet
            return False
        return not missing

    wait_for(complete, CATCH_UP_S, f"the aggregate to hold every acknowledged {topic} record", 3)
    report: list[str] = [""]

    def audited() -> bool:
        done, report[0] = audit_report(aggregate, topic)
        return done

    wait_for(audited, CATCH_UP_S, f"the audit report of {topic} to say complete", 3)
    print(report[0].strip())
    assert "100.000%" in report[0]
    print(f"aggregate {topic}: acknowledged {acknowledged}, lost {len(missing)}")
    assert acknowledged > 0


def wait_mirrored(backbone: ComposeTopology, topic: str) -> None:
    """Wait until the mirror has made `topic` in the aggregate and copies into it: the faults below break
    a flow that runs, not the first copy of a new topic."""
    aggregate = backbone.bootstrap("aggregate")
    wait_for(lambda: records_in(aggregate, topic) > 0, CATCH_UP_S, f"{topic} mirrored into the aggregate", 2)


def partition_leaders(bootstrap: str, topic: str) -> dict[int, tuple[int, list[int]]]:
    """partition -> (leader, in-sync replicas), as the cluster describes it."""
    with Admin(bootstrap_servers=bootstrap, request_timeout_ms=10_000) as admin:
        description = admin.describe_topics([topic])[topic]
    return {p.partition: (p.leader, sorted(p.isr)) for p in description.partitions}


def test_records_from_both_datacenters_reach_the_aggregate(backbone: ComposeTopology) -> None:
    for cluster in ("dc1", "dc2"):
        create_topic(backbone, cluster, "pageviews")
    dc1 = traffic(backbone, "dc1", "pageviews", limit=3000, rate=500)
    dc2 = traffic(backbone, "dc2", "pageviews", limit=3000, rate=500)
    with dc1, dc2:
        wait_for(lambda: dc1.acked + dc2.acked >= 6000, 120, "6000 acknowledgements", 0.5)
    assert dc1.failed == dc2.failed == 0
    assert_kept_in_source(backbone, "dc1", dc1)
    assert_kept_in_source(backbone, "dc2", dc2)
    assert_complete_in_aggregate(backbone, "pageviews", dc1, dc2)


def test_an_aggregate_broker_killed_and_started_again_loses_nothing(backbone: ComposeTopology) -> None:
    create_topic(backbone, "aggregate", "direct")
    create_topic(backbone, "dc1", "clicks")
    direct = traffic(backbone, "aggregate", "direct")
    mirrored = traffic(backbone, "dc1", "clicks")
    victim = backbone.container("aggregate-broker-2")
    with direct, mirrored:
        direct.wait_for_more(500)
        wait_mirrored(backbone, "clicks")
        victim.kill(signal="SIGKILL")
        killed_at = direct.acked
        direct.wait_for_more(killed_at + 1000)  # acks=all goes on with two of three replicas in sync
        victim.start()
        backbone.wait_healthy("aggregate-broker-2")
        direct.wait_for_more(direct.acked + 500)
    assert_kept_in_source(backbone, "aggregate", direct)
    assert_kept_in_source(backbone, "dc1", mirrored)
    assert_complete_in_aggregate(backbone, "clicks", mirrored)


def test_dc1_cut_off_from_the_aggregate_keeps_writing_and_the_mirror_catches_up(
    backbone: ComposeTopology,
) -> None:
    create_topic(backbone, "dc1", "searches")
    sent = traffic(backbone, "dc1", "searches")
    with sent:
        sent.wait_for_more(500)
        wait_mirrored(backbone, "searches")
        backbone.disconnect("mirror-dc1", "aggregate")
        cut_at, cut_started = sent.acked, time.monotonic()
        try:
            # dc1 accepts writes all through the cut: a third of the cut's worth arrives well within it.
            sent.wait_for_more(cut_at + int(sent.rate * MIRROR_CUT_S / 3), timeout=MIRROR_CUT_S)
            time.sleep(max(0.0, cut_started + MIRROR_CUT_S - time.monotonic()))  # the cut lasts 60 s
            accepted_during_cut = sent.acked - cut_at
        finally:
            backbone.connect("mirror-dc1", "aggregate")
        print(f"dc1 acknowledged {accepted_during_cut} records while cut off from the aggregate")
        sent.wait_for_more(sent.acked + 500)
    assert_kept_in_source(backbone, "dc1", sent)
    assert_complete_in_aggregate(backbone, "searches", sent)


def test_an_isolated_dc1_broker_heals_without_loss_or_split_brain(backbone: ComposeTopology) -> None:
    create_topic(backbone, "dc1", "orders")
    sent = traffic(backbone, "dc1", "orders")
    dc1 = backbone.bootstrap("dc1")
    with sent:
        sent.wait_for_more(500)
        wait_mirrored(backbone, "orders")
        isolated = partition_leaders(dc1, "orders")[0][0]  # the leader of partition 0
        backbone.disconnect(f"dc1-broker-{isolated}", "dc1")  # from its peers and its ZooKeeper
        try:
            wait_for(
                lambda: all(leader != isolated for leader, _ in partition_leaders(dc1, "orders").values()),
                60,
                f"leadership moved off the isolated broker {isolated}",
                2,
            )
            sent.wait_for_more(sent.acked + 1000)
        finally:
            backbone.connect(f"dc1-broker-{isolated}", "dc1")
        wait_for(
            lambda: all(len(isr) == 3 for _, isr in partition_leaders(dc1, "orders").values()),
            120,
            f"broker {isolated} back in sync",
            2,
        )
        sent.wait_for_more(sent.acked + 500)
    assert_kept_in_source(backbone, "dc1", sent)
    assert_complete_in_aggregate(backbone, "orders", sent)


def test_dc1_keeps_serving_while_its_zookeeper_is_away(backbone: ComposeTopology) -> None:
    create_topic(backbone, "dc1", "payments")
    sent = traffic(backbone, "dc1", "payments")
    zookeeper = backbone.container("dc1-zookeeper")
    with sent:
        sent.wait_for_more(500)
        wait_mirrored(backbone, "payments")
        zookeeper.stop(timeout=10)
        stopped_at, stopped = sent.acked, time.monotonic()
        try:
            sent.wait_for_more(stopped_at + 1000, timeout=ZOOKEEPER_OUTAGE_S)  # leaders keep serving
            time.sleep(max(0.0, stopped + ZOOKEEPER_OUTAGE_S - time.monotonic()))  # away for 30 s
            during = sent.acked - stopped_at
        finally:
            zookeeper.start()
        print(f"dc1 acknowledged {during} records while its ZooKeeper was away")
        backbone.wait_healthy("dc1-zookeeper")
        # The controller is back: a new topic gets leaders, which only a working controller assigns.
        create_topic(backbone, "dc1", "payments-after")
        with Producer(bootstrap_servers=backbone.bootstrap("dc1"), acks="all") as producer:
            producer.send("payments-after", b"after the outage").get(timeout=60)
        sent.wait_for_more(sent.acked + 500)
    assert_kept_in_source(backbone, "dc1", sent)
    assert_complete_in_aggregate(backbone, "payments", sent)


def test_the_whole_aggregate_restarted_keeps_its_data(backbone: ComposeTopology) -> None:
    aggregate = backbone.bootstrap("aggregate")
    before = {(r.partition, r.offset, r.value) for r in read_topic(aggregate, "pageviews")}
    assert before
    create_topic(backbone, "dc2", "signups")
    sent = traffic(backbone, "dc2", "signups")
    with sent:
        sent.wait_for_more(500)
        wait_mirrored(backbone, "signups")
        restarted = ["aggregate-zookeeper", *backbone.brokers("aggregate")]
        backbone.compose("restart", "--timeout", "30", *restarted)
        backbone.wait_healthy(*restarted)
        sent.wait_for_more(sent.acked + 500)
    after = {(r.partition, r.offset, r.value) for r in read_topic(aggregate, "pageviews")}
    print(f"aggregate pageviews: {len(before)} records before the restart, {len(before - after)} gone after")
    assert before <= after
    assert_kept_in_source(backbone, "dc2", sent)
    assert_complete_in_aggregate(backbone, "signups", sent)
