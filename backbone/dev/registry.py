"""The schema registry of `backbone dev up`: one `backbone schema-registry` beside the aggregate cluster,
its schemas in the aggregate's `_schemas` topic (which the mirrors never copy), its URL in topology.json
as `schema_registry.url`; and with `--generate`, one `backbone generate` per datacenter. In a secure
topology the registry's storage client and the generators log in as the admin (owner-only files)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from backbone.dev.processes import start_role
from backbone.dev.secure import DevSecurity, write_properties

PREFERRED_PORT = 8081
READY_LINE = "event=schema_registry_started"  # backbone.schema_registry.server.READY_LINE
GENERATOR_READY_LINE = "event=generate_started"  # backbone.tracking.generator.READY_LINE
READY_TIMEOUT_S = 60.0


def write_config(
    path: Path, bootstrap: str, host: str, port: int, security: DevSecurity | None = None
) -> Path:
    settings = {
        "listeners": f"http://{host}:{port}",
        "kafkastore.bootstrap.servers": bootstrap,
        "kafkastore.topic": "_schemas",
    }
    if security is not None:  # the storage client's login: an owner-only file
        settings.update({f"kafkastore.{key}": value for key, value in security.client_settings().items()})
        return write_properties(path, settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()), encoding="utf-8")
    return path


def command(config: Path, python: str = sys.executable) -> list[str]:
    return [python, "-m", "backbone", "--log-level", "INFO", "schema-registry", "--config", str(config)]


def start(
    directory: Path,
    bootstrap: str,
    host: str,
    port: int,
    started: list[subprocess.Popen[bytes]],
    security: DevSecurity | None = None,
) -> dict[str, Any]:
    """Start a registry detached, wait until it loaded the schemas topic and serves, and return its
    topology.json entry; the process is appended to `started` so a caller can stop it on a later failure."""
    config = write_config(
        directory / "schema-registry" / "registry.properties", bootstrap, host, port, security
    )
    return start_role(
        "schema registry",
        command(config),
        directory / "schema-registry" / "registry.out",
        READY_LINE,
        str(config),
        started,
        timeout=READY_TIMEOUT_S,
        url=f"http://{host}:{port}",
        host=host,
        port=port,
    )


def generator_command(
    datacenter: str,
    bootstrap: str,
    registry_url: str,
    audit_bootstrap: str,
    rate: float,
    python: str = sys.executable,
    command_config: Path | None = None,
) -> list[str]:
    """`backbone generate` into one datacenter until stopped, its audit counts sent to the aggregate."""
    return [
        python,
        "-m",
        "backbone",
        "--log-level",
        "INFO",
        "generate",
        "--bootstrap-server",
        bootstrap,
        "--schema-registry",
        registry_url,
        "--datacenter",
        datacenter,
        "--rate",
        str(rate),
        "--duration",
        "0",
        "--audit-bootstrap",
        audit_bootstrap,
        *(["--command-config", str(command_config)] if command_config else []),
    ]


def start_generator(
    directory: Path,
    datacenter: str,
    clusters: dict[str, dict[str, Any]],
    registry_url: str,
    aggregate: str,
    rate: float,
    started: list[subprocess.Popen[bytes]],
    security: DevSecurity | None = None,
) -> dict[str, Any]:
    bootstrap = clusters[datacenter]["bootstrap"]
    start_command = generator_command(
        datacenter,
        bootstrap,
        registry_url,
        clusters[aggregate]["bootstrap"],
        rate,
        command_config=security.client_properties if security else None,
    )
    return start_role(
        f"generator {datacenter}",
        start_command,
        directory / "generators" / f"{datacenter}.out",
        GENERATOR_READY_LINE,
        f"generate --bootstrap-server {bootstrap}",
        started,
        timeout=READY_TIMEOUT_S,
    )
