"""Fixtures for browser tests: a live `backbone dev up` topology on free ports (one per test module), and
Debian's Chromium driven by Playwright (never `playwright install`: it would download a browser).

Every page a test visits can be saved with `shoot(page, name)` into var/browser-screenshots/ (docs/console.md
shows the best of them)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser_support import CHROMIUM, INTERVAL_MS

from backbone.dev import topology


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
