"""Runs the console: opens the history database (a clear error naming its URL when it cannot), starts one
sampler per cluster and serves the pages until SIGTERM or SIGINT."""

from __future__ import annotations

import logging

from aiohttp import web

from backbone.console.app import build_app
from backbone.console.config import ConsoleConfig
from backbone.console.history import HistoryStore
from backbone.stopping import stop_on_signals

log = logging.getLogger(__name__)
READY_EVENT = "event=console_started"


async def serve(config: ConsoleConfig) -> None:
    history = HistoryStore(config.history_url)
    app = build_app(config, history)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, config.host, config.port)
    await site.start()
    stop = stop_on_signals()
    # Readiness is a line of our own output (dev up waits for it), so it must reach stderr at any log level.
    print(
        f"{READY_EVENT} url=http://{config.host}:{config.port}/ "
        f"clusters={','.join(c.name for c in config.clusters)} "
        f"history={history.url}",
        flush=True,
    )
    try:
        await stop.wait()
    finally:
        log.info("event=console_stopping")
        await runner.cleanup()
