"""SASL authentication on SASL_PLAINTEXT and SASL_SSL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512.

Kafka's sequence: ApiVersions (allowed before authentication), SaslHandshake naming the mechanism, then the
mechanism's tokens, in SaslAuthenticate requests (handshake v1) or as raw size-prefixed frames (handshake
v0). Nothing else is served before authentication succeeds: any other request closes the connection. A
failed authentication answers SASL_AUTHENTICATION_FAILED and closes the connection.

SCRAM (RFC 5802, scram_server.py) checks the client's proof against the salted credential stored in ZooKeeper
(/config/users/<user>, read at each authentication so a changed password counts at once). PLAIN checks the
password against the same stored SCRAM credential (SCRAM-SHA-512 first, else SCRAM-SHA-256): one user
store for every mechanism, where Kafka's PLAIN reads users from its JAAS file.

Re-authentication (KIP-368): with `connections.max.reauth.ms` set, SaslAuthenticate v1+ answers carry the
session lifetime; a client must authenticate again on the same connection before it ends, or the
connection is closed at its next request.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import struct
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from backbone.broker.network import Principal
from backbone.broker.security.scram_server import ScramError, ScramServer, client_first_user
from backbone.broker.security.tls import PrincipalMapper, distinguished_name
from backbone.coordination import SCRAM_MECHANISMS, ScramCredential
from backbone.protocol.api import ApiKey
from backbone.protocol.errors import ErrorCode
from backbone.protocol.headers import RequestHeader

if TYPE_CHECKING:
    from backbone.broker.network import Connection

log = logging.getLogger(__name__)

# PLAIN logins derive a key from the password (thousands of hash rounds each). They get a thread of their
# own so a burst of logins waits on itself, not in front of the ZooKeeper reads and writes that every
# other request runs on the default executor.
_KEY_DERIVATION = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sasl-key-derivation")

# Requests a connection may make before it has authenticated.
_BEFORE_AUTHENTICATION = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})

CredentialLookup = Callable[[str], Awaitable[dict[str, ScramCredential]]]


class AuthenticationFailed(Exception):
    """The client could not prove who it is; the message goes back to the client."""


@dataclass(frozen=True)
class SaslSettings:
    mechanisms: tuple[str, ...]
    credentials: CredentialLookup
    reauth_ms: int = 0


class TlsAuthenticator:
    """SSL listeners: the principal is the client certificate's subject, mapped; ANONYMOUS without one."""

    def __init__(self, mapper: PrincipalMapper) -> None:
        self.mapper = mapper
        self.expects_raw_token = False

    def connected(self, connection: Connection) -> None:
        principal = certificate_principal(connection, self.mapper)
        if principal is not None:
            connection.principal = principal

    def admit(self, connection: Connection, header: RequestHeader) -> bool:
        return True


def certificate_principal(connection: Connection, mapper: PrincipalMapper) -> Principal | None:
    assert connection.transport is not None
    certificate = connection.transport.get_extra_info("peercert")
    if not certificate:
        return None
    subject = distinguished_name(certificate)
    name = mapper.map(subject)
    if name is None:
        log.warning("event=certificate_unmapped peer=%s subject=%r", connection.peer, subject)
        connection.close()  # Kafka refuses a subject no rule maps
        return None
    return Principal(name, {"subject": subject})


