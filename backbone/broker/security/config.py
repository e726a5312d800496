"""The broker's security properties, by Kafka's names (merged into the broker's configuration).

Keystores and truststores are PEM files (Kafka's `ssl.keystore.type=PEM`): the keystore holds the
certificate chain and the private key (in one file, or the key in `ssl.key.location`), the truststore the CA
certificates. The inter-broker client's SASL credentials come from `sasl.jaas.config`, as in Kafka
(`...ScramLoginModule required username="admin" password="...";`).
"""

from __future__ import annotations

import re

from backbone.properties import ConfigError, Property

SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

_P = Property
SECURITY_PROPERTIES: dict[str, Property] = {
    p.name: p
    for p in (
        _P("ssl.keystore.location", str, None, "PEM file with this broker's certificate chain (and key)"),
        _P("ssl.keystore.type", str, "PEM", choices=("PEM",)),
        _P("ssl.key.location", str, None, "PEM private key when it is not in ssl.keystore.location"),
        _P("ssl.key.password", str, None, "password of an encrypted private key"),
        _P("ssl.truststore.location", str, None, "PEM file of the CA certificates this broker trusts"),
        _P("ssl.truststore.type", str, "PEM", choices=("PEM",)),
        _P("ssl.client.auth", str, "none", "client certificates", choices=("none", "requested", "required")),
        _P(
            "ssl.principal.mapping.rules",
            str,
            "DEFAULT",
            "how a client certificate's subject becomes a principal name (Kafka's RULE:pattern/replace/[LU])",
        ),
        _P(
            "ssl.endpoint.identification.algorithm",
            str,
            "https",
            "https: check broker host names; empty: do not",
        ),
        _P(
            "sasl.enabled.mechanisms",
            list,
            ["SCRAM-SHA-256", "SCRAM-SHA-512"],
            "mechanisms SASL listeners offer",
        ),
        _P("sasl.mechanism.inter.broker.protocol", str, "SCRAM-SHA-512", choices=SASL_MECHANISMS),
        _P("sasl.jaas.config", str, None, 'the inter-broker login: ... username="..." password="...";'),
        _P(
            "authorizer.class.name",
            str,
            "",
            "set (e.g. kafka.security.authorizer.AclAuthorizer) to enforce ACLs",
        ),
        _P(
            "super.users",
            str,
            "",
            "principals every ACL check allows, separated by ';' (User:admin;User:broker)",
        ),
        _P("allow.everyone.if.no.acl.found", bool, False, "a resource no ACL names is open to everyone"),
        _P(
            "connections.max.reauth.ms",
            int,
            0,
            "longest a SASL session lasts before the client must re-authenticate (0: for ever)",
            minimum=0,
        ),
    )
}

_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def jaas_credentials(jaas: str | None) -> tuple[str, str] | None:
    """(username, password) from a JAAS login line, None when none is configured."""
    if not jaas:
        return None
    options = {key: value.replace('\\"', '"') for key, value in _JAAS_OPTION.findall(jaas)}
    if "username" not in options or "password" not in options:
        raise ConfigError('sasl.jaas.config must name username="..." and password="..."')
    return options["username"], options["password"]


def check_sasl_mechanisms(mechanisms: list[str]) -> list[str]:
    names = [m.strip().upper() for m in mechanisms if m.strip()]
    for name in names:
        if name not in SASL_MECHANISMS:
            raise ConfigError(f"sasl.enabled.mechanisms: {name} is not one of {', '.join(SASL_MECHANISMS)}")
    return names
