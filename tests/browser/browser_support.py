"""Helpers for the browser tests (kept out of conftest.py: in a whole-tree run another directory's conftest
owns that module name)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
SCREENSHOTS = Path(__file__).resolve().parents[2] / "var" / "browser-screenshots"
INTERVAL_MS = 1000


def wait_until(
    condition: Callable[[], object], timeout: float, what: str | Callable[[], str], interval: float = 0.1
) -> object:
    """Poll `condition` until truthy; fail after `timeout` s saying `what` (a callable is asked then)."""
    deadline = time.monotonic() + timeout
    while True:
        found = condition()
        if found:
            return found
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what() if callable(what) else what}")
        time.sleep(interval)


def log_in(browser, console: dict, user: str = "user", password: str = "password"):
    """A new browser context logged in as the topology's operator (or viewer); returns its page."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.goto(console["url"] + "login")
    page.fill("input[name=user]", console[user])
    page.fill("input[name=password]", console[password])
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r".*/$"))
    return page


def shoot(page, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