class SaslAuthenticator:
    """One connection's SASL state: handshake, the mechanism's exchange, the session's end."""

    def __init__(self, settings: SaslSettings) -> None:
        self.settings = settings
        self.mechanism: str | None = None
        self.authenticated = False
        self.expires_at: float | None = None
        self.expects_raw_token = False  # after a v0 handshake
        self._exchange: _Exchange | None = None

    def connected(self, connection: Connection) -> None:
        pass

    def admit(self, connection: Connection, header: RequestHeader) -> bool:
        # An expired session is closed at its next request unless that request re-authenticates (a
        # SaslHandshake, then the exchange's SaslAuthenticate), as Kafka's SocketServer does: a client
        # begins re-authenticating only once its requests in flight are answered, which a long Fetch can
        # delay past the session's end.
        if (
            self.expires_at is not None
            and time.monotonic() > self.expires_at
            and not self._reauthenticating(header)
        ):
            log.info("event=session_expired peer=%s principal=%s", connection.peer, connection.principal.name)
            return False
        return self.authenticated or header.api_key in _BEFORE_AUTHENTICATION

    def _reauthenticating(self, header: RequestHeader) -> bool:
        if header.api_key == ApiKey.SASL_HANDSHAKE:
            return True
        return header.api_key == ApiKey.SASL_AUTHENTICATE and self._exchange is not None

    def handshake(self, version: int, mechanism: str) -> ErrorCode:
        if self._exchange is not None:
            return ErrorCode.illegal_sasl_state
        if mechanism not in self.settings.mechanisms:
            return ErrorCode.unsupported_sasl_mechanism
        self.mechanism = mechanism
        self._exchange = _Exchange(mechanism, self.settings.credentials)
        self.expects_raw_token = version == 0
        return ErrorCode.none

    async def authenticate(self, connection: Connection, token: bytes) -> tuple[bytes, bool]:
        """The server's next token and whether the exchange is complete; AuthenticationFailed if refused."""
        exchange = self._exchange
        if exchange is None:
            raise AuthenticationFailed("SaslAuthenticate before a SaslHandshake")
        try:
            reply = await exchange.step(token)
        except AuthenticationFailed as exc:
            self._exchange = None
            log.warning(
                "event=authentication_failed listener=%s peer=%s mechanism=%s user=%r reason=%r",
                connection.listener.name,
                connection.peer,
                self.mechanism,
                exchange.user,
                str(exc),
            )
            raise
        if not exchange.done:
            return reply, False
        self._exchange = None
        self.expects_raw_token = False
        assert exchange.user is not None
        if self.authenticated:
            if exchange.user != connection.principal.name:
                raise AuthenticationFailed("re-authentication must keep the same principal")
            log.info(
                "event=reauthenticated listener=%s peer=%s principal=%s mechanism=%s",
                connection.listener.name,
                connection.peer,
                exchange.user,
                self.mechanism,
            )
        self.authenticated = True
        connection.principal = Principal(exchange.user, {"mechanism": exchange.mechanism})
        if self.settings.reauth_ms:
            self.expires_at = time.monotonic() + self.settings.reauth_ms / 1000
        log.debug(
            "event=authenticated peer=%s principal=%s mechanism=%s",
            connection.peer,
            exchange.user,
            self.mechanism,
        )
        return reply, True

    def session_lifetime_ms(self) -> int:
        return self.settings.reauth_ms if self.authenticated else 0

    async def raw_token(self, connection: Connection, frame: memoryview) -> None:
        """A v0 handshake's token, sent without a request header; answered the same way."""
        try:
            reply, _ = await self.authenticate(connection, bytes(frame))
        except AuthenticationFailed:
            connection.close()
            return
        await connection.write_chunks([struct.pack(">i", len(reply)), reply])


class _Exchange:
    """One mechanism's token exchange."""

    def __init__(self, mechanism: str, credentials: CredentialLookup) -> None:
        self.mechanism = mechanism
        self.credentials = credentials
        self.user: str | None = None
        self.done = False
        self._server: ScramServer | None = None

    async def step(self, token: bytes) -> bytes:
        if self.mechanism == "PLAIN":
            return await self._plain(token)
        return await self._scram(token)

    async def _plain(self, token: bytes) -> bytes:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailed("Invalid SASL/PLAIN request: expected authzid\\0user\\0password")
        authzid, user, password = (part.decode("utf-8", "replace") for part in parts)
        if not user or not password:
            raise AuthenticationFailed("Authentication failed: username and password must not be empty")
        if authzid and authzid != user:
            raise AuthenticationFailed("Authentication failed: the authorization id must be the username")
        self.user = user
        stored = await self.credentials(user)
        for mechanism in reversed(SCRAM_MECHANISMS):
            credential = stored.get(mechanism)
            if credential is not None:
                derived = await asyncio.get_running_loop().run_in_executor(
                    _KEY_DERIVATION,
                    ScramCredential.from_password,
                    mechanism,
                    password,
                    credential.iterations,
                    credential.salt,
                )
                if hmac.compare_digest(derived.stored_key, credential.stored_key):
                    self.done = True
                    return b""
                break
        raise AuthenticationFailed("Authentication failed: Invalid username or password")

    async def _scram(self, token: bytes) -> bytes:
        try:
            message = token.decode("utf-8")
            if self._server is None:
                return await self._scram_first(message)
            final = self._server.server_final(message)
        except (ScramError, UnicodeDecodeError, ValueError) as exc:
            raise AuthenticationFailed(
                f"Authentication failed during authentication due to invalid credentials with SASL "
                f"mechanism {self.mechanism} ({exc})"
            ) from None
        self.done = True
        return final.encode()

    async def _scram_first(self, message: str) -> bytes:
        self.user = client_first_user(message)
        credential = (await self.credentials(self.user)).get(self.mechanism)
        if credential is None:
            raise AuthenticationFailed("Authentication failed: Invalid user credentials")
        self._server = ScramServer(self.mechanism, credential)
        return self._server.server_first(message).encode()
