"""Fixtures for the security tests: a development CA (ops/dev-ca), SCRAM users in ZooKeeper, a broker with
PLAINTEXT, SASL_SSL and SSL listeners, and client settings for it."""

from __future__ import annotations

import contextlib
import ssl
import subprocess
import uuid
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import pytest

from backbone.client import Admin, Consumer, NewTopic, TopicPartition
from backbone.coordination import ClusterStore, ScramCredential, find_free_port
from backbone.dev.processes import BrokerProcess
from tests.helpers.wire import RawConnection

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "alice-secret"
BROKER_PASSWORD = "broker-secret"


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("dev-ca")
    subprocess.run([str(ROOT / "ops" / "dev-ca"), str(directory), "alice", "expired"], check=True)
    return directory


def add_users(store: ClusterStore) -> None:
    for user, password in (("alice", PASSWORD), ("broker", BROKER_PASSWORD)):
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            store.set_scram_credential(user, mechanism, ScramCredential.from_password(mechanism, password))


@contextlib.contextmanager
def broker_with_acls(
    zookeeper_connect: str,
    directory: Path,
    store: ClusterStore,
    users: Mapping[str, str],
    topics: Iterable[str],
) -> Iterator[tuple[BrokerProcess, int]]:
    """One broker with the ACL authorizer, `users` (SCRAM-SHA-512) on a SASL_PLAINTEXT listener whose port it
    yields with the broker, and `topics` made; admin is a super user."""
    for user, password in users.items():
        store.set_scram_credential(
            user, "SCRAM-SHA-512", ScramCredential.from_password("SCRAM-SHA-512", password)
        )
    plain_port, sasl_port = find_free_port(), find_free_port()
    properties = {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain_port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        # The PLAINTEXT listener (ANONYMOUS) is the harness's and the brokers' own: trusted here.
        "super.users": "User:admin;User:ANONYMOUS",
        "zookeeper.session.timeout.ms": 6000,
    }
    process = BrokerProcess(1, zookeeper_connect, directory, port=plain_port, properties=properties)
    process.start()
    try:
        with Admin(bootstrap_servers=process.bootstrap) as admin:
            admin.create_topics([NewTopic(t, 1, 1) for t in topics])
        yield process, sasl_port
    finally:
        process.stop(timeout=15)


def secure_properties(certificates: Path, **extra: object) -> dict[str, object]:
    return {
        "ssl.keystore.location": certificates / "broker.pem",
        "ssl.truststore.location": certificates / "ca.pem",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="broker" password="{BROKER_PASSWORD}";',
        **extra,
    }


@pytest.fixture
def secure_broker_properties() -> dict[str, object]:
    """Further broker properties of `secure_broker`; a test module overrides this fixture to set some."""
    return {}


@pytest.fixture
def secure_broker(
    zookeeper, chroot: str, tmp_path: Path, certificates: Path, store_factory, secure_broker_properties
) -> Iterator[tuple[BrokerProcess, int, int]]:
    add_users(store_factory())
    plain_port, sasl_port, ssl_port = find_free_port(), find_free_port(), find_free_port()
    properties = {
        **secure_properties(certificates),
        "listeners": f"PLAINTEXT://127.0.0.1:{plain_port},SASL_SSL://127.0.0.1:{sasl_port},"
        f"SSL://127.0.0.1:{ssl_port}",
        "ssl.client.auth": "requested",
        "zookeeper.session.timeout.ms": 6000,
        **secure_broker_properties,
    }
    process = BrokerProcess(
        1, zookeeper.connect_string + chroot, tmp_path / "broker-1", port=plain_port, properties=properties
    )
    process.start()
    try:
        yield process, sasl_port, ssl_port
    finally:
        process.stop(timeout=15)


def secure_client(certificates: Path, port: int, **extra: object) -> dict[str, object]:
    return {
        "bootstrap.servers": f"127.0.0.1:{port}",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": PASSWORD,
        "ssl.cafile": str(certificates / "ca.pem"),
        **extra,
    }


def tls_raw(port: int, context: ssl.SSLContext) -> RawConnection:
    """A raw protocol connection over TLS to a local listener."""
    raw = RawConnection(f"127.0.0.1:{port}")
    raw.sock = context.wrap_socket(raw.sock, server_hostname="127.0.0.1")
    return raw


def fresh_topic(bootstrap: str, prefix: str) -> str:
    """A new one-partition topic with a unique name."""
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic(topic, 1, 1)])
    return topic


def librdkafka_client(certificates: Path, port: int) -> dict[str, object]:
    """librdkafka's settings for alice with SCRAM-SHA-512 over TLS."""
    return {
        "bootstrap.servers": f"127.0.0.1:{port}",
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": PASSWORD,
        "ssl.ca.location": str(certificates / "ca.pem"),
    }


def read_values(bootstrap: str, topic: str, config: dict[str, str]) -> list[bytes]:
    """Every record value of `topic` up to its current end (none while the topic does not exist)."""
    with Consumer({**config, "bootstrap.servers": bootstrap}) as consumer:
        if topic not in consumer.topics():
            return []
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
        consumer.assign(partitions)
        ends = consumer.end_offsets(partitions)
        consumer.seek_to_beginning(*partitions)
        values: list[bytes] = []
        while any(consumer.position(tp) < ends[tp] for tp in partitions):
            for records in consumer.poll(timeout_ms=500).values():
                values.extend(record.value for record in records)
        return values
