"""The broker-wide budget of request bytes read but not yet answered: Kafka's `queued.max.request.bytes`.

Kafka's memory pool, by the same rule: a request larger than the shared receive buffer reserves its whole
size when its size prefix arrives, and only while the budget is not spent; a smaller one is charged when
it is complete. Its bytes are released once it is answered (or its connection is gone). While the budget
is spent, every connection that wants more stops being read (its socket fills, then the client's) and
is read again as answers free bytes. A reserved request is always read to its end, so the budget can
never be spent by half-read requests that wait for each other.

The bytes held stay under `queued.max.request.bytes` plus one request (the reservation that spent it) plus
one receive buffer per connection (the small requests a last read completed). `-1`, Kafka's default,
means no budget.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from backbone.properties import ConfigError, Property

if TYPE_CHECKING:
    from backbone.broker.network import Connection

log = logging.getLogger(__name__)

_LOG_EVERY_S = 60.0

QUEUED_MAX_REQUEST_BYTES = Property(
    "queued.max.request.bytes",
    int,
    -1,
    "request bytes the broker holds read but not yet answered, all connections together, before it stops "
    "reading; -1: no bound",
    minimum=-1,
)


def check_budget(budget: int, max_request_bytes: int) -> None:
    """Kafka's rule: a budget smaller than one request could never take the largest one."""
    if 0 <= budget < max_request_bytes:
        raise ConfigError(
            f"queued.max.request.bytes ({budget}) must be -1 or at least socket.request.max.bytes "
            f"({max_request_bytes})"
        )


class RequestMemory:
    """Bytes of requests held by all connections of a broker, and the connections waiting for some."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.used = 0
        self.peak = 0
        self.waiting: set[Connection] = set()
        self._logged = -_LOG_EVERY_S

    @property
    def spent(self) -> bool:
        return self.used >= self.budget

    def take(self, nbytes: int) -> None:
        self.used += nbytes
        self.peak = max(self.peak, self.used)

    def wait(self, connection: Connection) -> None:
        """`connection` stopped reading for want of budget; it is told when bytes are freed."""
        self.waiting.add(connection)
        now = time.monotonic()
        if now - self._logged >= _LOG_EVERY_S:
            self._logged = now
            log.info(
                "event=request_memory_spent used_bytes=%d budget_bytes=%d waiting_connections=%d",
                self.used,
                self.budget,
                len(self.waiting),
            )

    def release(self, nbytes: int) -> None:
        self.used -= nbytes
        if self.waiting and not self.spent:
            waiting, self.waiting = self.waiting, set()
            for connection in waiting:
                connection.memory_freed()
