"""SCRAM credentials in ZooKeeper, where Kafka keeps them: the user's config entity /config/users/<user>
(the name sanitized as Kafka's Sanitizer does).

A credential is stored salted and iterated, never as the password: Kafka's ScramCredentialUtils format,
one config key per mechanism,

    {"version":1,"config":{"SCRAM-SHA-512":"salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=4096"}}

so Kafka's own tools read what we write and the reverse. The write goes through the config layer, with a
change notification, as every config write does. The user's quota settings (if any) share the node and are
left untouched.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass

from scramp import ScramMechanism

from backbone.coordination import paths
from backbone.coordination.acls import AclOps
from backbone.coordination.session import translate_errors

__all__ = ["SCRAM_MECHANISMS", "CredentialOps", "ScramCredential"]

SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
_DIGESTS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
DEFAULT_ITERATIONS = 4096  # Kafka's default and scramp's (and RFC 7677's) minimum
MAX_ITERATIONS = 16384  # Kafka refuses more (AlterUserScramCredentials)


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def from_password(
        cls, mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None
    ) -> ScramCredential:
        check_mechanism(mechanism)
        if not DEFAULT_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise ValueError(f"iterations must be between {DEFAULT_ITERATIONS} and {MAX_ITERATIONS}")
        made = ScramMechanism(mechanism).make_auth_info(password, iteration_count=iterations, salt=salt)
        return cls(*made)

    @classmethod
    def from_salted_password(
        cls, mechanism: str, salted_password: bytes, salt: bytes, iterations: int
    ) -> ScramCredential:
        """What AlterUserScramCredentials carries (the client salts and iterates) -> the stored keys."""
        check_mechanism(mechanism)
        digest = _DIGESTS[mechanism]
        client_key = hmac.digest(salted_password, b"Client Key", digest)
        server_key = hmac.digest(salted_password, b"Server Key", digest)
        return cls(salt, hashlib.new(digest, client_key).digest(), server_key, iterations)

    def encode(self) -> str:
        b64 = base64.b64encode
        return (
            f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
            f"server_key={b64(self.server_key).decode()},iterations={self.iterations}"
        )

    @classmethod
    def decode(cls, text: str) -> ScramCredential:
        fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
        try:
            return cls(
                base64.b64decode(fields["salt"]),
                base64.b64decode(fields["stored_key"]),
                base64.b64decode(fields["server_key"]),
                int(fields["iterations"]),
            )
        except (KeyError, ValueError) as exc:
            raise ValueError(f"malformed SCRAM credential: {exc}") from None


def check_mechanism(mechanism: str) -> None:
    if mechanism not in SCRAM_MECHANISMS:
        raise ValueError(f"unknown SCRAM mechanism {mechanism!r}; one of {', '.join(SCRAM_MECHANISMS)}")


class CredentialOps(AclOps):
    """Read and write users' SCRAM credentials."""

    def scram_credentials(self, user: str) -> dict[str, ScramCredential]:
        """The user's credentials by mechanism ({} for an unknown user)."""
        config = self.get_config("users", paths.sanitize_entity_name(user))
        return {m: ScramCredential.decode(config[m]) for m in SCRAM_MECHANISMS if m in config}

    def set_scram_credential(self, user: str, mechanism: str, credential: ScramCredential) -> None:
        check_mechanism(mechanism)
        name = paths.sanitize_entity_name(user)
        config = self.get_config("users", name)
        config[mechanism] = credential.encode()
        self.set_config("users", name, config)

    def delete_scram_credential(self, user: str, mechanism: str) -> bool:
        """Remove one credential; False when the user had none for that mechanism."""
        check_mechanism(mechanism)
        name = paths.sanitize_entity_name(user)
        config = self.get_config("users", name)
        if config.pop(mechanism, None) is None:
            return False
        self.set_config("users", name, config)
        return True

    @translate_errors("list users")
    def scram_users(self) -> dict[str, list[str]]:
        """Every user with at least one SCRAM credential, with its mechanisms."""
        users = {}
        for name in sorted(self._children(paths.config_entity_type_path("users"))):
            if name == paths.DEFAULT_BROKER_CONFIG:
                continue  # the default user entity holds quotas, never credentials
            user = paths.desanitize_entity_name(name)
            mechanisms = sorted(self.scram_credentials(user))
            if mechanisms:
                users[user] = mechanisms
        return users
