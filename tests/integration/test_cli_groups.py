"""`backbone groups ...` run as a user would against a real broker, with offsets committed through our
Admin client and through kafka-python consumers: list, describe with lag, reset-offsets (dry run, execute,
every target, refused while a member is active) and delete."""

from __future__ import annotations

import pytest
from broker_fixtures import wait_until_brokers_see_each_other
from cli_support import run, run_ok
from kafka import KafkaConsumer

from backbone.client import Admin, NewTopic, Producer, TopicPartition
from backbone.consumer_groups.offsets_topic import partition_for
from tests.helpers.names import unique_name

pytestmark = pytest.mark.integration

# One offsets partition keeps the internal topic quick to create; no initial rebalance delay and short
# session timeouts keep kafka-python members quick to join and to leave.
BROKER_SETTINGS = {
    "offsets.topic.num.partitions": 1,
    "offsets.topic.replication.factor": 1,
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 1000,
}
WAIT_S = 60.0


def table(output: bytes) -> list[dict[str, str]]:
    """A printed table as one dict per row, keyed by the header's columns."""
    lines = output.decode().splitlines()
    header = lines[0].split()
    rows = [dict(zip(header, line.split(), strict=True)) for line in lines[1:]]
    return rows


def by_partition(rows: list[dict[str, str]], *columns: str) -> dict[int, tuple[str, ...]]:
    return {int(row["PARTITION"]): tuple(row[c] for c in columns) for row in rows}


def committed(admin: Admin, group: str) -> dict[TopicPartition, int]:
    return {tp: o.offset for tp, o in admin.list_consumer_group_offsets(group).items()}


