"""A broker's shutdown steps that need ZooKeeper are skipped, not fatal, when ZooKeeper cannot be reached:
whether the call times out or kazoo gives up at once (ConnectionLoss), the storage still closes cleanly."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from backbone.broker.config import BrokerConfig
from backbone.broker.server import Broker
from backbone.coordination.errors import CoordinationUnavailableError

pytestmark = pytest.mark.unit


def unreachable(*_args: object) -> None:
    raise CoordinationUnavailableError("announce: ZooKeeper is unreachable (ConnectionLoss)")


@pytest.fixture
def broker(tmp_path: Path) -> Broker:
    config = {"broker.id": 1, "log.dirs": str(tmp_path), "zookeeper.connect": "127.0.0.1:1"}
    return Broker(BrokerConfig(config))


async def test_a_controlled_shutdown_zookeeper_refuses_is_skipped(
    broker: Broker, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(broker.store, "announce_controlled_shutdown", unreachable)
    with caplog.at_level(logging.WARNING):
        await broker._controlled_shutdown()
    assert "controlled_shutdown_skipped" in caplog.text
    assert "ConnectionLoss" in caplog.text


async def test_a_shutdown_step_zookeeper_refuses_is_skipped(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        await broker._bounded_zk("unregister", unreachable)
    assert "shutdown_step_skipped step='unregister'" in caplog.text
