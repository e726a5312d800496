"""Records cross between the `backbone` command and kafka-python through a real broker, both ways."""

from __future__ import annotations

import pytest
from cli_support import run, run_ok
from kafka import KafkaProducer
from test_broker_clients import consume_all  # kafka-python reading a whole topic, bounded in time

from tests.helpers.names import unique_name

pytestmark = pytest.mark.integration

PARTITIONS = 2
COUNT = 60


@pytest.fixture
def topic(broker) -> tuple[str, str]:
    name = unique_name("cli-interop")
    run_ok("topics", "create", name, "--partitions", str(PARTITIONS), "--bootstrap-server", broker.bootstrap)
    return broker.bootstrap, name


@pytest.mark.parametrize(
    ("codec", "acks"), [("none", "all"), ("gzip", "1"), ("snappy", "0"), ("lz4", "all"), ("zstd", "1")]
)
def test_cli_producer_to_kafka_python_consumer(topic: tuple[str, str], codec: str, acks: str) -> None:
    bootstrap, name = topic
    sent = {f"value-{i}".encode(): f"key-{i % 5}".encode() for i in range(COUNT)}
    stdin = b"".join(key + b"=" + value + b"\n" for value, key in sent.items())
    done = run(
        "produce",
        name,
        "--bootstrap-server",
        bootstrap,
        "--key-separator",
        "=",
        "--header",
        "via=cli",
        "--compression",
        codec,
        "--acks",
        acks,
        stdin=stdin,
    )
    assert done.returncode == 0, done.stderr
    received = consume_all(bootstrap, name, COUNT)
    assert {message.value: message.key for message in received} == sent
    assert len(received) == COUNT
    assert all(list(message.headers) == [("via", b"cli")] for message in received)


def test_kafka_python_producer_to_cli_consumer(topic: tuple[str, str]) -> None:
    bootstrap, name = topic
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    try:
        futures = [
            producer.send(
                name, f"value-{i}".encode(), key=f"key-{i % 5}".encode(), headers=[("n", b"%d" % i)]
            )
            for i in range(COUNT)
        ]
        producer.flush(30)
        metadata = [future.get(timeout=30) for future in futures]
    finally:
        producer.close(timeout=10)
    out = run_ok(
        "consume",
        name,
        "--bootstrap-server",
        bootstrap,
        "--from-beginning",
        "--max-messages",
        str(COUNT),
        "--format",
        "%p %o %k %s %h %T\\n",
    )
    rows = sorted(tuple(line.split(" ")) for line in out.decode().splitlines())
    expected = sorted(
        (str(m.partition), str(m.offset), f"key-{i % 5}", f"value-{i}", f"n={i}", str(m.timestamp))
        for i, m in enumerate(metadata)
    )
    assert rows == expected