def test_lag_reset_offsets_and_delete(broker_factory, wait_for) -> None:
    broker = broker_factory(1, **BROKER_SETTINGS)
    server = ("--bootstrap-server", broker.bootstrap)
    topic, group = unique_name("lag"), unique_name("group")
    t0, t1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    base_ms = 1_700_000_000_000
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        admin.create_topics([NewTopic(topic, 2, 1)])
        with Producer(bootstrap_servers=broker.bootstrap) as producer:
            # Partition 0: ten records a second apart from base_ms; partition 1: five records before it.
            for i in range(10):
                producer.send(topic, b"r%d" % i, partition=0, timestamp_ms=base_ms + 1000 * i)
            for i in range(5):
                producer.send(topic, b"s%d" % i, partition=1, timestamp_ms=base_ms - 10_000 + i)
            producer.flush(30)
        admin.alter_consumer_group_offsets(group, {t0: 4, t1: 5})
        assert committed(admin, group) == {t0: 4, t1: 5}

        assert group in run_ok("groups", "list", *server).decode().split()
        states = table(run_ok("groups", "list", "--state", *server))
        assert {"GROUP": group, "STATE": "Empty"} in states
        assert group not in [
            row["GROUP"] for row in table(run_ok("groups", "list", "--state", "Stable", *server))
        ]

        described = run("groups", "describe", "--group", group, *server)
        assert described.returncode == 0, described.stderr
        assert f"consumer group {group!r} has no active members" in described.stderr.decode()
        rows = table(described.stdout)
        assert {row["GROUP"] for row in rows} == {group} and {row["TOPIC"] for row in rows} == {topic}
        assert by_partition(rows, "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID") == {
            0: ("4", "10", "6", "-"),
            1: ("5", "5", "0", "-"),
        }
        lag = admin.consumer_group_lag([group])[group]
        assert [(r.partition, r.committed_offset, r.log_end_offset, r.lag) for r in lag] == [
            (0, 4, 10, 6),
            (1, 5, 5, 0),
        ]

        def reset(*args: str) -> dict[int, tuple[str, ...]]:
            out = run_ok("groups", "reset-offsets", "--group", group, *args, *server)
            return by_partition(table(out), "CURRENT-OFFSET", "NEW-OFFSET")

        # A dry run (the default) prints the plan and changes nothing.
        assert reset("--topic", topic, "--to-earliest") == {0: ("4", "0"), 1: ("5", "0")}
        assert reset("--all-topics", "--to-earliest", "--dry-run") == {0: ("4", "0"), 1: ("5", "0")}
        assert committed(admin, group) == {t0: 4, t1: 5}

        assert reset("--all-topics", "--shift-by", "-2", "--execute") == {0: ("4", "2"), 1: ("5", "3")}
        assert committed(admin, group) == {t0: 2, t1: 3}
        assert reset("--topic", topic, "--to-offset", "100", "--execute") == {0: ("2", "10"), 1: ("3", "5")}
        assert committed(admin, group) == {t0: 10, t1: 5}
        # The first record at or after base + 5 s on partition 0; none on partition 1 (its log end).
        at = str(base_ms + 5000)
        assert reset("--all-topics", "--to-datetime", at, "--execute") == {0: ("10", "5"), 1: ("5", "5")}
        assert committed(admin, group) == {t0: 5, t1: 5}
        assert reset("--topic", f"{topic}:1", "--to-earliest", "--execute") == {1: ("5", "0")}
        assert reset("--topic", f"{topic}:0", "--to-latest", "--execute") == {0: ("5", "10")}
        assert committed(admin, group) == {t0: 10, t1: 0}

        # Bad requests are refused with a message, and change nothing.
        for args, message in [
            (["--topic", f"{topic}:7", "--to-earliest"], "has no partition 7"),
            (["--topic", "no-such-topic", "--to-earliest"], "no topic named 'no-such-topic'"),
        ]:
            refused = run("groups", "reset-offsets", "--group", group, *args, "--execute", *server)
            assert refused.returncode == 1 and message in refused.stderr.decode(), refused.stderr
        other = unique_name("other")
        admin.create_topics([other])
        refused = run(
            "groups", "reset-offsets", "--group", group, "--topic", other, "--shift-by", "1", *server
        )
        assert refused.returncode == 1 and "no committed offset" in refused.stderr.decode(), refused.stderr
        assert committed(admin, group) == {t0: 10, t1: 0}

        # Deleting one partition's offsets, then the group.
        deleted = run_ok("groups", "delete", "--group", group, "--topic", f"{topic}:1", *server)
        assert "deleted the committed offsets of 1 partition from" in deleted.decode()
        assert committed(admin, group) == {t0: 10}
        assert (
            run_ok("groups", "delete", "--group", group, *server).decode()
            == f"deleted consumer group {group!r}\n"
        )
        assert committed(admin, group) == {}
        assert group not in run_ok("groups", "list", *server).decode().split()
    for command in (
        ["describe", "--group", ""],
        ["describe", "--group", "x" * 300],
        ["delete", "--group", ""],
    ):
        invalid = run("groups", *command, *server)
        assert invalid.returncode == 1 and "INVALID_GROUP_ID" in invalid.stderr.decode(), invalid.stderr
    gone = run("groups", "delete", "--group", group, *server)
    assert gone.returncode == 1 and f"no consumer group named {group!r}" in gone.stderr.decode()
    missing = run("groups", "describe", "--group", group, *server)
    assert missing.returncode == 1 and f"no consumer group named {group!r}" in missing.stderr.decode()


