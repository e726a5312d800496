"""Starting processes the way `backbone dev up` does: a broker that exits at start shows its own reason."""

from __future__ import annotations

import pytest

from backbone.dev.processes import BrokerProcess, BrokerStartError

pytestmark = pytest.mark.integration


def test_a_broker_on_a_locked_log_directory_says_so_in_a_line(broker, zookeeper, chroot) -> None:
    second = BrokerProcess(2, zookeeper.connect_string + chroot, broker.directory.parent / "second")
    second.properties["log.dirs"] = broker.properties["log.dirs"]  # the first broker holds its lock
    with pytest.raises(BrokerStartError) as failure:
        second.start(timeout=60)
    message = str(failure.value)
    assert message.startswith("broker 2 exited with code")
    assert "is locked by another process" in message
    assert len(message.splitlines()) <= 5, message
