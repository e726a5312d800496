"""How a client connection secures itself: TLS (`security.protocol` SSL, SASL_SSL) and SASL (SASL_PLAINTEXT,
SASL_SSL) with PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.

Settings by the names Kafka's clients use (librdkafka's `sasl.username`/`sasl.password`, kafka-python's
`ssl.cafile`/`ssl.certfile`/`ssl.keyfile`):

    Producer({"bootstrap.servers": "host:9093", "security.protocol": "SASL_SSL",
              "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": "...",
              "ssl.cafile": "ca.pem"})

The SASL exchange runs right after ApiVersions on every new connection (SaslHandshake v1, then
SaslAuthenticate requests); a refusal raises the broker's error (SASL_AUTHENTICATION_FAILED,
UNSUPPORTED_SASL_MECHANISM), which is not retriable.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from scramp import ScramClient, ScramException

from backbone.protocol.api import ApiKey
from backbone.protocol.errors import ErrorCode, KafkaError, error_for

__all__ = ["SASL_MECHANISMS", "SECURITY_PROTOCOLS", "ClientSecurity"]

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

# call(api_key, **request fields) -> the decoded response entity
Call = Callable[..., Awaitable[Any]]


@dataclass(frozen=True)
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    sasl_mechanism: str | None = None
    username: str = ""
    password: str = ""

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> ClientSecurity:
        """From a client's resolved settings (see `config.py`)."""
        protocol = config["security.protocol"]
        context = None
        if protocol in ("SSL", "SASL_SSL"):
            context = tls_context(
                cafile=config["ssl.cafile"],
                certfile=config["ssl.certfile"],
                keyfile=config["ssl.keyfile"],
                password=config["ssl.password"],
                check_hostname=config["ssl.check.hostname"],
            )
        mechanism = None
        if protocol.startswith("SASL_"):
            mechanism = config["sasl.mechanism"]
            if not config["sasl.username"] or config["sasl.password"] is None:
                raise ValueError(f"security.protocol {protocol} needs sasl.username and sasl.password")
        return cls(protocol, context, mechanism, config["sasl.username"] or "", config["sasl.password"] or "")

    async def authenticate(self, call: Call, address: str) -> None:
        """Run the SASL exchange over a connection whose versions are negotiated (no-op without SASL)."""
        if self.sasl_mechanism is None:
            return
        handshake = await call(ApiKey.SASL_HANDSHAKE, mechanism=self.sasl_mechanism)
        if handshake.error_code != ErrorCode.none:
            raise error_for(
                handshake.error_code,
                f"broker {address} refused SASL mechanism {self.sasl_mechanism} "
                f"(it offers {', '.join(handshake.mechanisms) or 'none'})",
            )
        if self.sasl_mechanism == "PLAIN":
            await _authenticate(call, address, f"\0{self.username}\0{self.password}".encode())
            return
        try:
            scram = ScramClient([self.sasl_mechanism], self.username, self.password)
            server_first = await _authenticate(call, address, scram.get_client_first().encode())
            scram.set_server_first(server_first.decode())
            server_final = await _authenticate(call, address, scram.get_client_final().encode())
            scram.set_server_final(server_final.decode())
        except (ScramException, UnicodeDecodeError) as exc:
            raise error_for(
                ErrorCode.sasl_authentication_failed, f"SCRAM exchange with {address} failed: {exc}"
            ) from None


async def _authenticate(call: Call, address: str, token: bytes) -> bytes:
    response = await call(ApiKey.SASL_AUTHENTICATE, auth_bytes=token)
    if response.error_code != ErrorCode.none:
        raise error_for(response.error_code, f"broker {address}: {response.error_message or 'SASL refused'}")
    return bytes(response.auth_bytes)


def tls_context(
    *,
    cafile: str | None = None,
    certfile: str | None = None,
    keyfile: str | None = None,
    password: str | None = None,
    check_hostname: bool = True,
) -> ssl.SSLContext:
    """A client TLS context: trust `cafile` (else the system's CAs), present `certfile` when given."""
    context = ssl.create_default_context(cafile=cafile)
    context.check_hostname = check_hostname
    if certfile:
        context.load_cert_chain(certfile, keyfile, password)
    return context


def is_authentication_error(error: BaseException) -> bool:
    return isinstance(error, KafkaError) and error.code in (
        ErrorCode.sasl_authentication_failed,
        ErrorCode.unsupported_sasl_mechanism,
        ErrorCode.illegal_sasl_state,
    )
