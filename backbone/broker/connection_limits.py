"""Connection hygiene, by Kafka's property names: how many connections the broker takes (`max.connections`,
`max.connections.per.ip`, `max.connections.per.ip.overrides`) and how long one may sit without a complete
request (`connections.max.idle.ms`).

Idle time counts from the last complete request received or answer sent, so a client that sends a size
prefix and then trickles the rest of its frame (slowloris) is closed after the same bound as one that
sends nothing; a connection's buffered bytes are bounded by `socket.request.max.bytes` (one frame) and
the queue limits in network.py, so the broker's connection memory is bounded by the connection limits
times those. A refused connection is closed at once, before any byte is read; refusals are logged at most
once a minute per address.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from backbone.properties import ConfigError, Property

if TYPE_CHECKING:
    from backbone.broker.network import Connection, Listener

log = logging.getLogger(__name__)

_INT_MAX = 2**31 - 1
_LOG_EVERY_S = 60.0

CONNECTION_PROPERTIES: dict[str, Property] = {
    p.name: p
    for p in (
        Property("max.connections", int, _INT_MAX, "connections the broker takes at once", minimum=1),
        Property("max.connections.per.ip", int, _INT_MAX, "connections one address may hold", minimum=0),
        Property("max.connections.per.ip.overrides", str, "", "address:count,... exceptions to the above"),
        Property(
            "connections.max.idle.ms",
            int,
            600000,
            "a connection without a complete request or answer for this long is closed",
            minimum=1,
        ),
    )
}


def parse_overrides(text: str) -> dict[str, int]:
    overrides = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        host, sep, count = item.rpartition(":")
        if not sep or not count.isdigit():
            raise ConfigError(f"max.connections.per.ip.overrides: {item!r} must look like address:count")
        overrides[host] = int(count)
    return overrides


class ConnectionLimits:
    """Counts the broker's connections (all listeners) and admits or refuses new ones."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.max_connections: int = values["max.connections"]
        self.per_ip: int = values["max.connections.per.ip"]
        self.overrides = parse_overrides(values["max.connections.per.ip.overrides"])
        self.idle_s: float = values["connections.max.idle.ms"] / 1000
        self.count = 0
        self.by_ip: collections.Counter[str] = collections.Counter()
        self._logged: dict[str, float] = {}

    def admit(self, ip: str) -> bool:
        limit = self.overrides.get(ip, self.per_ip)
        if self.count >= self.max_connections or self.by_ip[ip] >= limit:
            now = time.monotonic()
            if now - self._logged.get(ip, -_LOG_EVERY_S) >= _LOG_EVERY_S:
                self._logged[ip] = now
                log.warning(
                    "event=connection_refused address=%s connections=%d from_address=%d max=%d max_per_ip=%d",
                    ip,
                    self.count,
                    self.by_ip[ip],
                    self.max_connections,
                    limit,
                )
            return False
        self.count += 1
        self.by_ip[ip] += 1
        return True

    def release(self, ip: str) -> None:
        self.count -= 1
        self.by_ip[ip] -= 1
        if self.by_ip[ip] <= 0:
            del self.by_ip[ip]

    def close_idle(self, listeners: Iterable[Listener]) -> int:
        """Close the connections idle longer than `connections.max.idle.ms`; returns how many."""
        deadline = time.monotonic() - self.idle_s
        idle: list[Connection] = [
            c for listener in listeners for c in listener.connections if c.last_active < deadline
        ]
        for connection in idle:
            log.info(
                "event=connection_idle_closed listener=%s peer=%s idle_ms=%d",
                connection.listener.name,
                connection.peer,
                self.idle_s * 1000,
            )
            connection.close()
        return len(idle)
