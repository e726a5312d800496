"""Managing SCRAM users (the `backbone users` command, Describe/AlterUserScramCredentials) and brokers that
replicate over a SASL_SSL inter-broker listener."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from cli_support import run, run_ok
from kio.schema.alter_user_scram_credentials.v0.request import (
    AlterUserScramCredentialsRequest,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from kio.schema.describe_user_scram_credentials.v0.request import (
    DescribeUserScramCredentialsRequest,
    UserName,
)
from kio.static.primitive import i8, i32
from security_fixtures import add_users, secure_client, secure_properties

from backbone.client import Admin, NewTopic, Producer
from backbone.coordination import find_free_port
from backbone.dev.processes import BrokerProcess
from backbone.protocol.errors import ErrorCode, SaslAuthenticationFailedError
from tests.helpers.wire import RawConnection

pytestmark = pytest.mark.integration

SHA512 = i8(2)


def authenticates(config: dict[str, object]) -> bool:
    admin = Admin(config, default_api_timeout_ms=10_000)
    try:
        admin.describe_cluster()
        return True
    except SaslAuthenticationFailedError:
        return False
    finally:
        admin.close()


def test_users_command_adds_lists_and_deletes_users(
    secure_broker, certificates: Path, zookeeper, chroot: str, tmp_path: Path
) -> None:
    _, sasl_port, _ = secure_broker
    zk = ["--zookeeper", zookeeper.connect_string + chroot]
    password_file = tmp_path / "carol.password"
    password_file.write_text("carol-secret\n")
    run_ok("users", "add", "carol", "--password-file", str(password_file), *zk)
    assert "carol\tSCRAM-SHA-256,SCRAM-SHA-512" in run_ok("users", "list", *zk).decode()
    carol = {"sasl.username": "carol", "sasl.password": "carol-secret"}
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        assert authenticates(secure_client(certificates, sasl_port, **carol, **{"sasl.mechanism": mechanism}))
    run_ok("users", "delete", "carol", "--mechanism", "SCRAM-SHA-512", *zk)
    assert not authenticates(secure_client(certificates, sasl_port, **carol))  # SCRAM-SHA-512 is gone
    assert authenticates(
        secure_client(certificates, sasl_port, **carol, **{"sasl.mechanism": "SCRAM-SHA-256"})
    )
    run_ok("users", "delete", "carol", *zk)
    assert "carol" not in run_ok("users", "list", *zk).decode()
    missing = run("users", "list")  # no ZooKeeper named
    assert missing.returncode == 2 and b"--zookeeper" in missing.stderr


def test_scram_credentials_are_managed_with_kafkas_admin_apis(secure_broker, certificates: Path) -> None:
    process, sasl_port, _ = secure_broker
    salt = b"dave-salt-123456"
    salted = hashlib.pbkdf2_hmac("sha512", b"dave-secret", salt, 8192)
    with RawConnection(process.bootstrap) as raw:
        upsert = ScramCredentialUpsertion(
            name="dave", mechanism=SHA512, iterations=i32(8192), salt=salt, salted_password=salted
        )
        answer = raw.request(AlterUserScramCredentialsRequest(deletions=(), upsertions=(upsert,)))
        assert [(r.user, r.error_code) for r in answer.results] == [("dave", ErrorCode.none)]
        described = raw.request(DescribeUserScramCredentialsRequest(users=(UserName(name="dave"),)))
        (result,) = described.results
        assert result.error_code == ErrorCode.none
        assert [(int(c.mechanism), int(c.iterations)) for c in result.credential_infos] == [(2, 8192)]
        dave = {"sasl.username": "dave", "sasl.password": "dave-secret"}
        assert authenticates(secure_client(certificates, sasl_port, **dave))
        too_few = ScramCredentialUpsertion(
            name="dave", mechanism=SHA512, iterations=i32(100), salt=salt, salted_password=salted
        )
        answer = raw.request(AlterUserScramCredentialsRequest(deletions=(), upsertions=(too_few,)))
        assert answer.results[0].error_code == ErrorCode.unacceptable_credential
        deletion = ScramCredentialDeletion(name="dave", mechanism=SHA512)
        answer = raw.request(AlterUserScramCredentialsRequest(deletions=(deletion,), upsertions=()))
        assert answer.results[0].error_code == ErrorCode.none
        described = raw.request(DescribeUserScramCredentialsRequest(users=(UserName(name="dave"),)))
        assert described.results[0].error_code == ErrorCode.resource_not_found
        everyone = raw.request(DescribeUserScramCredentialsRequest(users=None))
        assert {r.user for r in everyone.results} == {"alice", "broker"}
    assert not authenticates(secure_client(certificates, sasl_port, **dave))


def test_brokers_replicate_over_a_sasl_ssl_inter_broker_listener(
    zookeeper, chroot: str, tmp_path: Path, certificates: Path, store_factory
) -> None:
    add_users(store_factory())
    brokers = []
    try:
        for broker_id in (1, 2):
            plain_port, sasl_port = find_free_port(), find_free_port()
            properties = {
                **secure_properties(certificates),
                "listeners": f"PLAINTEXT://127.0.0.1:{plain_port},SASL_SSL://127.0.0.1:{sasl_port}",
                "inter.broker.listener.name": "SASL_SSL",
                "zookeeper.session.timeout.ms": 6000,
            }
            broker = BrokerProcess(
                broker_id,
                zookeeper.connect_string + chroot,
                tmp_path / f"broker-{broker_id}",
                port=plain_port,
                properties=properties,
            )
            brokers.append(broker)
            broker.start()
        with Admin(bootstrap_servers=brokers[0].bootstrap) as admin:
            admin.create_topics([NewTopic("replicated", 1, 2, configs={"min.insync.replicas": "2"})])
        # acks=all with two in-sync replicas required: only answered once the follower has fetched, over
        # SASL_SSL, with the brokers' own credentials.
        with Producer(bootstrap_servers=brokers[0].bootstrap, acks="all") as producer:
            for i in range(20):
                producer.send("replicated", b"r%d" % i)
            producer.flush(40)
            metadata = producer.send("replicated", b"last").get(timeout=30)
        assert metadata.offset == 20
        for broker in brokers:
            assert "event=authentication_failed" not in broker.output()
    finally:
        for broker in brokers:
            broker.stop(timeout=15)


def test_acls_command_adds_lists_and_removes_acls(zookeeper, chroot: str) -> None:
    zk = ["--zookeeper", zookeeper.connect_string + chroot]
    grant = ["--allow-principal", "User:alice", "--operation", "Read", "--operation", "Describe"]
    run_ok("acls", "add", "--topic", "orders", *grant, *zk)
    run_ok("acls", "add", "--group", "app-", "--resource-pattern-type", "prefixed", *grant[:4], *zk)
    run_ok("acls", "add", "--topic", "orders", "--deny-principal", "User:bob", "--operation", "Write", *zk)
    listed = run_ok("acls", "list", *zk).decode().splitlines()
    assert listed == [
        "GROUP:PREFIXED:app-\tUser:alice\tALLOW\tREAD\thost=*",
        "TOPIC:LITERAL:orders\tUser:alice\tALLOW\tDESCRIBE\thost=*",
        "TOPIC:LITERAL:orders\tUser:alice\tALLOW\tREAD\thost=*",
        "TOPIC:LITERAL:orders\tUser:bob\tDENY\tWRITE\thost=*",
    ]
    run_ok("acls", "remove", "--topic", "orders", *grant, *zk)
    assert run_ok("acls", "list", "--topic", "orders", *zk).decode().splitlines() == [
        "TOPIC:LITERAL:orders\tUser:bob\tDENY\tWRITE\thost=*"
    ]
    missing = run("acls", "add", "--topic", "orders", "--operation", "Read", *zk)
    assert missing.returncode == 2 and b"--allow-principal" in missing.stderr


def test_commands_take_a_command_config_with_security_settings(
    secure_broker, certificates: Path, tmp_path: Path
) -> None:
    _, sasl_port, _ = secure_broker
    settings = secure_client(certificates, sasl_port)
    config_file = tmp_path / "client.properties"
    config_file.write_text("".join(f"{k}={v}\n" for k, v in settings.items() if k != "bootstrap.servers"))
    server = ["--bootstrap-server", f"127.0.0.1:{sasl_port}"]
    run_ok("topics", "create", "secured", "--partitions", "1", *server, "--command-config", str(config_file))
    assert "secured" in run_ok("topics", "list", *server, "--command-config", str(config_file)).decode()
    refused = run("topics", "list", *server, "--request-timeout-ms", "3000")  # TLS and SASL left out
    assert refused.returncode != 0
