"""SaslHandshake and SaslAuthenticate: the wire side of SASL (the exchange itself is security/sasl.py).

On a listener without SASL (PLAINTEXT, SSL) both answer ILLEGAL_SASL_STATE, as Kafka does. A refused
mechanism or a failed authentication is answered, then the connection closed.
"""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

from kio.static.primitive import i64Timedelta

from backbone.broker.handlers.common import build, response_module
from backbone.broker.network import Connection, Handler, RequestContext
from backbone.broker.security.sasl import AuthenticationFailed, SaslAuthenticator
from backbone.protocol.api import ApiKey
from backbone.protocol.errors import ErrorCode


def _close_after_answer(connection: Connection) -> None:
    # The answer is written (buffered) before this runs; closing the transport flushes it first.
    asyncio.get_running_loop().call_soon(connection.close)


def sasl_handlers() -> dict[ApiKey, Handler]:
    """Both read only the connection's authenticator, which the listener gave it."""

    async def handshake(context: RequestContext) -> Any:
        request = context.decode()
        module = response_module(ApiKey.SASL_HANDSHAKE, context.api_version)
        authenticator = context.connection.authenticator
        if not isinstance(authenticator, SaslAuthenticator):
            _close_after_answer(context.connection)
            return module.SaslHandshakeResponse(error_code=ErrorCode.illegal_sasl_state, mechanisms=())
        error = authenticator.handshake(context.api_version, request.mechanism)
        if error != ErrorCode.none:
            _close_after_answer(context.connection)
        return module.SaslHandshakeResponse(error_code=error, mechanisms=authenticator.settings.mechanisms)

    async def authenticate(context: RequestContext) -> Any:
        request = context.decode()
        module = response_module(ApiKey.SASL_AUTHENTICATE, context.api_version)
        authenticator = context.connection.authenticator
        values: dict[str, Any] = {
            "error_code": ErrorCode.none,
            "error_message": None,
            "auth_bytes": b"",
            "session_lifetime": i64Timedelta.parse(datetime.timedelta(0)),
        }
        if not isinstance(authenticator, SaslAuthenticator) or authenticator.expects_raw_token:
            values["error_code"] = ErrorCode.illegal_sasl_state
            values["error_message"] = "SaslAuthenticate is not expected on this connection now"
            _close_after_answer(context.connection)
            return build(module.SaslAuthenticateResponse, **values)
        try:
            reply, done = await authenticator.authenticate(context.connection, bytes(request.auth_bytes))
        except AuthenticationFailed as exc:
            values["error_code"] = ErrorCode.sasl_authentication_failed
            values["error_message"] = str(exc)
            _close_after_answer(context.connection)
            return build(module.SaslAuthenticateResponse, **values)
        values["auth_bytes"] = reply
        if done:
            lifetime = datetime.timedelta(milliseconds=authenticator.session_lifetime_ms())
            values["session_lifetime"] = i64Timedelta.parse(lifetime)
        return build(module.SaslAuthenticateResponse, **values)

    return {ApiKey.SASL_HANDSHAKE: handshake, ApiKey.SASL_AUTHENTICATE: authenticate}
