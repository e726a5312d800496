"""One docker compose topology for the whole system suite: bringing it up is most of a test's cost, so
every module shares it (the Spark profile's services are started by the test that needs them)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from compose_support import ComposeTopology, build_images, docker_engine


@pytest.fixture(scope="session")
def backbone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComposeTopology]:
    client = docker_engine()
    topology = ComposeTopology(client, build_images())
    try:
        started = time.monotonic()
        topology.up()
        print(f"topology {topology.project} healthy after {time.monotonic() - started:.1f} s")
        yield topology
    finally:
        topology.close(tmp_path_factory.mktemp("container-logs"))
        client.close()
