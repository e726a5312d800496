"""CreateAcls, DescribeAcls, DeleteAcls, the SCRAM credential APIs, SaslHandshake and SaslAuthenticate against
a real authorizer and a real SASL authenticator on a listener's connection, with the cluster store's
operations kept in memory (no broker, no network, no ZooKeeper)."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import hmac
from typing import Any

import pytest
from kio.schema.alter_user_scram_credentials.v0 import request as alter_scram
from kio.schema.create_acls.v3 import request as create_acls
from kio.schema.delete_acls.v3 import request as delete_acls
from kio.schema.describe_acls.v3 import request as describe_acls
from kio.schema.describe_user_scram_credentials.v0 import request as describe_scram
from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v2 import request as sasl_authenticate
from kio.schema.sasl_handshake.v1 import request as sasl_handshake

from backbone.broker.handlers.acls import acls_handlers
from backbone.broker.handlers.sasl import sasl_handlers
from backbone.broker.handlers.scram_credentials import scram_credentials_handlers
from backbone.broker.network import Connection, Principal, RequestContext
from backbone.broker.security.authorizer import Authorizer
from backbone.broker.security.sasl import SaslAuthenticator, SaslSettings
from backbone.coordination import AclBinding, ScramCredential
from backbone.coordination.credentials import DEFAULT_ITERATIONS
from backbone.protocol.api import ApiKey
from tests.helpers.handler_context import handler_context
from tests.helpers.memory_store import MemoryStore, zk

pytestmark = pytest.mark.unit

ADMIN = "admin"
# Kafka's wire codes: resource TOPIC, pattern LITERAL, operation READ, permission ALLOW, ANY.
TOPIC, LITERAL, READ, ALLOW, ANY = 2, 3, 3, 3, 1
SCRAM_SHA_256 = 1
SALT = b"sixteen-byte-salt"


def enabled_authorizer() -> Authorizer:
    return Authorizer(True, {f"User:{ADMIN}"}, allow_if_no_acl=False)


def as_user(request: object, user: str | None) -> RequestContext:
    context = handler_context(request)
    if user is not None:
        context.connection.principal = Principal(user)
    return context


def read_grant(topic: str, user: str) -> create_acls.AclCreation:
    return create_acls.AclCreation(
        resource_type=TOPIC,
        resource_name=topic,
        resource_pattern_type=LITERAL,
        principal=f"User:{user}",
        host="*",
        operation=READ,
        permission_type=ALLOW,
    )


def topic_filter(cls, name: str | None):
    return cls(
        resource_type_filter=TOPIC,
        resource_name_filter=name,
        pattern_type_filter=ANY,
        principal_filter=None,
        host_filter=None,
        operation=ANY,
        permission_type=ANY,
    )


async def test_acls_are_refused_without_an_authorizer_or_without_cluster_alter() -> None:
    store = MemoryStore()
    request = create_acls.CreateAclsRequest(creations=(read_grant("t", "alice"),))
    disabled = acls_handlers(Authorizer(False, set(), False), store, zk)
    (result,) = (await disabled[ApiKey.CREATE_ACLS](as_user(request, ADMIN))).results
    assert result.error_code == ErrorCode.security_disabled
    enabled = acls_handlers(enabled_authorizer(), store, zk)
    (result,) = (await enabled[ApiKey.CREATE_ACLS](as_user(request, "mallory"))).results
    assert result.error_code == ErrorCode.cluster_authorization_failed
    assert store.acl_list == []


async def test_acls_are_created_described_and_deleted_by_filter() -> None:
    store = MemoryStore()
    handlers = acls_handlers(enabled_authorizer(), store, zk)
    creations = create_acls.CreateAclsRequest(creations=(read_grant("a", "alice"), read_grant("b", "bob")))
    created = await handlers[ApiKey.CREATE_ACLS](as_user(creations, ADMIN))
    assert [r.error_code for r in created.results] == [ErrorCode.none, ErrorCode.none]
    assert store.acl_list == [
        AclBinding("TOPIC", "a", "LITERAL", "User:alice", "*", "READ", "ALLOW"),
        AclBinding("TOPIC", "b", "LITERAL", "User:bob", "*", "READ", "ALLOW"),
    ]
    described = await handlers[ApiKey.DESCRIBE_ACLS](
        as_user(topic_filter(describe_acls.DescribeAclsRequest, "b"), ADMIN)
    )
    assert [(r.resource_name, [a.principal for a in r.acls]) for r in described.resources] == [
        ("b", ["User:bob"])
    ]
    deletion = delete_acls.DeleteAclsRequest(filters=(topic_filter(delete_acls.DeleteAclsFilter, "a"),))
    (deleted,) = (await handlers[ApiKey.DELETE_ACLS](as_user(deletion, ADMIN))).filter_results
    assert [m.principal for m in deleted.matching_acls] == ["User:alice"]
    assert [acl.name for acl in store.acl_list] == ["b"]


async def test_an_acl_with_a_wildcard_code_is_refused_as_invalid() -> None:
    store = MemoryStore()
    handlers = acls_handlers(enabled_authorizer(), store, zk)
    wildcard = dataclasses.replace(read_grant("t", "alice"), operation=ANY)
    request = create_acls.CreateAclsRequest(creations=(wildcard,))
    (result,) = (await handlers[ApiKey.CREATE_ACLS](as_user(request, ADMIN))).results
    assert result.error_code == ErrorCode.invalid_request
    assert store.acl_list == []


def upsertion(user: str, iterations: int = DEFAULT_ITERATIONS) -> alter_scram.ScramCredentialUpsertion:
    salted = hashlib.pbkdf2_hmac("sha256", b"secret", SALT, iterations)
    return alter_scram.ScramCredentialUpsertion(
        name=user, mechanism=SCRAM_SHA_256, iterations=iterations, salt=SALT, salted_password=salted
    )


async def alter(handlers, user: str | None, *, upsertions=(), deletions=()) -> dict[str, ErrorCode]:
    request = alter_scram.AlterUserScramCredentialsRequest(deletions=deletions, upsertions=upsertions)
    answer = await handlers[ApiKey.ALTER_USER_SCRAM_CREDENTIALS](as_user(request, user))
    return {r.user: r.error_code for r in answer.results}


async def test_scram_credentials_are_stored_from_the_salted_password_and_described() -> None:
    store = MemoryStore()
    handlers = scram_credentials_handlers(enabled_authorizer(), store, zk)
    assert await alter(handlers, ADMIN, upsertions=(upsertion("alice"),)) == {"alice": ErrorCode.none}
    expected = ScramCredential.from_password("SCRAM-SHA-256", "secret", DEFAULT_ITERATIONS, SALT)
    assert hmac.compare_digest(store.credentials["alice"]["SCRAM-SHA-256"].stored_key, expected.stored_key)
    request = describe_scram.DescribeUserScramCredentialsRequest(
        users=(describe_scram.UserName(name="alice"), describe_scram.UserName(name="nobody"))
    )
    answer = await handlers[ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS](as_user(request, ADMIN))
    results = {r.user: r for r in answer.results}
    assert [(i.mechanism, i.iterations) for i in results["alice"].credential_infos] == [
        (SCRAM_SHA_256, DEFAULT_ITERATIONS)
    ]
    assert results["nobody"].error_code == ErrorCode.resource_not_found


async def test_bad_scram_changes_are_refused_each_with_its_code() -> None:
    store = MemoryStore()
    handlers = scram_credentials_handlers(enabled_authorizer(), store, zk)
    missing = alter_scram.ScramCredentialDeletion(name="ghost", mechanism=SCRAM_SHA_256)
    assert await alter(
        handlers,
        ADMIN,
        upsertions=(upsertion("few", iterations=1), upsertion("twice"), upsertion("twice")),
        deletions=(missing,),
    ) == {
        "ghost": ErrorCode.resource_not_found,
        "few": ErrorCode.unacceptable_credential,
        "twice": ErrorCode.duplicate_resource,
    }
    assert await alter(handlers, "mallory", upsertions=(upsertion("alice"),)) == {
        "alice": ErrorCode.cluster_authorization_failed
    }
    assert store.credentials == {}


class ClosableTransport(asyncio.Transport):
    """Records that the handler closed the connection once its answer went out."""

    def __init__(self) -> None:
        super().__init__()
        self.closed = False

    def close(self) -> None:
        self.closed = True


def sasl_connection(mechanisms: tuple[str, ...] | None) -> tuple[Connection, ClosableTransport]:
    """A listener's connection; with SASL on it when `mechanisms` are given (PLAIN: alice's password is
    "secret")."""
    stored = {"alice": {"SCRAM-SHA-256": ScramCredential.from_password("SCRAM-SHA-256", "secret")}}

    async def credentials(user: str) -> dict[str, ScramCredential]:
        return stored.get(user, {})

    connection = handler_context(sasl_handshake.SaslHandshakeRequest(mechanism="PLAIN")).connection
    transport = ClosableTransport()
    connection.transport = transport
    if mechanisms is not None:
        connection.authenticator = SaslAuthenticator(SaslSettings(mechanisms, credentials))
    return connection, transport


async def exchange(connection: Connection, mechanism: str, token: bytes | None = None) -> tuple[Any, Any]:
    handlers = sasl_handlers()
    request = sasl_handshake.SaslHandshakeRequest(mechanism=mechanism)
    shaken = await handlers[ApiKey.SASL_HANDSHAKE](handler_context(request, connection=connection))
    if token is None:
        return shaken, None
    step = sasl_authenticate.SaslAuthenticateRequest(auth_bytes=token)
    return shaken, await handlers[ApiKey.SASL_AUTHENTICATE](handler_context(step, connection=connection))


async def answered_and_closed(transport: ClosableTransport) -> bool:
    await asyncio.sleep(0)  # the close is scheduled right after the answer
    return transport.closed


async def test_sasl_on_a_listener_without_sasl_is_an_illegal_state_and_closes() -> None:
    connection, transport = sasl_connection(None)
    shaken, _ = await exchange(connection, "PLAIN")
    assert shaken.error_code == ErrorCode.illegal_sasl_state
    assert await answered_and_closed(transport)


async def test_an_unoffered_mechanism_is_refused_with_the_offered_ones_and_closes() -> None:
    connection, transport = sasl_connection(("PLAIN",))
    shaken, _ = await exchange(connection, "GSSAPI")
    assert (shaken.error_code, shaken.mechanisms) == (ErrorCode.unsupported_sasl_mechanism, ("PLAIN",))
    assert await answered_and_closed(transport)


async def test_a_plain_exchange_names_the_connection_principal() -> None:
    connection, transport = sasl_connection(("PLAIN",))
    shaken, authenticated = await exchange(connection, "PLAIN", b"\0alice\0secret")
    assert (shaken.error_code, authenticated.error_code) == (ErrorCode.none, ErrorCode.none)
    assert connection.principal.name == "alice"
    assert not await answered_and_closed(transport)


async def test_a_wrong_password_is_refused_and_closes() -> None:
    connection, transport = sasl_connection(("PLAIN",))
    _, refused = await exchange(connection, "PLAIN", b"\0alice\0wrong")
    assert refused.error_code == ErrorCode.sasl_authentication_failed
    assert connection.principal.name == "ANONYMOUS"
    assert await answered_and_closed(transport)
