"""Fixtures for browser tests: a live `backbone dev up` topology on free ports (one per test module), and
Debian's Chromium driven by Playwright (never `playwright install`: it would download a browser).

Every page a test visits can be saved with `shoot(page, name)` into var/browser-screenshots/ (docs/console.md
shows the best of them)."""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from backbone.dev import topology

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


@pytest.fixture(scope="module")
def backbone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[topology.DevTopology]:
    """dc1 and aggregate, two brokers each, the mirror and the console sampling every second."""
    directory = tmp_path_factory.mktemp("dev")
    try:
        yield topology.up(
            directory,
            ("dc1", "aggregate"),
            brokers=2,
            progress=lambda line: None,
            preferred_ports=False,
            console_interval_ms=INTERVAL_MS,
        )
    finally:
        topology.down(directory, progress=lambda line: None, timeout=15)
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: ops/setup installs Debian's chromium package")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


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
