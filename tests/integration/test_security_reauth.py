"""SASL sessions on a real broker with `connections.max.reauth.ms` (KIP-368): a session past its window is
closed at its next request unless it re-authenticated on the same connection; standard clients
(kafka-python, librdkafka) re-authenticate and keep working; and SaslHandshake v0, which the broker
advertises, takes the mechanism's raw tokens without SaslAuthenticate (the flow before KIP-152)."""

from __future__ import annotations

import datetime
import ssl
import struct
import time
from pathlib import Path

import kafka
import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest as SaslHandshakeV0
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from scramp import ScramClient
from security_fixtures import (
    BROKER_PASSWORD,
    PASSWORD,
    fresh_topic,
    librdkafka_client,
    secure_client,
    tls_raw,
)

from backbone.client import Producer
from backbone.dev.processes import BrokerProcess
from backbone.protocol import codec
from backbone.protocol.api import ApiKey
from backbone.protocol.errors import ErrorCode
from tests.helpers.requests import metadata_request
from tests.helpers.wire import RawConnection

pytestmark = pytest.mark.integration

REAUTH_MS = 3000


@pytest.fixture
def secure_broker_properties() -> dict[str, object]:
    return {"connections.max.reauth.ms": REAUTH_MS}


@pytest.fixture
def tls(certificates: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=certificates / "ca.pem")


def scram_login(raw: RawConnection, user: str = "alice", password: str = PASSWORD) -> object:
    """SaslHandshake v1 and SCRAM-SHA-512 in SaslAuthenticate v2; the last SaslAuthenticate answer."""
    assert raw.request(SaslHandshakeRequest(mechanism="SCRAM-SHA-512")).error_code == ErrorCode.none
    scram = ScramClient(["SCRAM-SHA-512"], user, password)
    first = raw.request(SaslAuthenticateRequest(auth_bytes=scram.get_client_first().encode()))
    assert first.error_code == ErrorCode.none, first
    scram.set_server_first(first.auth_bytes.decode())
    final = raw.request(SaslAuthenticateRequest(auth_bytes=scram.get_client_final().encode()))
    if final.error_code == ErrorCode.none:
        scram.set_server_final(final.auth_bytes.decode())
    return final


def sleep_until(deadline: float) -> None:
    """The session window is a time bound: waiting for it to pass is the condition."""
    time.sleep(max(0.0, deadline - time.monotonic()))


def test_a_session_past_its_window_is_closed_at_its_next_request(secure_broker, tls) -> None:
    process, sasl_port, _ = secure_broker
    with tls_raw(sasl_port, tls) as raw:
        answer = scram_login(raw)
        expires = time.monotonic() + REAUTH_MS / 1000
        assert answer.error_code == ErrorCode.none
        assert answer.session_lifetime == datetime.timedelta(milliseconds=REAUTH_MS)
        assert raw.request(metadata_request()).brokers  # served within the window
        sleep_until(expires + 0.5)
        # Any request but one that begins re-authenticating is too late.
        raw.send_bytes(raw_frame(raw, metadata_request()))
        assert raw.closed_by_peer()
    assert "event=session_expired" in process.output()


def test_reauthentication_begun_after_the_window_renews_the_session(secure_broker, tls) -> None:
    """Kafka's broker lets a SaslHandshake begin re-authentication even once the session has ended (KIP-368
    closes an expired connection at its next request other than that): librdkafka begins only when its
    requests in flight are answered, and a consumer's long Fetch can hold it past the end."""
    process, sasl_port, _ = secure_broker
    with tls_raw(sasl_port, tls) as raw:
        scram_login(raw)
        sleep_until(time.monotonic() + REAUTH_MS / 1000 + 0.5)
        again = scram_login(raw)
        assert again.error_code == ErrorCode.none
        assert again.session_lifetime == datetime.timedelta(milliseconds=REAUTH_MS)
        assert raw.request(metadata_request()).brokers
    assert "event=reauthenticated" in process.output()


def raw_frame(raw: RawConnection, entity: object) -> bytes:
    raw.correlation_id += 1
    return codec.encode_request_frame(raw.correlation_id, "tests", entity)


def test_reauthentication_within_the_window_extends_the_session(secure_broker, tls) -> None:
    process, sasl_port, _ = secure_broker
    with tls_raw(sasl_port, tls) as raw:
        scram_login(raw)
        first_expiry = time.monotonic() + REAUTH_MS / 1000
        sleep_until(first_expiry - REAUTH_MS / 2000)
        again = scram_login(raw)  # the same connection, the same principal
        assert again.error_code == ErrorCode.none
        assert again.session_lifetime == datetime.timedelta(milliseconds=REAUTH_MS)
        sleep_until(first_expiry + 0.5)
        assert raw.request(metadata_request()).brokers  # past the first window, within the second
    assert "event=reauthenticated" in process.output()
    assert "event=session_expired" not in process.output()


