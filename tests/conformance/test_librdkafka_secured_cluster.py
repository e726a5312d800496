"""The secured cluster librdkafka's security tests run on (ops/client_suites/librdkafka.py): a client logs in
over SASL_SSL with exactly the settings the runner writes to librdkafka's test.conf, and the kafka-acls.sh
stand-in denies and allows a topic as the tests use Kafka's. The client is confluent-kafka (librdkafka),
so these run without building librdkafka's test suite.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from ops.client_suites import librdkafka
from ops.client_suites.cluster import Cluster, running_cluster
from tests.conformance.support import wait_until
from tests.helpers.names import unique_name

pytestmark = pytest.mark.conformance

KAFKA_ACLS = librdkafka.KAFKA_PATH / "bin" / "kafka-acls.sh"
# The `sasl_ssl` scenario's settings on one broker.
ONE_BROKER = {"default.replication.factor": "1", "offsets.topic.replication.factor": "1"}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    properties = {**librdkafka.SCENARIOS["sasl_ssl"].properties, **ONE_BROKER}
    directory = tmp_path_factory.mktemp("secured")
    with running_cluster(directory, properties, brokers=1, sasl_ssl=True) as cluster:
        yield cluster


def produce_error(producer: Producer, topic: str) -> KafkaError | None:
    """The outcome of producing one message (None: delivered)."""
    outcome: list[KafkaError | None] = []
    try:
        producer.produce(topic, b"x", on_delivery=lambda error, _message: outcome.append(error))
    except KafkaException as exc:  # refused at once: the client knows the topic is not authorized
        return exc.args[0]
    producer.flush(30)
    assert outcome, "no delivery report within 30 s"
    return outcome[0]


def kafka_acls(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "BACKBONE_ZOOKEEPER": cluster.zookeeper_connect, "BACKBONE_PYTHON": sys.executable}
    command = [str(KAFKA_ACLS), "--bootstrap-server", cluster.bootstrap, *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)


def test_test_conf_settings_log_in_and_the_acls_stand_in_denies_then_allows_a_topic(secured: Cluster) -> None:
    settings, ssl_env = librdkafka.test_settings(secured.login)
    assert settings["security.protocol"] == "SASL_SSL" and settings["sasl.username"] == "client"
    # Every file 0097 reads exists (the PKCS#12 keystore opens with the password it is given).
    assert all(Path(ssl_env[name]).is_file() for name in ssl_env if name != "SSL_password")
    password = f"pass:{ssl_env['SSL_password']}"
    opened = subprocess.run(
        ["openssl", "pkcs12", "-in", ssl_env["SSL_pkcs"], "-passin", password, "-nokeys", "-info"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert opened.returncode == 0, opened.stderr
    # librdkafka checks at creation that the client key matches its certificate.
    config = {"bootstrap.servers": secured.bootstrap, **settings, "message.timeout.ms": 10000}
    producer = Producer(config)
    topic = unique_name("acls-stand-in")
    assert produce_error(producer, topic) is None

    denial = ["--operation", "All", "--deny-principal", "User:*", "--deny-host", "*", "--topic", topic]
    added = kafka_acls(secured, "--add", *denial)
    assert added.returncode == 0, added.stderr
    wait_until(
        lambda: (
            (error := produce_error(producer, topic)) is not None
            and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        ),
        what="the deny ACL to refuse producing",
    )
    listed = kafka_acls(secured, "--list", "--topic", topic)
    assert "User:*\tDENY\tALL" in listed.stdout, listed

    removed = kafka_acls(secured, "--remove", "--force", *denial)
    assert removed.returncode == 0, removed.stderr
    # A new client: the first keeps the topic as unauthorized until its next metadata refresh.
    wait_until(lambda: produce_error(Producer(config), topic) is None, what="producing allowed again")


def test_acls_stand_in_refuses_an_argument_it_does_not_know() -> None:
    command = [str(KAFKA_ACLS), "--add", "--consumer"]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert "unsupported argument '--consumer'" in result.stderr
