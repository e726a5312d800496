"""The mirrors of `backbone dev up`: one `backbone mirror` process per datacenter cluster into the aggregate.

Each mirror copies every topic of its datacenter except the internal ones (`__consumer_offsets`, ...) under
the same name, so the aggregate merges a topic's events from every datacenter. Each has a fixed group and
static instance id (a restarted mirror takes its partitions straight back), its own Prometheus metrics port,
and its output in a file under the state directory, like the brokers'. In a secure topology each side's
login is in a properties file beside that output (`--config`, owner-only).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from backbone.dev.processes import start_role
from backbone.dev.secure import DevSecurity, write_properties

AGGREGATE = "aggregate"
CONSUMER_PREFIX = "source.consumer."  # backbone.mirror.config's (not imported: it loads the client)
PRODUCER_PREFIX = "target.producer."
# Mirror metrics listen from 9400 (one port per datacenter, in cluster order) when those ports are free.
FIRST_METRICS_PORT = 9400
INTERNAL_TOPICS = r"__.*|_schemas"  # _schemas: the schema registry's, kept in one cluster
READY_TIMEOUT_S = 60.0
# Logged once the mirror reached both clusters and serves its metrics, just before it joins its group.
READY_LINE = "event=mirror_started"


def routes(clusters: tuple[str, ...]) -> list[tuple[str, str]]:
    """(source, target) for every mirror: each other cluster into `aggregate`, none without one."""
    if AGGREGATE not in clusters:
        return []
    return [(name, AGGREGATE) for name in clusters if name != AGGREGATE]


def group_id(source: str, target: str) -> str:
    return f"mirror-{source}-{target}"


def command(
    source: str,
    target: str,
    source_bootstrap: str,
    target_bootstrap: str,
    metrics_port: int,
    python: str = sys.executable,
    config: Path | None = None,
) -> list[str]:
    """The mirror's command; `config`: a properties file of more settings (the clients' security)."""
    return [
        python, "-m", "backbone", "--log-level", "INFO", "mirror",
        "--source-bootstrap", source_bootstrap, "--target-bootstrap", target_bootstrap,
        "--source-alias", source, "--target-alias", target,
        "--topics-regex", ".*", "--exclude", INTERNAL_TOPICS, "--naming", "identity",
        "--group", group_id(source, target), "--instance-id", f"{group_id(source, target)}-1",
        "--metrics-port", str(metrics_port),
        # Its counts of what it copied go to the aggregate's audit topic, every 2 s.
        "--property", f"audit.bootstrap.servers={target_bootstrap}", "--property", "audit.interval.ms=2000",
        *(["--config", str(config)] if config else []),
    ]  # fmt: skip


def marker(source_bootstrap: str, target_bootstrap: str) -> str:
    """What only this mirror's command line holds while its clusters' ports are in use."""
    return f"mirror --source-bootstrap {source_bootstrap} --target-bootstrap {target_bootstrap}"


def start(
    directory: Path,
    source: str,
    target: str,
    clusters: dict[str, dict[str, Any]],
    metrics_port: int,
    host: str,
    started: list,
    security: DevSecurity | None = None,
) -> dict[str, Any]:
    """Start the mirror detached, wait until it says it started (it reached both clusters and serves its
    metrics), and return its topology.json entry; the process is appended to `started`, so that a caller
    can stop it when a later step fails."""
    source_bootstrap = clusters[source]["bootstrap"]
    target_bootstrap = clusters[target]["bootstrap"]
    output = directory / "mirrors" / f"{source}-to-{target}.out"
    output.parent.mkdir(parents=True, exist_ok=True)  # the properties file goes beside the output
    config = None
    if security is not None:  # the audit publisher goes to the target cluster with the target's settings
        client = security.client_settings()
        config = write_properties(
            output.with_suffix(".properties"),
            {
                **{f"{CONSUMER_PREFIX}{key}": value for key, value in client.items()},
                **{f"{PRODUCER_PREFIX}{key}": value for key, value in client.items()},
            },
        )
    start_command = command(source, target, source_bootstrap, target_bootstrap, metrics_port, config=config)
    return start_role(
        f"mirror {source} -> {target}",
        start_command,
        output,
        READY_LINE,
        marker(source_bootstrap, target_bootstrap),
        started,
        timeout=READY_TIMEOUT_S,
        source=source,
        target=target,
        group=group_id(source, target),
        host=host,
        metrics_port=metrics_port,
    )
