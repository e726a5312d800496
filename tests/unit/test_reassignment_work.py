"""The controller's reassignment work: an AlterPartitionReassignments naming no partition is answered at once,
without waiting its turn behind the control loop or other requests, nor reading ZooKeeper (the protocol
fuzzer found such requests waiting in line for seconds under load)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from backbone.broker.controller.reassignment_work import Reassignments

pytestmark = pytest.mark.unit


async def test_a_request_naming_no_partition_does_not_wait_its_turn() -> None:
    # No cache and no ZooKeeper writer: touching either would fail the test.
    reassignments = Reassignments(cast(Any, None), cast(Any, None), set, lambda: None)
    async with reassignments._lock:  # the control loop (or another request) is at work
        assert await asyncio.wait_for(reassignments.alter({}), timeout=10) == {}
