"""TLS for listeners and for the broker's own connections to other brokers, from PEM files.

A client certificate, when `ssl.client.auth` asks for one, names the connection's principal: its subject
as an RFC 2253 distinguished name (`CN=alice,OU=eng,O=example`), rewritten by `ssl.principal.mapping.rules`
as Kafka does: a comma-separated list of `RULE:pattern/replacement/[LU]` and `DEFAULT`, tried in order, the
first rule whose pattern matches the whole name wins (`$1` in the replacement is the first group; `L` and
`U` lower- or upper-case the result); `DEFAULT` keeps the name as it is. No rule matching is a refusal.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from backbone.properties import ConfigError

# Short names of the attribute types Python's ssl module reports, as RFC 2253 (and Java) spell them.
_SHORT_NAMES = {
    "commonName": "CN",
    "organizationalUnitName": "OU",
    "organizationName": "O",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "countryName": "C",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
    "emailAddress": "EMAILADDRESS",
}

_RULE = re.compile(r"\s*(?:(DEFAULT)|RULE:((?:\\/|[^/])*)/((?:\\/|[^/])*)/([LU])?)\s*(?:,|$)")


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""


class PrincipalMapper:
    """`ssl.principal.mapping.rules`: a certificate subject's distinguished name -> a principal name."""

    def __init__(self, rules: str = "DEFAULT") -> None:
        self.rules: list[_Rule] = []
        position = 0
        text = rules.strip()
        while position < len(text):
            match = _RULE.match(text, position)
            if match is None or match.end() == position:
                raise ConfigError(
                    f"ssl.principal.mapping.rules: cannot read {text[position:]!r}; "
                    "write RULE:pattern/replacement/[LU] or DEFAULT, separated by commas"
                )
            position = match.end()
            if match.group(1):
                self.rules.append(_Rule(None))
                continue
            try:
                pattern = re.compile(match.group(2).replace("\\/", "/"))
            except re.error as exc:
                raise ConfigError(
                    f"ssl.principal.mapping.rules: bad pattern {match.group(2)!r}: {exc}"
                ) from None
            # Java's $1 is Python's \g<1>.
            replacement = re.sub(r"\$(\d+)", r"\\g<\1>", match.group(3).replace("\\/", "/"))
            self.rules.append(_Rule(pattern, replacement, match.group(4) or ""))
        if not self.rules:
            self.rules.append(_Rule(None))

    def map(self, distinguished_name: str) -> str | None:
        for rule in self.rules:
            if rule.pattern is None:
                return distinguished_name
            match = rule.pattern.fullmatch(distinguished_name)
            if match is None:
                continue
            name = match.expand(rule.replacement)
            return name.lower() if rule.case == "L" else name.upper() if rule.case == "U" else name
        return None


def distinguished_name(peer_certificate: Mapping[str, Any]) -> str:
    """The subject of a certificate from `SSLObject.getpeercert()`, most specific part first (RFC 2253)."""
    parts = []
    for rdn in reversed(peer_certificate.get("subject", ())):
        parts.append("+".join(f"{_SHORT_NAMES.get(key, key)}={_escape(value)}" for key, value in rdn))
    return ",".join(parts)


def _escape(value: str) -> str:
    return re.sub(r'([,+"\\<>;])', r"\\\1", value)


def server_context(values: Mapping[str, Any]) -> ssl.SSLContext:
    """The SSL context of an SSL or SASL_SSL listener."""
    keystore = values["ssl.keystore.location"]
    if not keystore:
        raise ConfigError(
            "an SSL or SASL_SSL listener needs ssl.keystore.location (a PEM file with the certificate chain "
            "and key; ops/dev-ca makes one for development)"
        )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    _load_keystore(context, values)
    truststore = values["ssl.truststore.location"]
    client_auth = values["ssl.client.auth"]
    if client_auth != "none":
        if not truststore:
            raise ConfigError(f"ssl.client.auth={client_auth} needs ssl.truststore.location (the CA file)")
        context.load_verify_locations(cafile=truststore)
        context.verify_mode = ssl.CERT_REQUIRED if client_auth == "required" else ssl.CERT_OPTIONAL
    return context


def client_context(values: Mapping[str, Any]) -> ssl.SSLContext:
    """The SSL context the broker uses towards other brokers: their CA, and its own certificate."""
    truststore = values["ssl.truststore.location"]
    context = ssl.create_default_context(cafile=truststore) if truststore else ssl.create_default_context()
    context.check_hostname = values["ssl.endpoint.identification.algorithm"].lower() == "https"
    if values["ssl.keystore.location"]:
        _load_keystore(context, values)
    return context


def _load_keystore(context: ssl.SSLContext, values: Mapping[str, Any]) -> None:
    try:
        context.load_cert_chain(
            values["ssl.keystore.location"], values["ssl.key.location"], values["ssl.key.password"]
        )
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"ssl.keystore.location: cannot load {values['ssl.keystore.location']}: {exc}"
        ) from None
