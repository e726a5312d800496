"""Waiting for a condition in tests, never for a fixed time."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest


def wait_until(
    condition: Callable[[], object], timeout: float = 10.0, interval: float = 0.02, what: str = ""
) -> None:
    """Poll `condition` until it is truthy; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout:.1f}s waiting for {what or condition}")
        time.sleep(interval)