def test_an_active_group_is_described_and_protected(broker_factory, wait_for) -> None:
    broker = broker_factory(1, **BROKER_SETTINGS)
    server = ("--bootstrap-server", broker.bootstrap)
    topic, group = unique_name("active"), unique_name("group")
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        admin.create_topics([NewTopic(topic, 2, 1)])
        with Producer(bootstrap_servers=broker.bootstrap) as producer:
            for i in range(6):
                producer.send(topic, b"v%d" % i, partition=i % 2)
            producer.flush(30)

        consumer = KafkaConsumer(
            topic,
            bootstrap_servers=broker.bootstrap,
            group_id=group,
            client_id="lag-checker",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
        )
        try:
            seen: list[object] = []

            def read_everything() -> bool:
                for records in consumer.poll(timeout_ms=200).values():
                    seen.extend(records)
                return len(seen) >= 6

            wait_for(read_everything, timeout=WAIT_S, what="the kafka-python member reading every record")
            consumer.commit()
            before = committed(admin, group)
            assert before == {TopicPartition(topic, 0): 3, TopicPartition(topic, 1): 3}

            def stable() -> bool:
                consumer.poll(timeout_ms=100)  # keeps the member alive while we wait
                return admin.describe_consumer_groups([group])[group].state == "Stable"

            wait_for(stable, timeout=WAIT_S, what="the group to be stable")
            rows = table(run_ok("groups", "describe", "--group", group, *server))
            assert by_partition(rows, "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CLIENT-ID") == {
                0: ("3", "3", "0", "lag-checker"),
                1: ("3", "3", "0", "lag-checker"),
            }
            members = table(run_ok("groups", "describe", "--group", group, "--members", *server))
            assert [(m["CLIENT-ID"], m["#PARTITIONS"]) for m in members] == [("lag-checker", "2")]
            assert members[0]["CONSUMER-ID"] == rows[0]["CONSUMER-ID"]
            state = table(run_ok("groups", "describe", "--group", group, "--state", *server))
            assert [(s["STATE"], s["#MEMBERS"]) for s in state] == [("Stable", "1")]

            for command in (
                ["reset-offsets", "--group", group, "--all-topics", "--to-earliest", "--execute"],
                ["reset-offsets", "--group", group, "--all-topics", "--to-earliest"],
                ["delete", "--group", group],
            ):
                refused = run("groups", *command, *server)
                assert refused.returncode == 1, refused.stdout
                assert "active member" in refused.stderr.decode()
            subscribed = run("groups", "delete", "--group", group, "--topic", topic, *server)
            assert subscribed.returncode == 1
            assert f"has members subscribed to {topic!r}" in subscribed.stderr.decode(), subscribed.stderr
            assert committed(admin, group) == before
        finally:
            consumer.close()

        wait_for(
            lambda: not admin.describe_consumer_groups([group])[group].is_active,
            timeout=WAIT_S,
            what="the group to empty after its member left",
        )
        run_ok(
            "groups", "reset-offsets", "--group", group, "--all-topics", "--to-earliest", "--execute", *server
        )
        assert committed(admin, group) == {TopicPartition(topic, 0): 0, TopicPartition(topic, 1): 0}


def test_groups_are_listed_from_every_coordinator(broker_factory) -> None:
    offsets_partitions = 4
    settings = {**BROKER_SETTINGS, "offsets.topic.num.partitions": offsets_partitions}
    brokers = [broker_factory(i, **settings) for i in (1, 2)]
    wait_until_brokers_see_each_other(brokers)
    topic = unique_name("spread")
    # Two groups on each offsets partition, so both brokers coordinate some (each leads some partitions).
    by_partition: dict[int, list[str]] = {p: [] for p in range(offsets_partitions)}
    while any(len(names) < 2 for names in by_partition.values()):
        group = unique_name("group")
        by_partition[partition_for(group, offsets_partitions)].append(group)
    groups = sorted(g for names in by_partition.values() for g in names[:2])
    with Admin(bootstrap_servers=brokers[0].bootstrap) as admin:
        admin.create_topics([NewTopic(topic, 1, 1)])
        for group in groups:
            admin.alter_consumer_group_offsets(group, {TopicPartition(topic, 0): 0})
        listed = admin.list_consumer_groups()
        described = admin.describe_consumer_groups(groups)
        offsets_topic = admin.describe_topics(["__consumer_offsets"])["__consumer_offsets"]
    leaders = {p.partition: p.leader for p in offsets_topic.partitions}
    assert set(leaders.values()) == {1, 2}, "the offsets topic's partitions are spread over both brokers"
    assert [g.group_id for g in listed] == groups
    assert {g.group_id: g.coordinator for g in listed} == {
        g: leaders[partition_for(g, offsets_partitions)] for g in groups
    }
    assert {g: d.coordinator for g, d in described.items()} == {g.group_id: g.coordinator for g in listed}
    output = run_ok("groups", "list", "--bootstrap-server", brokers[1].bootstrap)
    assert output.decode().split() == groups
