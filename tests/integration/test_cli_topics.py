"""`backbone topics ...` run as a user would, against real brokers; and how every client command fails
when nothing answers at the bootstrap address."""

from __future__ import annotations

import os
import re

import pytest
from cli_support import run, run_ok

from backbone.client import Admin, Producer, TopicPartition
from backbone.coordination import find_free_port
from tests.helpers.names import unique_name

pytestmark = pytest.mark.integration


def describe(bootstrap: str, *names: str) -> tuple[dict[str, dict[str, str]], dict[tuple[str, int], dict]]:
    """`topics describe` parsed: {topic: header fields}, {(topic, partition): partition fields}."""
    text = run_ok("topics", "describe", "--bootstrap-server", bootstrap, *names).decode()
    topics, partitions = {}, {}
    for line in text.splitlines():
        fields = dict(re.findall(r"(\w+): ([^\t]*)", line))
        if line.startswith("\t"):
            partitions[(fields["Topic"], int(fields["Partition"]))] = fields
        else:
            topics[fields["Topic"]] = fields
    return topics, partitions


def test_topics_are_created_listed_described_altered_and_deleted(broker_factory, wait_for) -> None:
    brokers = [broker_factory(1), broker_factory(2)]
    bootstrap = brokers[0].bootstrap
    name, other = unique_name("cli"), unique_name("cli")
    server = ("--bootstrap-server", bootstrap)

    created = run_ok(
        "topics",
        "create",
        name,
        *server,
        "--partitions",
        "3",
        "--replication-factor",
        "2",
        "--config",
        "retention.ms=3600000",
    )
    assert created.decode() == f"created topic {name!r}\n"
    run_ok("topics", "create", other, *server, "--partitions", "2", "--replication-factor", "1")
    assert {name, other} <= set(run_ok("topics", "list", *server).decode().split())

    # Watermarks on the one-replica topic: the leader alone commits what it appends.
    with Producer(bootstrap_servers=bootstrap) as producer:
        for i in range(5):
            producer.send(other, b"v%d" % i, partition=1).get(timeout=30)
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.delete_records({TopicPartition(other, 1): 2})

    topics, partitions = describe(bootstrap, name, other)
    assert list(topics) == [name, other]
    assert (topics[name]["PartitionCount"], topics[name]["ReplicationFactor"]) == ("3", "2")
    assert topics[name]["Configs"] == "retention.ms=3600000", "only the topic's own overrides are listed"
    for p in range(3):
        fields = partitions[(name, p)]
        replicas = fields["Replicas"].split(",")
        assert sorted(replicas) == ["1", "2"]
        assert fields["Leader"] in replicas
        assert set(fields["Isr"].split(",")) <= {"1", "2"} and fields["Leader"] in fields["Isr"].split(",")
        assert fields["Offline"] == "none"
        assert (fields["LowWatermark"], fields["HighWatermark"]) == ("0", "0")
    assert (topics[other]["PartitionCount"], topics[other]["ReplicationFactor"]) == ("2", "1")
    assert [
        (partitions[(other, p)]["LowWatermark"], partitions[(other, p)]["HighWatermark"]) for p in (0, 1)
    ] == [
        ("0", "0"),
        ("2", "5"),
    ]

    altered = run_ok(
        "topics",
        "alter",
        name,
        *server,
        "--config",
        "cleanup.policy=compact",
        "--delete-config",
        "retention.ms",
        "--partitions",
        "4",
    )
    assert b"set cleanup.policy=compact" in altered and b"deleted retention.ms" in altered
    topics, partitions = describe(bootstrap)
    assert {name, other} <= set(topics), "describe without names covers every topic"
    assert topics[name]["Configs"] == "cleanup.policy=compact"
    assert topics[name]["PartitionCount"] == "4" and (name, 3) in partitions
    assert topics[other]["Configs"] == ""

    again = run("topics", "create", name, *server)
    assert again.returncode == 1
    assert f"topic {name!r} already exists".encode() in again.stderr
    assert (
        run_ok("topics", "create", name, *server, "--if-not-exists")
        == f"topic {name!r} already exists\n".encode()
    )

    assert run_ok("topics", "delete", name, other, *server).decode().splitlines() == [
        f"deleted topic {name!r}",
        f"deleted topic {other!r}",
    ]
    wait_for(
        lambda: not {name, other} & set(run_ok("topics", "list", *server).decode().split()),
        timeout=30,
        interval=0.5,
        what="deleted topics to leave the list",
    )
    gone = run("topics", "delete", name, *server)
    assert gone.returncode == 1 and f"no topic named {name!r}".encode() in gone.stderr
    assert run("topics", "delete", name, *server, "--if-exists").returncode == 0


def test_unknown_topic_is_named_in_a_clear_error(broker) -> None:
    missing = unique_name("missing")
    for command in (["describe", missing], ["alter", missing, "--config", "retention.ms=1"]):
        done = run("topics", *command, "--bootstrap-server", broker.bootstrap)
        assert done.returncode == 1
        assert done.stdout == b""
        assert done.stderr.decode() == (
            f"backbone topics: no topic named {missing!r}; "
            "`backbone topics list` shows the topics there are\n"
        )


def test_mistakes_in_the_call_are_usage_errors() -> None:
    # Checked before anything connects, so no broker is needed (the address is never dialled).
    server = ("--bootstrap-server", "127.0.0.1:1")
    for args, message in [
        (["topics", "alter", "t", *server], b"say what to change"),
        (["topics", "create", "t", *server, "--config", "retention.ms"], b"--config takes key=value"),
        (["topics", "create", "t", *server, "--partitions", "0"], b"must be at least 1"),
        (["consume", "t", *server, "--offset", "3"], b"--offset needs --partition"),
        (["consume", "t", *server, "--format", "%x"], b"unknown %'x'"),
        (["consume", "t", *server, "--from-time", "yesterday"], b"--from-time takes ISO 8601"),
        (["produce", "t", *server, "--header", "novalue"], b"--header takes key=value"),
    ]:
        done = run(*args, timeout=30)
        assert done.returncode == 2, (args, done.stderr)
        assert message in done.stderr, (args, done.stderr)


@pytest.mark.parametrize("command", [["topics", "list"], ["produce", "events"], ["consume", "events"]])
def test_unreachable_bootstrap_says_what_to_check(command: list[str]) -> None:
    port = find_free_port()  # nothing listens there once the finder has closed its socket
    address = f"127.0.0.1:{port}"
    env = dict(os.environ, BACKBONE_BOOTSTRAP=address)  # the environment names the cluster
    # run's timeout bounds the wait: the command must give up by itself well before that.
    done = run(*command, "--request-timeout-ms", "3000", stdin=b"a line\n", timeout=45, env=env)
    assert done.returncode == 1
    error = done.stderr.decode()
    assert error.startswith(f"backbone {command[0]}: no broker answered at {address} within 3000 ms")
    assert f"{address}: Connection refused" in error
    assert "Check that the brokers are running and that --bootstrap-server" in error
    assert "Traceback" not in error
