"""The server side of SCRAM (RFC 5802) as Kafka's ScramSaslServer does it.

scramp derives the stored credentials and runs our client's side, but its server insists that the
client-final nonce equal the combined nonce exactly, while Kafka only asks that it end with it; librdkafka
2.0 (Debian's kcat) sends the client nonce twice and works against Kafka, so it must work here too. The
proof is checked over the messages exactly as the client sent them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

from backbone.coordination import ScramCredential

_DIGESTS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


class ScramError(Exception):
    pass


def _attributes(message: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            raise ScramError(f"malformed SCRAM attribute {part[:20]!r}")
        values.setdefault(key, value)
    return values


def client_first_user(message: str) -> str:
    """The username of a client-first message (`n,,n=alice,r=...`), SASL-name decoded."""
    parts = message.split(",", 2)
    if len(parts) != 3 or parts[0] not in ("n", "y"):
        raise ScramError("malformed client-first message (channel binding is not supported)")
    name = _attributes(parts[2]).get("n", "")
    if not name:
        raise ScramError("client-first message names no user")
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    def __init__(self, mechanism: str, credential: ScramCredential) -> None:
        self.digest = _DIGESTS[mechanism]
        self.credential = credential
        self._first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._gs2_header = ""

    def server_first(self, client_first: str) -> str:
        flag, authzid, bare = client_first.split(",", 2)
        self._gs2_header = f"{flag},{authzid},"
        attributes = _attributes(bare)
        client_nonce = attributes.get("r", "")
        if not client_nonce:
            raise ScramError("client-first message has no nonce")
        # A short server nonce, as Kafka's (about 26 characters).
        self._nonce = client_nonce + secrets.token_urlsafe(18)
        self._first_bare = bare
        salt = base64.b64encode(self.credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={self.credential.iterations}"
        return self._server_first

    def server_final(self, client_final: str) -> str:
        without_proof, sep, proof_text = client_final.rpartition(",p=")
        if not sep:
            raise ScramError("client-final message has no proof")
        attributes = _attributes(without_proof)
        if attributes.get("c") != base64.b64encode(self._gs2_header.encode()).decode():
            raise ScramError("channel binding does not match the client-first message")
        if not attributes.get("r", "").endswith(self._nonce):
            raise ScramError("Invalid client nonce in the final client message")
        try:
            proof = base64.b64decode(proof_text, validate=True)
        except ValueError:
            raise ScramError("client proof is not base64") from None
        auth_message = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        signature = hmac.digest(self.credential.stored_key, auth_message, self.digest)
        if len(proof) != len(signature):
            raise ScramError("client proof has the wrong length")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self.digest, client_key).digest(), self.credential.stored_key):
            raise ScramError("invalid credentials")
        server_signature = hmac.digest(self.credential.server_key, auth_message, self.digest)
        return "v=" + base64.b64encode(server_signature).decode()
