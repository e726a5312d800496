"""The security pieces that need no network: principal mapping, JAAS parsing, stored SCRAM credentials and
the SCRAM server against scramp's client (Kafka's format and leniency)."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
from scramp import ScramClient

from backbone.broker.security.authorizer import Authorizer
from backbone.broker.security.config import jaas_credentials
from backbone.broker.security.scram_server import ScramError, ScramServer, client_first_user
from backbone.broker.security.tls import PrincipalMapper, distinguished_name
from backbone.coordination import AclBinding, ScramCredential
from backbone.properties import ConfigError

pytestmark = pytest.mark.unit

CERTIFICATE = {
    "subject": (
        (("countryName", "US"),),
        (("organizationName", "Example"),),
        (("organizationalUnitName", "ServiceUsers"),),
        (("commonName", "alice"),),
    )
}


def test_a_certificate_subject_reads_most_specific_first() -> None:
    assert distinguished_name(CERTIFICATE) == "CN=alice,OU=ServiceUsers,O=Example,C=US"


@pytest.mark.parametrize(
    ("rules", "expected"),
    [
        ("DEFAULT", "CN=alice,OU=ServiceUsers,O=Example,C=US"),
        ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/", "alice"),
        ("RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/U", "ALICE@SERVICEUSERS"),
        ("RULE:^CN=bob,.*$/bob/, RULE:^CN=(.*?),.*$/$1/L", "alice"),
        ("RULE:^CN=bob.*$/bob/,DEFAULT", "CN=alice,OU=ServiceUsers,O=Example,C=US"),
        ("RULE:^CN=bob.*$/bob/", None),  # no rule matches: refused
    ],
)
def test_principal_mapping_rules_as_kafka_writes_them(rules: str, expected: str | None) -> None:
    assert PrincipalMapper(rules).map(distinguished_name(CERTIFICATE)) == expected


def test_unreadable_mapping_rules_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"ssl\.principal\.mapping\.rules"):
        PrincipalMapper("RULE:no-slashes")


def test_jaas_login_lines_give_the_inter_broker_credentials() -> None:
    jaas = (
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="s3\\"x";'
    )
    assert jaas_credentials(jaas) == ("admin", 's3"x')
    assert jaas_credentials(None) is None
    with pytest.raises(ConfigError, match="username"):
        jaas_credentials("ScramLoginModule required;")


def test_stored_credentials_use_kafkas_format_and_never_the_password() -> None:
    credential = ScramCredential.from_password("SCRAM-SHA-512", "secret", 4096, salt=b"0123456789abcdef")
    text = credential.encode()
    assert text.startswith("salt=MDEyMzQ1Njc4OWFiY2RlZg==,stored_key=") and text.endswith(",iterations=4096")
    assert "secret" not in text
    assert ScramCredential.decode(text) == credential
    # What AlterUserScramCredentials carries (the salted password) gives the same stored keys.
    salted = hashlib.pbkdf2_hmac("sha512", b"secret", b"0123456789abcdef", 4096)
    assert (
        ScramCredential.from_salted_password("SCRAM-SHA-512", salted, b"0123456789abcdef", 4096) == credential
    )
    with pytest.raises(ValueError, match="malformed"):
        ScramCredential.decode("salt=AAAA")


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_the_scram_server_accepts_the_right_password_only(mechanism: str) -> None:
    credential = ScramCredential.from_password(mechanism, "right")
    for password, accepted in (("right", True), ("wrong", False)):
        client = ScramClient([mechanism], "alice", password)
        server = ScramServer(mechanism, credential)
        first = client.get_client_first()
        assert client_first_user(first) == "alice"
        client.set_server_first(server.server_first(first))
        if accepted:
            client.set_server_final(server.server_final(client.get_client_final()))  # checks the server too
        else:
            with pytest.raises(ScramError, match="invalid credentials"):
                server.server_final(client.get_client_final())


def test_the_scram_server_takes_a_nonce_that_ends_with_its_own_as_kafka_does() -> None:
    """librdkafka 2.0 repeats the client nonce in its final message; Kafka accepts any prefix."""
    salt = b"0123456789abcdef"
    credential = ScramCredential.from_password("SCRAM-SHA-512", "pw", 4096, salt=salt)
    server = ScramServer("SCRAM-SHA-512", credential)
    server_first = server.server_first("n,,n=alice,r=abc")
    nonce = server_first.split(",")[0][2:]
    without_proof = f"c=biws,r=abc{nonce}"  # the client nonce twice, as librdkafka sends it
    auth_message = f"n=alice,r=abc,{server_first},{without_proof}".encode()
    salted = hashlib.pbkdf2_hmac("sha512", b"pw", salt, 4096)
    client_key = hmac.digest(salted, b"Client Key", "sha512")
    signature = hmac.digest(credential.stored_key, auth_message, "sha512")
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature, strict=True))).decode()
    assert server.server_final(f"{without_proof},p={proof}").startswith("v=")
    with pytest.raises(ScramError, match="nonce"):
        server.server_final(f"c=biws,r=other,p={proof}")


def acl(
    name: str, operation: str, *, principal: str = "User:alice", permission: str = "ALLOW", **kw: str
) -> AclBinding:
    return AclBinding(
        kw.get("resource_type", "TOPIC"),
        name,
        kw.get("pattern_type", "LITERAL"),
        principal,
        kw.get("host", "*"),
        operation,
        permission,
    )


def test_the_authorizer_follows_kafkas_rules() -> None:
    authorizer = Authorizer(enabled=True, super_users={"User:root"}, allow_if_no_acl=False)
    authorizer.load(
        [
            acl("orders", "READ"),
            acl("*", "DESCRIBE", principal="User:*"),
            acl("app-", "ALL", pattern_type="PREFIXED"),
            acl("app-secret", "ALL", permission="DENY"),
            acl("group-1", "READ", resource_type="GROUP", host="10.0.0.1"),
            acl("audit", "ALTER_CONFIGS"),
        ]
    )
    allowed = authorizer.allowed
    assert allowed("User:alice", "1.2.3.4", "READ", "TOPIC", "orders")
    assert not allowed("User:alice", "1.2.3.4", "WRITE", "TOPIC", "orders")
    assert allowed("User:bob", "1.2.3.4", "DESCRIBE", "TOPIC", "orders")  # User:* on *
    assert allowed("User:alice", "1.2.3.4", "WRITE", "TOPIC", "app-x")  # prefixed ALL
    assert not allowed("User:alice", "1.2.3.4", "READ", "TOPIC", "app-secret")  # deny beats allow
    assert allowed("User:alice", "10.0.0.1", "READ", "GROUP", "group-1")
    assert not allowed("User:alice", "10.0.0.2", "READ", "GROUP", "group-1")  # host rule
    assert allowed("User:alice", "1.2.3.4", "DESCRIBE_CONFIGS", "TOPIC", "audit")  # implied
    assert not allowed("User:alice", "1.2.3.4", "READ", "GROUP", "group-2")  # no ACL found
    assert allowed("User:root", "1.2.3.4", "ALTER", "CLUSTER", "kafka-cluster")  # super user
    open_authorizer = Authorizer(enabled=True, super_users=set(), allow_if_no_acl=True)
    open_authorizer.load([acl("orders", "READ")])
    assert open_authorizer.allowed("User:bob", "1.2.3.4", "WRITE", "TOPIC", "elsewhere")  # no ACL found
    assert not open_authorizer.allowed("User:bob", "1.2.3.4", "READ", "TOPIC", "orders")  # named: closed
