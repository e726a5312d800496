"""`backbone produce` and `backbone consume` run as a user would, against a real broker."""

from __future__ import annotations

import signal
from datetime import UTC, datetime

import pytest
from cli_support import run, run_ok, spawn

from backbone.client import Admin, Producer, TopicPartition
from backbone.client.producer.partitioner import partition_for_key
from tests.helpers.names import unique_name

pytestmark = pytest.mark.integration

FIELDS = "%p|%o|%k|%s|%h\\n"


def create(bootstrap: str, partitions: int) -> str:
    name = unique_name("cli")
    run_ok("topics", "create", name, "--partitions", str(partitions), "--bootstrap-server", bootstrap)
    return name


def consume_rows(bootstrap: str, topic: str, *args: str) -> list[list[str]]:
    """`consume` with FIELDS as the format, split into [partition, offset, key, value, headers] rows."""
    out = run_ok("consume", topic, "--bootstrap-server", bootstrap, "--format", FIELDS, *args)
    return [line.split("|") for line in out.decode().splitlines()]


def end_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    with Admin(bootstrap_servers=bootstrap) as admin:
        found = admin.list_offsets({TopicPartition(topic, p): "latest" for p in range(partitions)})
    return [found[TopicPartition(topic, p)].offset for p in range(partitions)]


def test_keyed_lines_with_headers_come_back_in_order_on_their_murmur2_partitions(broker) -> None:
    topic = create(broker.bootstrap, 3)
    lines = [f"user-{i % 7}:event {i}" for i in range(40)]
    produced = run(
        "produce",
        topic,
        "--bootstrap-server",
        broker.bootstrap,
        "--key-separator",
        ":",
        "--header",
        "source=cli",
        "--header",
        "trace=a=b",
        "--compression",
        "lz4",
        "--linger-ms",
        "20",
        stdin="\n".join(lines).encode() + b"\n",
    )
    assert produced.returncode == 0, produced.stderr
    assert produced.stderr.decode() == f"sent 40 records to {topic!r}\n"

    rows = consume_rows(broker.bootstrap, topic, "--from-beginning", "--max-messages", "40")
    assert len(rows) == 40
    by_partition: dict[int, list[list[str]]] = {}
    for partition, offset, key, value, headers in rows:
        assert int(partition) == partition_for_key(key.encode(), 3), f"{key} is on the wrong partition"
        assert headers == "source=cli,trace=a=b"
        by_partition.setdefault(int(partition), []).append([int(offset), f"{key}:{value}"])
    for partition, records in by_partition.items():
        assert [offset for offset, _ in records] == list(range(len(records))), "offsets are dense from 0"
        sent_here = [line for line in lines if partition_for_key(line.split(":")[0].encode(), 3) == partition]
        assert [line for _, line in records] == sent_here, "a partition keeps the input's order"


def test_a_line_without_the_key_separator_is_named(broker) -> None:
    topic = create(broker.bootstrap, 1)
    server = ("--bootstrap-server", broker.bootstrap)
    stdin = b"a:1\nb:2\nno key here\nc:3\n"
    done = run("produce", topic, *server, "--key-separator", ":", stdin=stdin)
    assert done.returncode == 1
    assert done.stderr.decode().splitlines() == [
        f"sent 2 records to {topic!r}",
        "backbone produce: line 3 has no key separator ':' (add --allow-missing-key to send such lines "
        "with a null key)",
    ]
    assert end_offsets(broker.bootstrap, topic, 1) == [2], "the lines before the bad one were sent, no more"

    run_ok("produce", topic, *server, "--key-separator", ":", "--allow-missing-key", stdin=stdin)
    out = run_ok(
        "consume",
        topic,
        *server,
        "--offset",
        "2",
        "--partition",
        "0",
        "--max-messages",
        "4",
        "--format",
        "%K|%k|%s\\n",
    )
    assert out.decode().splitlines() == ["1|a|1", "1|b|2", "-1||no key here", "1|c|3"]


