"""What the conformance tests share: the cluster's shape, its handle, and a bounded wait.

(Test modules import these from here, not from conftest: another directory's conftest module has the
same name, and only one of them can be imported as `conftest` in a whole-tree run.)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from backbone.dev.processes import BrokerProcess
from tests.helpers.names import unique_name

BROKERS = 3
PARTITIONS = 4


def wait_until(condition: Callable[[], object], timeout: float = 30.0, what: str = "") -> object:
    """Poll `condition` until it returns something truthy (returned); fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what or condition}")
        time.sleep(0.05)


@dataclass
class Cluster:
    brokers: list[BrokerProcess]

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers)

    def topic(self, prefix: str) -> str:
        """A topic name no other test uses."""
        return unique_name(prefix)
