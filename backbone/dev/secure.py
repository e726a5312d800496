"""`backbone dev up --secure`: the local topology with SASL_SSL (SCRAM-SHA-512) listeners and ACLs on.

At start it makes, under DIR/secure, a development CA and a broker certificate (`ops/dev-ca`; the keys are
made on this machine and never checked in), two users in every cluster's ZooKeeper chroot (`admin` for the
tools, `broker` for inter-broker traffic, both super users; random passwords, each in a file readable by
its owner only), and `client.properties`, the admin's client settings (`--command-config` for the CLI).
Brokers listen on SASL_SSL only, talk to each other over it with the `broker` login, and refuse whatever
no ACL allows (`allow.everyone.if.no.acl.found=false`). The mirrors, audit counters, console and schema
registry log in as `admin` through files of their own under DIR (owner-only, since they hold the password).
"""

from __future__ import annotations

import os
import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backbone.coordination import ClusterStore, ScramCredential

PROTOCOL = "SASL_SSL"
MECHANISM = "SCRAM-SHA-512"
ADMIN_USER = "admin"
BROKER_USER = "broker"
SECURE_DIR = "secure"
DEV_CA = Path(__file__).resolve().parents[2] / "ops" / "dev-ca"


@dataclass(frozen=True)
class DevSecurity:
    """Where the secure topology's CA, certificates and passwords are."""

    directory: Path

    @property
    def ca_file(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def keystore(self) -> Path:
        return self.directory / "broker.pem"

    @property
    def admin_password_file(self) -> Path:
        return self.directory / f"{ADMIN_USER}.password"

    @property
    def broker_password_file(self) -> Path:
        return self.directory / f"{BROKER_USER}.password"

    @property
    def client_properties(self) -> Path:
        return self.directory / "client.properties"

    def admin_password(self) -> str:
        return self.admin_password_file.read_text(encoding="utf-8").strip()

    def client_settings(self) -> dict[str, str]:
        """The admin's settings for our client (Kafka property names)."""
        return {
            "security.protocol": PROTOCOL,
            "sasl.mechanism": MECHANISM,
            "sasl.username": ADMIN_USER,
            "sasl.password": self.admin_password(),
            "ssl.cafile": str(self.ca_file),
        }

    def broker_properties(self, host: str, port: int) -> dict[str, str]:
        """A broker's security properties: one SASL_SSL listener, also the inter-broker one, ACLs on."""
        broker_password = self.broker_password_file.read_text(encoding="utf-8").strip()
        return {
            "listeners": f"{PROTOCOL}://{host}:{port}",
            "inter.broker.listener.name": PROTOCOL,
            "sasl.enabled.mechanisms": MECHANISM,
            "sasl.mechanism.inter.broker.protocol": MECHANISM,
            "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{BROKER_USER}" password="{broker_password}";',
            "ssl.keystore.location": str(self.keystore),
            "ssl.truststore.location": str(self.ca_file),
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": f"User:{ADMIN_USER};User:{BROKER_USER}",
            "allow.everyone.if.no.acl.found": "false",
        }

    def cluster_entry(self, bootstrap: str) -> dict[str, Any]:
        """What topology.json says about reaching a cluster securely."""
        return {
            "protocol": PROTOCOL,
            "bootstrap": bootstrap,
            "ca_file": str(self.ca_file),
            "mechanism": MECHANISM,
            "user": ADMIN_USER,
            "password_file": str(self.admin_password_file),
            "command_config": str(self.client_properties),
        }


def prepare(directory: Path) -> DevSecurity:
    """Make the CA, the broker certificate, the passwords and client.properties under DIR/secure."""
    security = DevSecurity(directory / SECURE_DIR)
    if not DEV_CA.exists():
        raise ValueError(f"--secure needs {DEV_CA} (run `backbone dev up --secure` from a checkout)")
    result = subprocess.run(
        [str(DEV_CA), str(security.directory)], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise ValueError(
            f"making the development CA failed: {result.stderr.strip() or result.stdout.strip()}"
        )
    for path in (security.admin_password_file, security.broker_password_file):
        _write_private(path, secrets.token_urlsafe(24) + "\n")
    write_properties(security.client_properties, security.client_settings())
    return security


def add_users(zookeeper_connect: str, security: DevSecurity) -> None:
    """The admin and broker users in one cluster's chroot (before its brokers start)."""
    passwords = {
        ADMIN_USER: security.admin_password(),
        BROKER_USER: security.broker_password_file.read_text(encoding="utf-8").strip(),
    }
    with ClusterStore(zookeeper_connect) as store:
        for user, password in passwords.items():
            store.set_scram_credential(user, MECHANISM, ScramCredential.from_password(MECHANISM, password))


def write_properties(path: Path, settings: dict[str, str]) -> Path:
    """A properties file readable by its owner only (it may hold a password)."""
    return _write_private(path, "".join(f"{key}={value}\n" for key, value in settings.items()))


def private_directory(path: Path) -> Path:
    """A directory only its owner can enter (what it holds may name a password)."""
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def _write_private(path: Path, text: str) -> Path:
    private_directory(path.parent)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        file.write(text)
    os.chmod(path, 0o600)  # an existing file keeps its mode on open
    return path
