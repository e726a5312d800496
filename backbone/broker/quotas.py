"""Client quotas, enforced as Kafka enforces them: `producer_byte_rate` (bytes of Produce requests),
`consumer_byte_rate` (bytes of Fetch answers) and `request_percentage` (time the broker spends on a client's
requests, in percent of one request thread), per user, per client id, or per (user, client id).

The broker keeps every quota config entity in memory (`QuotaBook`, loaded at start and updated from the
/config/changes notifications). For each request the quota that applies is the first one set, in Kafka's
order, of

    /config/users/<user>/clients/<client-id>      /config/users/<user>/clients/<default>
    /config/users/<user>                          /config/users/<default>/clients/<client-id>
    /config/users/<default>/clients/<default>     /config/users/<default>
    /config/clients/<client-id>                   /config/clients/<default>

(read row by row), each quota key on its own. The entity that matched says who shares the measured rate:
a user-level quota is shared by all of that user's client ids, a default entity gives each user (or client
id) a rate of its own. A request that takes a rate above its bound is answered at once with
`throttle_time_ms`, and the broker then reads nothing more from that connection until the time is over
(KIP-219); a throttled Fetch is answered without records, which are not counted.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from backbone.broker.quota_rates import Rate, throttle_time_ms
from backbone.coordination.quotas import CLIENT_ID, USER, QuotaEntity
from backbone.properties import Property

if TYPE_CHECKING:
    from backbone.broker.network import RequestContext

__all__ = ["QUOTA_PROPERTIES", "QuotaBook", "QuotaManager"]

log = logging.getLogger(__name__)

PRODUCE = "producer_byte_rate"
FETCH = "consumer_byte_rate"
REQUEST = "request_percentage"
QUOTA_TYPES = (PRODUCE, FETCH, REQUEST)

QUOTA_PROPERTIES: dict[str, Property] = {
    p.name: p
    for p in (
        Property("quota.window.num", int, 11, "samples a client quota's rate is measured over", minimum=1),
        Property(
            "quota.window.size.seconds", int, 1, "length of each sample of a client quota's rate", minimum=1
        ),
    )
}

# How many rates may go unused before the idle ones are forgotten (each new client id makes one).
_SWEEP_EVERY = 4096

Share = tuple[str, str]
"""Whose rate a quota measures: (user or "", client id or "")."""


class QuotaBook:
    """The quota config entities, and which one applies to a (user, client id)."""

    def __init__(self) -> None:
        self.entities: dict[QuotaEntity, dict[str, float]] = {}

    def replace(self, entities: Mapping[QuotaEntity, Mapping[str, float]]) -> None:
        self.entities = {entity: dict(values) for entity, values in entities.items() if values}

    def update(self, entity: QuotaEntity, values: Mapping[str, float]) -> None:
        if values:
            self.entities[entity] = dict(values)
        else:
            self.entities.pop(entity, None)

    def resolve(self, key: str, user: str, client_id: str) -> tuple[float, Share] | None:
        """The bound of quota `key` for this user and client id, and whose rate it measures; None when no
        entity sets it."""
        if not self.entities:
            return None
        for entity, share in (
            (((USER, user), (CLIENT_ID, client_id)), (user, client_id)),
            (((USER, user), (CLIENT_ID, None)), (user, client_id)),
            (((USER, user),), (user, "")),
            (((USER, None), (CLIENT_ID, client_id)), (user, client_id)),
            (((USER, None), (CLIENT_ID, None)), (user, client_id)),
            (((USER, None),), (user, "")),
            (((CLIENT_ID, client_id),), ("", client_id)),
            (((CLIENT_ID, None),), ("", client_id)),
        ):
            values = self.entities.get(entity)
            if values is not None and key in values:
                return values[key], share
        return None


class QuotaManager:
    """The broker's measured rates and the throttling they call for; counts what it throttled."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        self.book = QuotaBook()
        self.samples: int = values["quota.window.num"]
        self.window_ms: float = values["quota.window.size.seconds"] * 1000.0
        self._rates: dict[tuple[str, Share], Rate] = {}
        self._recorded = 0
        self.throttled: dict[str, int] = dict.fromkeys(QUOTA_TYPES, 0)
        self.throttle_ms_total: dict[str, int] = dict.fromkeys(QUOTA_TYPES, 0)

    @property
    def active(self) -> bool:
        return bool(self.book.entities)

    def rate_count(self) -> int:
        return len(self._rates)

    def record(self, key: str, user: str, client_id: str, value: float, now_ms: float | None = None) -> int:
        """Record `value` against quota `key`; the throttle time it calls for, in ms (0: within quota)."""
        found = self.book.resolve(key, user, client_id)
        if found is None:
            return 0
        bound, share = found
        now = time.monotonic() * 1000 if now_ms is None else now_ms
        rate = self._rates.get((key, share))
        if rate is None:
            self._maybe_sweep(now)
            rate = self._rates[(key, share)] = Rate(self.samples, self.window_ms)
        rate.record(value, now)
        span = rate.span_ms(now)
        throttle = throttle_time_ms(rate.measure(now), bound, span)
        if key == REQUEST:
            throttle = min(throttle, int(self.window_ms))  # as Kafka bounds request-time throttling
        if throttle > 0:
            self.throttled[key] += 1
            self.throttle_ms_total[key] += throttle
            log.debug(
                "event=quota_throttled quota=%s user=%s client_id=%s throttle_ms=%d",
                key,
                user,
                client_id,
                throttle,
            )
        return throttle

    def unrecord(
        self, key: str, user: str, client_id: str, value: float, now_ms: float | None = None
    ) -> None:
        """Take back a recorded value (a throttled Fetch's records were not sent)."""
        found = self.book.resolve(key, user, client_id)
        rate = self._rates.get((key, found[1])) if found is not None else None
        if rate is not None:
            rate.record(-value, time.monotonic() * 1000 if now_ms is None else now_ms)

    def max_value_in_window(self, key: str, user: str, client_id: str) -> float | None:
        """The most a quota allows over its windows (a Fetch never asks for more), None without a quota."""
        found = self.book.resolve(key, user, client_id)
        if found is None:
            return None
        return found[0] * (self.samples - 1) * self.window_ms / 1000

    def _maybe_sweep(self, now_ms: float) -> None:
        self._recorded += 1
        if self._recorded % _SWEEP_EVERY == 0:
            for share in [share for share, rate in self._rates.items() if rate.idle(now_ms)]:
                del self._rates[share]


