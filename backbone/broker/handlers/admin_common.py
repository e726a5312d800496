"""What the admin handlers share: error codes with messages, and waiting for the metadata cache.

Admin requests change ZooKeeper; the answer should only go out once this broker's metadata cache shows
the change (as Kafka's controller path effectively guarantees), so a client that creates a topic and
produces at once finds a leader. `MetadataWaiter` listens to the cache's change events and wakes the
waiting handlers, bounded by each request's timeout.

The admin handlers are built from `AdminPieces`: the cluster store with the call that runs its blocking
operations off the event loop, this broker's metadata cache and its configuration.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from backbone.broker.controller.fenced_writes import ZooKeeperCall
from backbone.broker.handlers.common import error_code_of, error_message_of
from backbone.broker.metadata_cache import MetadataCache, MetadataListener
from backbone.coordination import ClusterStore, CoordinationError, CoordinationUnavailableError

if TYPE_CHECKING:
    from backbone.broker.config import BrokerConfig
    from backbone.broker.server import Broker

log = logging.getLogger(__name__)


def error_of(exc: BaseException, action: str) -> tuple[ErrorCode, str]:
    """(code, message) for an exception raised while serving one item of an admin request.

    ZooKeeper trouble has no Kafka code of its own; the client still deserves the room's message.
    """
    if isinstance(exc, CoordinationUnavailableError):
        # Retriable, unlike UNKNOWN_SERVER_ERROR: clients try again once the ZooKeeper session is back.
        log.warning("event=admin_failed action=%s error=%r", action, str(exc))
        return ErrorCode.request_timed_out, str(exc)
    if isinstance(exc, CoordinationError):
        log.error("event=admin_failed action=%s error=%r", action, str(exc))
        return ErrorCode.unknown_server_error, str(exc)
    return error_code_of(exc), error_message_of(exc)


@dataclass(frozen=True)
class AdminPieces:
    """What the topic and config handlers read and change; `zk(store.method, ...)` runs a store call."""

    broker_id: int
    config: BrokerConfig
    cache: MetadataCache
    store: ClusterStore
    zk: ZooKeeperCall


def admin_pieces(broker: Broker) -> AdminPieces:
    return AdminPieces(broker.broker_id, broker.config, broker.cache, broker.store, broker.zk)


class MetadataWaiter(MetadataListener):
    """Wakes waiters on every metadata change this broker hears about (on the event loop). The broker lists
    it among its metadata listeners once its MetadataSync starts; until then no change is heard."""

    def __init__(self) -> None:
        self._waiters: set[asyncio.Future[None]] = set()

    async def wait_until(self, condition: Callable[[], bool], timeout_s: float) -> bool:
        """Wait until `condition()` holds, at most `timeout_s` seconds; return whether it holds."""
        if condition():
            return True
        if timeout_s <= 0:
            return False
        deadline = time.monotonic() + timeout_s
        loop = asyncio.get_running_loop()
        while not condition():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.add(waiter)
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waiter, remaining)
            finally:
                self._waiters.discard(waiter)
        return True

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, set()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def on_brokers_changed(self, previous: set[int], current: set[int]) -> None:
        self._wake()

    def on_partition_state(self, topic: str, partition: int) -> None:
        self._wake()

    def on_topic_deleted(self, topic: str) -> None:
        self._wake()

    def on_topic_changed(self, topic: str) -> None:
        self._wake()

    def on_controller_changed(self, controller_id: int) -> None:
        self._wake()
