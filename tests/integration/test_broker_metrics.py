"""A live broker's Prometheus endpoint (`metrics.port`): its counters move with traffic, and its
replication gauges move when a follower is killed."""

from __future__ import annotations

import urllib.request

import pytest
from broker_fixtures import wait_until_brokers_see_each_other
from prometheus_client.parser import text_string_to_metric_families

from backbone.client import Admin, Consumer, NewTopic, Producer, TopicPartition
from backbone.coordination import find_free_port

pytestmark = pytest.mark.integration


def scrape(port: int) -> dict[tuple[str, frozenset], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def test_a_brokers_metrics_move_with_traffic_and_with_a_killed_follower(broker_factory, wait_for) -> None:
    ports = {1: find_free_port(), 2: find_free_port()}
    brokers = {
        i: broker_factory(i, metrics_port=ports[i], replica_lag_time_max_ms=1000, min_insync_replicas=2)
        for i in (1, 2)
    }
    wait_until_brokers_see_each_other(list(brokers.values()))
    bootstrap = brokers[1].bootstrap
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic("clicks", 1, 2)])
        wait_for(
            lambda: len(admin.describe_topics(["clicks"])["clicks"].partitions[0].isr) == 2, what="ISR of 2"
        )
        leader = admin.describe_topics(["clicks"])["clicks"].partitions[0].leader
    follower = 3 - leader
    before = scrape(ports[leader])
    assert value(before, "backbone_broker_under_replicated_partitions") == 0
    assert value(before, "backbone_broker_leader_partitions") >= 1
    assert value(before, "process_resident_memory_bytes") > 0
    assert sum(value(scrape(ports[i]), "backbone_broker_active_controller") for i in (1, 2)) == 1

    with Producer(bootstrap_servers=bootstrap, acks="all") as producer:
        for i in range(50):
            producer.send("clicks", b"click-%d" % i)
    with Consumer(bootstrap_servers=bootstrap) as consumer:
        tp = TopicPartition("clicks", 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got = 0
        for _ in range(50):
            got += sum(len(r) for r in consumer.poll(timeout_ms=200).values())
            if got >= 50:
                break
    after = scrape(ports[leader])
    assert value(after, "backbone_broker_topic_messages_in_total", topic="clicks") == 50
    assert value(after, "backbone_broker_topic_bytes_in_total", topic="clicks") > 50 * len(b"click-0")
    assert value(after, "backbone_broker_topic_bytes_out_total", topic="clicks") > 0
    assert any(
        name == "backbone_broker_requests_total" and ("api", "produce") in labels and count > 0
        for (name, labels), count in after.items()
    )
    produce_latency = [
        count
        for (name, labels), count in after.items()
        if name == "backbone_broker_request_remote_seconds_count" and ("api", "produce") in labels
    ]
    assert produce_latency and produce_latency[0] > 0
    assert value(after, "backbone_broker_connections", listener="PLAINTEXT") >= 1
    assert value(after, "backbone_broker_fetch_sessions") >= 1  # the follower's replica fetcher holds one

    brokers[follower].kill()
    wait_for(
        lambda: value(scrape(ports[leader]), "backbone_broker_under_replicated_partitions") >= 1,
        timeout=30,
        what="the leader reports the partition under-replicated",
    )
    down = scrape(ports[leader])
    assert value(down, "backbone_broker_isr_shrinks_total") >= 1
    assert value(down, "backbone_broker_under_min_isr_partitions") >= 1  # ISR 1 < min.insync.replicas 2
