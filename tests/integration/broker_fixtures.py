"""Fixtures that run real brokers as processes, against the session's real ZooKeeper.

`broker` is one started broker on a fresh cluster chroot; `broker_factory` starts more (a cluster).
Every process started here is stopped after the test, also when it fails.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from backbone.coordination import ZooKeeperServer
from backbone.dev.processes import BrokerProcess

BrokerFactory = Callable[..., BrokerProcess]


@pytest.fixture
def broker_factory(zookeeper: ZooKeeperServer, chroot: str, tmp_path: Path) -> Iterator[BrokerFactory]:
    started: list[BrokerProcess] = []

    def start(broker_id: int = 1, **properties: object) -> BrokerProcess:
        props = {"zookeeper.session.timeout.ms": 6000, "log.flush.interval.ms": 1000}
        props.update({key.replace("_", "."): value for key, value in properties.items()})
        process = BrokerProcess(
            broker_id, zookeeper.connect_string + chroot, tmp_path / f"broker-{broker_id}", properties=props
        )
        started.append(process)
        process.start()
        return process

    try:
        yield start
    finally:
        for process in started:
            process.stop(timeout=15)


@pytest.fixture
def broker(broker_factory: BrokerFactory) -> BrokerProcess:
    return broker_factory(1)
