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
from tests.helpers.requests import metadata_request
from tests.helpers.wire import RawConnection

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


def wait_until_brokers_see_each_other(brokers: list[BrokerProcess], timeout: float = 30.0) -> None:
    """Each broker learns of the others through a ZooKeeper watch a moment after they register; a client
    bootstrapped from one of them only knows the brokers that one lists, so wait until all list all."""
    from tests.helpers.waiting import wait_until

    wanted = {b.broker_id for b in brokers}

    def listed(broker: BrokerProcess) -> set[int]:
        with RawConnection(broker.bootstrap) as raw:
            return {int(b.node_id) for b in raw.request(metadata_request()).brokers}

    wait_until(lambda: all(listed(b) == wanted for b in brokers), timeout=timeout, what="brokers listing all")


@pytest.fixture
def broker(broker_factory: BrokerFactory) -> BrokerProcess:
    return broker_factory(1)
