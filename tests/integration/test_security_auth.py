"""Listeners with TLS and SASL on a real broker: standard clients (kafka-python, confluent-kafka, kcat) and
ours authenticate with SCRAM-SHA-512 over TLS and produce and consume; wrong passwords, unknown users,
untrusted and expired certificates are refused; nothing is served before authentication."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import uuid
from pathlib import Path

import kafka
import kafka.errors
import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from security_fixtures import (
    PASSWORD,
    ROOT,
    add_users,
    librdkafka_client,
    secure_client,
    secure_properties,
    tls_raw,
)

from backbone.client import Admin, Consumer, NewTopic, Producer, TopicPartition
from backbone.coordination import find_free_port
from backbone.dev.processes import BrokerProcess
from backbone.protocol import codec
from backbone.protocol.errors import ErrorCode, SaslAuthenticationFailedError
from tests.helpers.requests import metadata_request

pytestmark = pytest.mark.integration


def produce_and_consume(config: dict[str, object], topic: str, count: int = 20) -> None:
    with Producer(config) as producer:
        for i in range(count):
            producer.send(topic, b"v%d" % i)
        producer.flush(30)
    with Consumer(config, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        received: list[bytes] = []
        for _ in range(50):
            for records in consumer.poll(timeout_ms=500).values():
                received += [r.value for r in records]
            if len(received) >= count:
                break
    assert received == [b"v%d" % i for i in range(count)]


def test_our_client_authenticates_with_each_mechanism_over_tls(secure_broker, certificates: Path) -> None:
    process, sasl_port, _ = secure_broker
    for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"):
        topic = f"secure-{uuid.uuid4().hex[:8]}"
        with Admin(bootstrap_servers=process.bootstrap) as admin:
            admin.create_topics([NewTopic(topic, 1, 1)])
        produce_and_consume(secure_client(certificates, sasl_port, **{"sasl.mechanism": mechanism}), topic)


def test_every_fetch_path_works_over_tls(
    zookeeper, chroot: str, tmp_path: Path, certificates: Path, store_factory
):
    """Zero copy (sendfile) cannot go through TLS: with every region set to take it, fetches over SASL_SSL are
    read and written instead, and plaintext fetches still take it."""
    add_users(store_factory())
    plain_port, sasl_port = find_free_port(), find_free_port()
    properties = {
        **secure_properties(certificates),
        "listeners": f"PLAINTEXT://127.0.0.1:{plain_port},SASL_SSL://127.0.0.1:{sasl_port}",
        "fetch.sendfile.threshold.bytes": 0,
    }
    process = BrokerProcess(
        1, zookeeper.connect_string + chroot, tmp_path / "broker-1", port=plain_port, properties=properties
    )
    process.start()
    try:
        over_tls, plain = f"zero-copy-{uuid.uuid4().hex[:8]}", f"zero-copy-{uuid.uuid4().hex[:8]}"
        with Admin(bootstrap_servers=process.bootstrap) as admin:
            admin.create_topics([NewTopic(over_tls, 1, 1), NewTopic(plain, 1, 1)])
        produce_and_consume(secure_client(certificates, sasl_port), over_tls)
        produce_and_consume({"bootstrap.servers": process.bootstrap}, plain)
    finally:
        process.stop(timeout=15)


def test_wrong_password_and_unknown_user_are_refused(secure_broker, certificates: Path) -> None:
    _, sasl_port, _ = secure_broker
    for mechanism in ("SCRAM-SHA-512", "PLAIN"):
        for user, password in (("alice", "wrong"), ("mallory", PASSWORD)):
            config = secure_client(
                certificates,
                sasl_port,
                **{"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password},
            )
            admin = Admin(config, default_api_timeout_ms=5000)
            try:
                with pytest.raises(SaslAuthenticationFailedError):
                    admin.describe_cluster()
            finally:
                admin.close()


def test_nothing_is_served_before_authentication(secure_broker, certificates: Path) -> None:
    _, sasl_port, _ = secure_broker
    context = ssl.create_default_context(cafile=certificates / "ca.pem")
    with tls_raw(sasl_port, context) as raw:
        # ApiVersions is answered (clients ask it first), Metadata closes the connection.
        assert (
            raw.request(ApiVersionsRequest(client_software_name="t", client_software_version="1")).error_code
            == 0
        )
        raw.send_bytes(codec.encode_request_frame(99, "tests", metadata_request()))
        assert raw.closed_by_peer()
    with tls_raw(sasl_port, context) as raw:
        # A handshake alone is not authentication either.
        assert raw.request(SaslHandshakeRequest(mechanism="SCRAM-SHA-512")).error_code == 0
        raw.send_bytes(codec.encode_request_frame(99, "tests", metadata_request()))
        assert raw.closed_by_peer()
    with tls_raw(sasl_port, context) as raw:
        answer = raw.request(SaslHandshakeRequest(mechanism="GSSAPI"))
        assert answer.error_code == ErrorCode.unsupported_sasl_mechanism
        assert "SCRAM-SHA-512" in answer.mechanisms
        assert raw.closed_by_peer()


def test_certificates_the_broker_or_the_client_does_not_trust_are_refused(
    secure_broker, certificates: Path, tmp_path: Path
) -> None:
    _, sasl_port, ssl_port = secure_broker
    # The client refuses a broker whose certificate no CA it trusts signed.
    other_ca = tmp_path / "other-ca"
    subprocess.run([str(ROOT / "ops" / "dev-ca"), str(other_ca)], check=True, capture_output=True)
    with pytest.raises(ssl.SSLCertVerificationError):
        tls_raw(sasl_port, ssl.create_default_context(cafile=other_ca / "ca.pem"))

    def client_with(certificate: Path) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=certificates / "ca.pem")
        context.load_cert_chain(certificate)
        return context

    # The broker (ssl.client.auth=requested) takes a valid client certificate, and none ...
    for context in (
        client_with(certificates / "alice.pem"),
        ssl.create_default_context(cafile=certificates / "ca.pem"),
    ):
        with tls_raw(ssl_port, context) as raw:
            assert raw.request(metadata_request()).brokers
    # ... but refuses an expired one and one from a CA it does not trust.
    for refused in (certificates / "expired.pem", other_ca / "broker.pem"):
        with pytest.raises((ssl.SSLError, ConnectionError)), tls_raw(ssl_port, client_with(refused)) as raw:
            raw.request(metadata_request())


def test_kafka_python_uses_scram_sha_512_over_tls(secure_broker, certificates: Path) -> None:
    process, sasl_port, _ = secure_broker
    topic = f"kafka-python-{uuid.uuid4().hex[:8]}"
    with Admin(bootstrap_servers=process.bootstrap) as admin:
        admin.create_topics([NewTopic(topic, 1, 1)])
    options = {
        "bootstrap_servers": f"127.0.0.1:{sasl_port}",
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "alice",
        "sasl_plain_password": PASSWORD,
        "ssl_cafile": str(certificates / "ca.pem"),
    }
    producer = kafka.KafkaProducer(**options)
    try:
        for i in range(10):
            producer.send(topic, b"kp%d" % i).get(timeout=30)
    finally:
        producer.close()
    consumer = kafka.KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=20_000, **options)
    try:
        received = [m.value for _, m in zip(range(10), consumer, strict=False)]
    finally:
        consumer.close()
    assert received == [b"kp%d" % i for i in range(10)]
    bad = {**options, "sasl_plain_password": "wrong"}
    # kafka-python reports only that it could not bootstrap; the broker says why.
    with pytest.raises(kafka.errors.KafkaTimeoutError):
        kafka.KafkaProducer(**bad, max_block_ms=3000).send(topic, b"x").get(10)
    assert "event=authentication_failed" in process.output() and "user='alice'" in process.output()


def test_librdkafka_clients_use_scram_sha_512_over_tls(secure_broker, certificates: Path) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    process, sasl_port, _ = secure_broker
    topic = f"librdkafka-{uuid.uuid4().hex[:8]}"
    with Admin(bootstrap_servers=process.bootstrap) as admin:
        admin.create_topics([NewTopic(topic, 1, 1)])
    settings = librdkafka_client(certificates, sasl_port)
    producer = confluent_kafka.Producer(settings)
    for i in range(10):
        producer.produce(topic, b"ck%d" % i)
    assert producer.flush(30) == 0
    kcat = shutil.which("kcat")
    assert kcat is not None, "kcat is installed by ops/setup"
    options = [f"-X{k}={v}" for k, v in settings.items() if k != "bootstrap.servers"]
    consumed = subprocess.run(
        [
            kcat,
            "-b",
            settings["bootstrap.servers"],
            *options,
            "-C",
            "-t",
            topic,
            "-o",
            "beginning",
            "-e",
            "-q",
        ],
        capture_output=True,
        timeout=60,
    )
    assert consumed.returncode == 0, consumed.stderr.decode() + process.output()[-3000:]
    assert consumed.stdout.split() == [b"ck%d" % i for i in range(10)]
    refused = subprocess.run(
        [kcat, "-b", settings["bootstrap.servers"], *options, "-Xsasl.password=wrong", "-L", "-m", "5"],
        capture_output=True,
        timeout=60,
    )
    assert refused.returncode != 0
    assert b"Authentication failed" in refused.stderr or b"SASL" in refused.stderr
