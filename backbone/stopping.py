"""How the long-running processes (broker, schema registry, console, mirror, audit counter) learn to stop.

stdlib only, so any room may import it.
"""

from __future__ import annotations

import asyncio
import signal


def stop_on_signals() -> asyncio.Event:
    """An event that SIGTERM or SIGINT sets, so that the running loop's process can stop cleanly."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    return stop
