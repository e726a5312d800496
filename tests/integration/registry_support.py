"""A schema registry process for tests: started on a free port against a cluster, stopped after."""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from backbone.coordination import find_free_port
from backbone.dev import registry
from backbone.dev.processes import stop_child


@contextmanager
def running_registry(directory: Path, bootstrap: str, *, kill: bool = False) -> Iterator[str]:
    """Yield the URL of a registry serving from `bootstrap`'s `_schemas`; SIGKILL it after when `kill`."""
    started: list[subprocess.Popen[bytes]] = []
    port = find_free_port("127.0.0.1")
    try:
        entry = registry.start(directory, bootstrap, "127.0.0.1", port, started)
        yield entry["url"]
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
