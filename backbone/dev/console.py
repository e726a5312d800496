"""The console of `backbone dev up`: one `backbone console` process watching every cluster and mirror of the
topology, with a made-up operator and viewer whose passwords are in topology.json (development only). In
a secure topology it logs in to every cluster as the admin, reading the password from the admin's file."""

from __future__ import annotations

import json
import secrets
import sys
from pathlib import Path
from typing import Any

from backbone.dev.processes import start_role
from backbone.dev.secure import DevSecurity, private_directory

PREFERRED_PORT = 8080
READY_LINE = "event=console_started"  # backbone.console.server.READY_EVENT (not imported: it loads aiohttp)
READY_TIMEOUT_S = 60.0
DEFAULT_INTERVAL_MS = 5000


def _toml(value: Any) -> str:
    return json.dumps(value)  # a JSON string or number is a TOML one too


def write_config(
    directory: Path, clusters: dict[str, dict[str, Any]], mirrors: list[dict[str, Any]], port: int,
    host: str, interval_ms: int, users: dict[str, tuple[str, str]], security: DevSecurity | None = None,
) -> Path:  # fmt: skip
    """The console's TOML file; `users` maps name -> (role, password)."""
    from backbone.console.auth import hash_password

    lines = [
        f"listeners = {_toml(f'http://{host}:{port}')}",
        f"sampling.interval.ms = {interval_ms}",
        f"audit.interval.ms = {max(5000, 5 * interval_ms)}",
        f"history.url = {_toml('sqlite:///' + str(directory / 'history.db'))}",
        f"session.secret = {_toml(secrets.token_urlsafe(32))}",
    ]
    for name, cluster in clusters.items():
        role = "aggregate" if name == "aggregate" else "datacenter"
        lines += [
            "",
            "[[clusters]]",
            f"name = {_toml(name)}",
            f"bootstrap.servers = {_toml(cluster['bootstrap'])}",
        ]
        lines.append(f"role = {_toml(role)}")
        if security is not None:
            client = security.client_settings()
            del client["sasl.password"]
            client["sasl.password.file"] = str(security.admin_password_file)
            lines += [f"{key} = {_toml(value)}" for key, value in client.items()]
    for mirror in mirrors:
        lines += [
            "",
            "[[mirrors]]",
            f"source = {_toml(mirror['source'])}",
            f"target = {_toml(mirror['target'])}",
        ]
        lines.append(f"group = {_toml(mirror['group'])}")
    for name, (role, password) in users.items():
        lines += ["", "[[users]]", f"name = {_toml(name)}", f"role = {_toml(role)}"]
        lines.append(f"password.hash = {_toml(hash_password(password))}")
    directory.mkdir(parents=True, exist_ok=True)
    if security is not None:
        private_directory(directory)  # it says where the admin's password is
    path = directory / "console.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def start(
    directory: Path, clusters: dict[str, dict[str, Any]], mirrors: list[dict[str, Any]], port: int, host: str,
    interval_ms: int, started: list, security: DevSecurity | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Start the console detached, wait until it says it serves, and return its topology.json entry."""
    users = {
        "operator": ("operator", secrets.token_urlsafe(12)),
        "viewer": ("viewer", secrets.token_urlsafe(12)),
    }
    home = directory / "console"
    config = write_config(home, clusters, mirrors, port, host, interval_ms, users, security)
    command = [sys.executable, "-m", "backbone", "--log-level", "INFO", "console", "--config", str(config)]
    return start_role(
        "console",
        command,
        home / "console.out",
        READY_LINE,
        f"console --config {config}",
        started,
        timeout=READY_TIMEOUT_S,
        url=f"http://{host}:{port}/",
        user="operator",
        password=users["operator"][1],
        viewer_user="viewer",
        viewer_password=users["viewer"][1],
        host=host,
        port=port,
    )
