"""The producer's memory bound: a byte budget (`buffer.memory`) shared by every record waiting to be sent.

Each record reserves an upper bound of its encoded size, released when its batch completes; a `send` that
finds no room waits up to `max.block.ms` (it never lets memory grow without bound) and then raises
`BufferExhaustedError`. The pool's lock is the accumulator's too (see `accumulator`).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

from backbone.wire.errors import BufferExhaustedError

__all__ = ["BufferPool", "wake_future"]


def wake_future(waiter: asyncio.Future[Any], *_args: object) -> None:
    """Complete `waiter` (with None) unless it is done already (cancelled, timed out)."""
    if not waiter.done():
        waiter.set_result(None)


class BufferPool:
    """A byte budget (`buffer.memory`) shared by every waiting record.

    `lock` is the accumulator's lock too: a `send` reserves and appends under one acquisition. Code holding
    it may take `available` directly; everything else goes through the methods.
    """

    def __init__(self, total: int) -> None:
        self.total = total
        self.available = total
        self.lock = threading.Lock()
        self._cond = threading.Condition(self.lock)
        self._async_waiters: list[asyncio.Future[None]] = []
        self._sync_waiters = 0

    @property
    def has_waiters(self) -> bool:
        return bool(self._async_waiters) or self._sync_waiters > 0

    def _too_big(self, size: int) -> BufferExhaustedError:
        return BufferExhaustedError(
            f"a record of about {size} bytes can never fit buffer.memory ({self.total} bytes); "
            "raise buffer.memory"
        )

    def _timeout(self, size: int, max_block_ms: int) -> BufferExhaustedError:
        return BufferExhaustedError(
            f"no room for {size} more bytes in buffer.memory ({self.total} bytes) within max.block.ms "
            f"({max_block_ms} ms): the brokers do not take records as fast as they are sent. Slow down, "
            "or raise buffer.memory or max.block.ms"
        )

    def try_reserve(self, size: int) -> bool:
        with self.lock:
            if self.available >= size:
                self.available -= size
                return True
            return False

    def reserve_blocking(self, size: int, max_block_ms: int) -> None:
        """Reserve `size` bytes, waiting up to `max_block_ms` (any thread but the event loop's)."""
        with self._cond:
            self._wait_locked(size, max_block_ms, max_block_ms, None)
            self.available -= size

    def wait_for_room_blocking(
        self, size: int, max_block_ms: int, reported_ms: int, waiting: Callable[[], object]
    ) -> None:
        """`wait_for_room` for any thread but the event loop's: block until `size` bytes are free, without
        taking them. `waiting()` is called once this thread counts as a waiter (`has_waiters`), before it
        blocks: a sender woken then sees that batches must go at once."""
        with self._cond:
            self._wait_locked(size, max_block_ms, reported_ms, waiting)

    def _wait_locked(
        self, size: int, max_block_ms: int, reported_ms: int, waiting: Callable[[], object] | None
    ) -> None:
        if size > self.total:
            raise self._too_big(size)
        deadline = time.monotonic() + max_block_ms / 1000
        self._sync_waiters += 1
        try:
            if waiting is not None and self.available < size:
                waiting()
            while self.available < size:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise self._timeout(size, reported_ms)
                self._cond.wait(remaining)
        finally:
            self._sync_waiters -= 1

    async def reserve(self, size: int, max_block_ms: int) -> None:
        """Reserve `size` bytes, waiting up to `max_block_ms` (on the event loop)."""
        deadline = time.monotonic() + max_block_ms / 1000
        while not self.try_reserve(size):
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            await self.wait_for_room(size, max(remaining_ms, 0), max_block_ms)

    async def wait_for_room(self, size: int, max_block_ms: int, reported_ms: int | None = None) -> None:
        """Wait up to `max_block_ms` (on the event loop) until `size` bytes are free, without taking them.

        A producer's `send` waits so, then appends and reserves under the accumulator lock in one go;
        another send may take the bytes first, and then it waits again. `reported_ms` is the wait the
        error names (the whole `max.block.ms` when this is one of several waits).
        """
        if size > self.total:
            raise self._too_big(size)
        reported = max_block_ms if reported_ms is None else reported_ms
        deadline = time.monotonic() + max_block_ms / 1000
        while True:
            with self.lock:
                if self.available >= size:
                    return
                waiter = asyncio.get_running_loop().create_future()
                self._async_waiters.append(waiter)
            remaining = deadline - time.monotonic()
            try:
                if remaining <= 0:
                    raise TimeoutError
                async with asyncio.timeout(remaining):
                    await waiter
            except TimeoutError:
                raise self._timeout(size, reported) from None
            finally:
                with self.lock:
                    if waiter in self._async_waiters:
                        self._async_waiters.remove(waiter)

    def release(self, size: int) -> None:
        """Give bytes back (from any thread) and wake whoever waits for them."""
        with self.lock:
            self.available += size
            if self._sync_waiters:
                self._cond.notify_all()
            waiters, self._async_waiters = self._async_waiters, []
        for waiter in waiters:
            # Futures are woken on their own loop: release may run on an application thread.
            waiter.get_loop().call_soon_threadsafe(wake_future, waiter)
