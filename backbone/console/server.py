"""Runs the console: opens the history database (a clear error naming its URL when it cannot), starts one
sampler per cluster and serves the pages until SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import logging
import signal

from aiohttp import web

from backbone.console.app import build_app
from backbone.console.config import ConsoleConfig
from backbone.console.history import HistoryStore

log = logging.getLogger(__name__)
READY_EVENT = "event=console_started"


async def serve(config: ConsoleConfig) -> None:
    history = HistoryStore(config.history_url)
    app = build_app(config, history)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, config.host, config.port)
    await site.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
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
