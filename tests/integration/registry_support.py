"""A schema registry process for tests: started on a free port against a cluster, stopped after."""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from backbone.client import Consumer, TopicPartition
from backbone.coordination import find_free_port
from backbone.dev import registry
from backbone.dev.processes import start_until_line, stop_child


@contextmanager
def running_registry(
    directory: Path, bootstrap: str, *, kill: bool = False, lease_ms: int | None = None
) -> Iterator[str]:
    """Yield the URL of a registry serving from `bootstrap`'s `_schemas` (with `leader.lease.ms` when
    `lease_ms` is given); SIGKILL it after when `kill`."""
    started: list[subprocess.Popen[bytes]] = []
    port = find_free_port("127.0.0.1")
    try:
        if lease_ms is None:
            yield registry.start(directory, bootstrap, "127.0.0.1", port, started)["url"]
            return
        config = registry.write_config(
            directory / "schema-registry" / "registry.properties", bootstrap, "127.0.0.1", port
        )
        with config.open("a", encoding="utf-8") as out:
            out.write(f"leader.lease.ms={lease_ms}\n")
        started.append(
            start_until_line(
                registry.command(config),
                directory / "schema-registry" / "registry.out",
                registry.READY_LINE,
                "schema registry",
                timeout=registry.READY_TIMEOUT_S,
            )
        )
        yield f"http://127.0.0.1:{port}"
    finally:
        for process in started:
            if kill:
                process.kill()
                process.wait()
            else:
                stop_child(process, timeout=15)


def call(method: str, url: str, body: object = None) -> tuple[int, object]:
    """One HTTP request with a JSON body; (status, decoded JSON answer), errors included."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def lease_expiry_ms(bootstrap: str, topic: str = "_schemas") -> int:
    """When the newest lease record in the schemas topic runs out (0: there is none)."""
    expiry = 0
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        end = consumer.end_offsets([partition])[partition]
        while consumer.position(partition) < end:
            for records in consumer.poll(timeout_ms=1000).values():
                for record in records:
                    if record.value is not None and json.loads(record.key).get("keytype") == "LEASE":
                        expiry = json.loads(record.value)["expires_at_ms"]
    return expiry