def test_reauthentication_as_another_principal_is_refused(secure_broker, tls) -> None:
    _, sasl_port, _ = secure_broker
    with tls_raw(sasl_port, tls) as raw:
        scram_login(raw)
        refused = scram_login(raw, "broker", BROKER_PASSWORD)
        assert refused.error_code == ErrorCode.sasl_authentication_failed
        assert "same principal" in refused.error_message
        assert raw.closed_by_peer()


def test_kafka_python_reauthenticates_and_keeps_its_connections(secure_broker, certificates: Path) -> None:
    process, sasl_port, _ = secure_broker
    topic = fresh_topic(process.bootstrap, "reauth")
    producer = kafka.KafkaProducer(
        bootstrap_servers=f"127.0.0.1:{sasl_port}",
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="alice",
        sasl_plain_password=PASSWORD,
        ssl_cafile=str(certificates / "ca.pem"),
    )
    try:
        ends = time.monotonic() + 3 * REAUTH_MS / 1000  # three windows, a record every 100 ms
        sent = 0
        while time.monotonic() < ends:
            producer.send(topic, b"r%d" % sent).get(timeout=10)
            sent += 1
            time.sleep(0.1)
    finally:
        producer.close()
    output = process.output()
    assert output.count("event=reauthenticated") >= 2, output[-3000:]
    assert "event=session_expired" not in output


def test_librdkafka_reauthenticates_and_keeps_its_connections(secure_broker, certificates: Path) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    process, sasl_port, _ = secure_broker
    topic = fresh_topic(process.bootstrap, "reauth")
    producer = confluent_kafka.Producer(librdkafka_client(certificates, sasl_port))
    failures: list[object] = []
    ends = time.monotonic() + 3 * REAUTH_MS / 1000
    sent = 0
    while time.monotonic() < ends:
        producer.produce(topic, b"r%d" % sent, on_delivery=lambda err, _: err and failures.append(err))
        assert producer.flush(10) == 0
        sent += 1
        time.sleep(0.1)
    assert not failures
    output = process.output()
    assert output.count("event=reauthenticated") >= 2, output[-3000:]
    assert "event=session_expired" not in output


def raw_token(raw: RawConnection, token: bytes) -> bytes:
    """A v0 handshake's token: a bare size-prefixed frame each way."""
    raw.send_bytes(struct.pack(">i", len(token)) + token)
    return raw.read_frame()


def test_sasl_handshake_v0_takes_raw_tokens(secure_broker, tls) -> None:
    _, sasl_port, _ = secure_broker
    with tls_raw(sasl_port, tls) as raw:
        versions = raw.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
        handshake = next(a for a in versions.api_keys if a.api_key == ApiKey.SASL_HANDSHAKE)
        assert handshake.min_version == 0  # advertised, so it must work
        answer = raw.request(SaslHandshakeV0(mechanism="SCRAM-SHA-512"))
        assert answer.error_code == ErrorCode.none and "SCRAM-SHA-512" in answer.mechanisms
        scram = ScramClient(["SCRAM-SHA-512"], "alice", PASSWORD)
        scram.set_server_first(raw_token(raw, scram.get_client_first().encode()).decode())
        scram.set_server_final(raw_token(raw, scram.get_client_final().encode()).decode())  # checks it
        assert raw.request(metadata_request()).brokers
    with tls_raw(sasl_port, tls) as raw:
        assert raw.request(SaslHandshakeV0(mechanism="PLAIN")).error_code == ErrorCode.none
        assert raw_token(raw, f"\0alice\0{PASSWORD}".encode()) == b""
        assert raw.request(metadata_request()).brokers
    with tls_raw(sasl_port, tls) as raw:  # a wrong password: closed, as Kafka closes a v0 session
        assert raw.request(SaslHandshakeV0(mechanism="PLAIN")).error_code == ErrorCode.none
        raw.send_bytes(struct.pack(">i", 13) + b"\0alice\0wrong!")
        assert raw.closed_by_peer()


def test_a_v0_session_without_authentication_serves_nothing(secure_broker: tuple, tls) -> None:
    process: BrokerProcess = secure_broker[0]
    with tls_raw(secure_broker[1], tls) as raw:
        assert raw.request(SaslHandshakeV0(mechanism="SCRAM-SHA-512")).error_code == ErrorCode.none
        # A request where the first SCRAM token belongs: read as a token, refused, closed.
        raw.send_bytes(raw_frame(raw, metadata_request()))
        assert raw.closed_by_peer()
    assert "event=authentication_failed" in process.output()


def test_our_client_connects_again_when_its_session_ends(secure_broker, certificates: Path) -> None:
    """Our client does not re-authenticate: the broker closes its connection at the first request past the
    session, and the client connects and logs in again without losing a record."""
    process, sasl_port, _ = secure_broker
    topic = fresh_topic(process.bootstrap, "reauth")
    with Producer(secure_client(certificates, sasl_port)) as producer:
        ends = time.monotonic() + 3 * REAUTH_MS / 1000
        offsets = []
        while time.monotonic() < ends:
            offsets.append(producer.send(topic, b"r%d" % len(offsets)).get(timeout=30).offset)
            time.sleep(0.1)
    assert offsets == list(range(len(offsets)))
    assert "event=session_expired" in process.output()