def test_start_by_time_or_offset(broker) -> None:
    topic = create(broker.bootstrap, 1)
    server = ("--bootstrap-server", broker.bootstrap)
    base = 1_700_000_000_000
    with Producer(bootstrap_servers=broker.bootstrap) as producer:
        for i in range(10):
            producer.send(topic, b"v%d" % i, timestamp_ms=base + i * 1000).get(timeout=30)
    stamps = "%o %T\\n"

    between = run_ok(
        "consume", topic, *server, "--from-time", str(base + 4500), "--timeout-ms", "1500", "--format", stamps
    )
    assert between.decode().splitlines() == [f"{i} {base + i * 1000}" for i in range(5, 10)], (
        "exits 0 after --timeout-ms without records, having printed those at or after the time"
    )
    iso = datetime.fromtimestamp((base + 3000) / 1000, tz=UTC).isoformat(timespec="milliseconds")
    exact = run_ok("consume", topic, *server, "--from-time", iso, "--max-messages", "2", "--format", stamps)
    assert exact.decode().splitlines() == [f"3 {base + 3000}", f"4 {base + 4000}"]

    from_offset = run_ok(
        "consume",
        topic,
        *server,
        "--partition",
        "0",
        "--offset",
        "8",
        "--max-messages",
        "2",
        "--format",
        "%o:%s\\n",
    )
    assert from_offset == b"8:v8\n9:v9\n"
    beyond = run("consume", topic, *server, "--partition", "0", "--offset", "11", "--max-messages", "1")
    assert beyond.returncode == 1
    assert f"offset 11 is outside {topic}-0, which holds offsets 0 to 9".encode() in beyond.stderr


def test_default_start_is_the_end_and_ctrl_c_exits_130(broker) -> None:
    topic = create(broker.bootstrap, 2)
    run_ok("produce", topic, "--bootstrap-server", broker.bootstrap, stdin=b"old 1\nold 2\n")
    with spawn("consume", topic, "--bootstrap-server", broker.bootstrap, "--print-metadata") as consumer:
        consumer.wait_for("err", b"consuming")  # positions are known: from here on records are new
        with Producer(bootstrap_servers=broker.bootstrap) as producer:
            metadata = producer.send(topic, b"new", partition=1).get(timeout=30)
        consumer.wait_for("out", b"\tnew\n")
        consumer.process.send_signal(signal.SIGINT)
        assert consumer.finish() == 130
    expected = f"Partition:1\tOffset:{metadata.offset}\tTimestamp:{metadata.timestamp}\tnew\n"
    assert bytes(consumer.out) == expected.encode(), "only the record produced after the start is printed"
    assert bytes(consumer.err).endswith(b"consumed 1 record\n")
    assert b"Traceback" not in consumer.err


def test_binary_keys_and_values_pass_through_unchanged(broker) -> None:
    topic = create(broker.bootstrap, 1)
    server = ("--bootstrap-server", broker.bootstrap)
    value = bytes(b for b in range(256) if b != 0x0A)  # every byte but the line end
    run_ok("produce", topic, *server, "--key-separator", "\t", stdin=b"\xff\x00\xfe\t" + value + b"\n")
    out = run_ok(
        "consume", topic, *server, "--from-beginning", "--max-messages", "1", "--format", "%K %S %k%s"
    )
    assert out == b"3 255 \xff\x00\xfe" + value


def test_consuming_an_unknown_topic_is_a_clear_error(broker) -> None:
    missing = unique_name("missing")
    done = run("consume", missing, "--bootstrap-server", broker.bootstrap, "--max-messages", "1")
    assert done.returncode == 1
    assert done.stderr.decode() == (
        f"backbone consume: no topic named {missing!r}; `backbone topics list` shows the topics there are\n"
    )


def test_progress_is_reported_when_asked(broker) -> None:
    topic = create(broker.bootstrap, 1)
    lines = b"".join(b"line %d\n" % i for i in range(3000))
    done = run(
        "produce",
        topic,
        "--bootstrap-server",
        broker.bootstrap,
        "--progress",
        "--progress-interval",
        "0",
        stdin=lines,
    )
    assert done.returncode == 0, done.stderr
    reports = [line for line in done.stderr.decode().splitlines() if line.startswith("progress: ")]
    assert [line.split(" records sent")[0] for line in reports] == ["progress: 1024", "progress: 2048"]
    assert end_offsets(broker.bootstrap, topic, 1) == [3000]


def test_delivery_failures_are_counted_and_exit_1(broker) -> None:
    topic = unique_name("cli-small")
    server = ("--bootstrap-server", broker.bootstrap)
    run_ok("topics", "create", topic, *server, "--partitions", "1", "--config", "max.message.bytes=200")
    done = run("produce", topic, *server, stdin=b"x" * 1000 + b"\n")
    assert done.returncode == 1
    lines = done.stderr.decode().splitlines()
    assert f"sent 0 records to {topic!r}" in lines
    assert lines[-1].startswith("backbone produce: 1 of 1 records failed: MESSAGE_TOO_LARGE: ")
    assert end_offsets(broker.bootstrap, topic, 1) == [0]
