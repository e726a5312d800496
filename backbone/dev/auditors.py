"""The audit chain of `backbone dev up`: a `backbone audit count` process per cluster (tier = the cluster's
name), every one publishing to the aggregate cluster's `__audit` topic, next to the mirrors, which publish
their own counts there too. With them `backbone audit report` answers for every topic produced into the
topology: the datacenter tiers are the baseline, the aggregate tier is what arrived. In a secure topology
they log in as the admin (`--command-config` DIR/secure/client.properties).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from backbone.dev.mirrors import AGGREGATE
from backbone.dev.processes import start_role
from backbone.dev.secure import DevSecurity

READY_LINE = "event=audit_count_started"
READY_TIMEOUT_S = 60.0
# Counts are published this often (the command's default is 10 s): a report soon after a produce is right.
INTERVAL_MS = 2_000


def tiers(clusters: tuple[str, ...]) -> list[str]:
    """The clusters counted: all of them when there is an aggregate to publish to, else none."""
    return list(clusters) if AGGREGATE in clusters else []


def baseline(clusters: tuple[str, ...]) -> list[str]:
    """The tiers whose sum the aggregate must hold: the datacenter clusters."""
    return [name for name in tiers(clusters) if name != AGGREGATE]


def command(
    tier: str,
    bootstrap: str,
    publish_to: str,
    python: str = sys.executable,
    command_config: Path | None = None,
) -> list[str]:
    return [
        python, "-m", "backbone", "--log-level", "INFO", "audit", "count",
        "--bootstrap-server", bootstrap, "--tier", tier, "--publish-to", publish_to,
        "--interval-ms", str(INTERVAL_MS),
        *(["--command-config", str(command_config)] if command_config else []),
    ]  # fmt: skip


def marker(tier: str, bootstrap: str) -> str:
    return f"audit count --bootstrap-server {bootstrap} --tier {tier}"


def start(
    directory: Path,
    tier: str,
    clusters: dict[str, dict[str, Any]],
    started: list,
    security: DevSecurity | None = None,
) -> dict[str, Any]:
    """Start one cluster's counter detached, wait until it says it started, and return its topology.json
    entry (the process is appended to `started` so a caller can stop it when a later step fails)."""
    bootstrap = clusters[tier]["bootstrap"]
    start_command = command(
        tier,
        bootstrap,
        clusters[AGGREGATE]["bootstrap"],
        command_config=security.client_properties if security else None,
    )
    return start_role(
        f"audit count {tier}",
        start_command,
        directory / "auditors" / f"{tier}.out",
        READY_LINE,
        marker(tier, bootstrap),
        started,
        timeout=READY_TIMEOUT_S,
        tier=tier,
        cluster=tier,
    )