# -- per request ----------------------------------------------------------------------------------


def quotas_of(context: RequestContext) -> QuotaManager | None:
    quotas: QuotaManager | None = context.connection.listener.quotas
    return quotas if quotas is not None and quotas.active else None


def _who(context: RequestContext) -> tuple[str, str]:
    return context.connection.principal.name, context.header.client_id or ""


def charge_request_time(quotas: QuotaManager, context: RequestContext) -> int:
    """Record the time the broker spent on this request so far (not waits for data or other brokers), in
    percent-seconds; the request-time throttle it calls for."""
    spent_s = max(time.monotonic() - context.started - context.remote_wait_s, 0.0)
    return quotas.record(REQUEST, *_who(context), spent_s * 100)


def charge_produce(context: RequestContext) -> int:
    """A Produce request's throttle time: its bytes against `producer_byte_rate`, its time against
    `request_percentage`. Sets the request's throttle (the connection layer mutes after the answer)."""
    quotas = quotas_of(context)
    if quotas is None:
        context.throttle_ms = 0
        return 0
    throttle = max(
        quotas.record(PRODUCE, *_who(context), context.frame.nbytes), charge_request_time(quotas, context)
    )
    context.throttle_ms = throttle
    return throttle


def fetch_byte_limit(context: RequestContext, max_bytes: int) -> int:
    """A consumer's Fetch asks for no more than its quota allows over the windows."""
    quotas = quotas_of(context)
    most = quotas.max_value_in_window(FETCH, *_who(context)) if quotas is not None else None
    return max_bytes if most is None else min(max_bytes, max(int(most), 1))


def charge_fetch(context: RequestContext, response_bytes: int) -> int:
    """A consumer's Fetch answer of `response_bytes`: the throttle time, when it is above 0 the answer goes
    without records and their bytes are taken back, as Kafka does."""
    quotas = quotas_of(context)
    if quotas is None:
        context.throttle_ms = 0
        return 0
    user, client_id = _who(context)
    bandwidth = quotas.record(FETCH, user, client_id, response_bytes)
    throttle = max(bandwidth, charge_request_time(quotas, context))
    if throttle > 0:
        quotas.unrecord(FETCH, user, client_id, response_bytes)
    context.throttle_ms = throttle
    return throttle
