"""Suite-wide hooks: the order tests start in and, under pytest-xdist, which tests share a worker
(tests/helpers/scheduling.py says why)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers.scheduling import scope_of, start_rank


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: start_rank(item.nodeid))  # stable: each room keeps pytest's order


try:
    from xdist.scheduler import LoadScopeScheduling
except ImportError:  # without pytest-xdist the suite runs in one process, in the order above
    pass
else:

    class RoomScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> RoomScheduling:
        config.option.loadscopereorder = False  # keep the order above, not the most tests first
        return RoomScheduling(config, log)
