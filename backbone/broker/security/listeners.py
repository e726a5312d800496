"""Fit each listener with what its security protocol needs, and the broker's own client security for the
inter-broker listener (replica fetchers, liveness probes)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from backbone.broker.security.sasl import CredentialLookup, SaslAuthenticator, SaslSettings, TlsAuthenticator
from backbone.broker.security.tls import PrincipalMapper, client_context, server_context
from backbone.wire.security import ClientSecurity

if TYPE_CHECKING:
    from backbone.broker.config import BrokerConfig
    from backbone.broker.network import Listener


def secure_listener(listener: Listener, config: BrokerConfig, credentials: CredentialLookup) -> None:
    protocol = listener.endpoint.security_protocol
    if protocol in ("SSL", "SASL_SSL"):
        listener.tls = server_context(config.values)
    if protocol.startswith("SASL_"):
        settings = SaslSettings(
            tuple(config.sasl_mechanisms), credentials, config["connections.max.reauth.ms"]
        )
        listener.authenticator_factory = lambda: SaslAuthenticator(settings)
    elif protocol == "SSL":
        mapper = PrincipalMapper(config["ssl.principal.mapping.rules"])
        listener.authenticator_factory = lambda: TlsAuthenticator(mapper)


def inter_broker_security(config: BrokerConfig) -> ClientSecurity:
    protocol = config.inter_broker_protocol
    context = client_context(config.values) if protocol in ("SSL", "SASL_SSL") else None
    if not protocol.startswith("SASL_"):
        return ClientSecurity(protocol, context)
    assert config.inter_broker_credentials is not None  # checked with the configuration
    username, password = config.inter_broker_credentials
    return ClientSecurity(
        protocol, context, config["sasl.mechanism.inter.broker.protocol"], username, password
    )
