"""Fixtures for integration tests: one real ZooKeeper server per test session, a fresh chroot per test.

`zookeeper` starts Debian's ZooKeeper on a free loopback port in a temporary directory and stops it
after the last test, even when tests fail. `cluster_store` gives each test its own chroot, so tests
never see each other's znodes; `store_factory` opens more stores (more sessions) on that chroot.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator

import pytest

from backbone.coordination import ClusterStore, ZooKeeperServer, find_free_port
from tests.helpers.waiting import wait_until

# A short tick keeps session timeouts (2..20 ticks) short, so expiry tests finish quickly.
TICK_TIME_MS = 200
SESSION_TIMEOUT_S = 4.0

WaitFor = Callable[..., None]


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer(
        tmp_path_factory.mktemp("zookeeper"),
        find_free_port(),
        tick_time_ms=TICK_TIME_MS,
        force_sync=False,  # test data need not survive a power cut; fsync per write only slows tests
    )
    server.start(timeout=60.0)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def chroot(request: pytest.FixtureRequest) -> str:
    """A chroot no other test uses: /test-<test name>-<random>."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name)[:80]
    return f"/test-{name}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def store_factory(zookeeper: ZooKeeperServer, chroot: str) -> Iterator[Callable[..., ClusterStore]]:
    """Open a started ClusterStore on this test's chroot; every store it opened is closed afterwards."""
    opened: list[ClusterStore] = []

    def open_store(**options: float) -> ClusterStore:
        options.setdefault("session_timeout", SESSION_TIMEOUT_S)
        store = ClusterStore(zookeeper.connect_string + chroot, **options)
        opened.append(store)
        store.start()
        return store

    try:
        yield open_store
    finally:
        for store in opened:
            store.close()


@pytest.fixture
def cluster_store(store_factory: Callable[..., ClusterStore]) -> ClusterStore:
    return store_factory()


@pytest.fixture
def wait_for() -> WaitFor:
    return wait_until


from broker_fixtures import broker, broker_factory  # noqa: E402, F401 - fixtures for every integration test
from security_fixtures import certificates, secure_broker, secure_broker_properties  # noqa: E402, F401 - fixtures for the security tests
