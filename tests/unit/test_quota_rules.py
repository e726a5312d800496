"""Client quotas: the rate arithmetic of Kafka's sampled windows, the throttle time, Kafka's precedence of
quota entities, the validation of quota entities, keys and describe filters, and a throttled connection
being muted (nothing read until the throttle time is over) after its answer is sent."""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time
from collections.abc import AsyncIterator
from types import SimpleNamespace

import pytest

from backbone.broker import network
from backbone.broker.config import Endpoint
from backbone.broker.handlers.client_quotas import matches, parse_filter
from backbone.broker.network import Listener, RegionSender, RequestContext
from backbone.broker.quota_rates import Rate, throttle_time_ms
from backbone.broker.quotas import FETCH, PRODUCE, REQUEST, QuotaBook, QuotaManager
from backbone.coordination import paths
from backbone.coordination.quotas import (
    check_quota_value,
    entity_node,
    make_quota_entity,
    parse_entity_node,
    quota_values,
)
from backbone.protocol.api import ApiKey, ApiTable
from backbone.protocol.errors import InvalidRequestError
from backbone.protocol.framing import encode_frame, read_frame
from backbone.protocol.headers import encode_request_header

pytestmark = pytest.mark.unit

SAMPLES, WINDOW_MS = 11, 1000.0


# -- rates ----------------------------------------------------------------------------------------


def test_a_young_rate_spans_at_least_all_windows_but_one() -> None:
    rate = Rate(SAMPLES, WINDOW_MS)
    rate.record(2000, now_ms=0)
    assert rate.span_ms(0) == 10_000
    assert rate.measure(0) == pytest.approx(200.0)
    rate.record(1000, now_ms=500)  # same sample
    assert rate.measure(500) == pytest.approx(3000 / 10.5)


def test_an_old_rate_spans_the_time_since_its_oldest_sample() -> None:
    rate = Rate(SAMPLES, WINDOW_MS)
    for second in range(11):
        rate.record(100, now_ms=second * 1000)
    # 11 samples from 0 to 10 s; at 10.5 s they span 10.5 s.
    assert rate.span_ms(10_500) == pytest.approx(10_500)
    assert rate.measure(10_500) == pytest.approx(1100 / 10.5)


def test_samples_older_than_all_windows_count_for_nothing() -> None:
    rate = Rate(SAMPLES, WINDOW_MS)
    rate.record(5000, now_ms=0)
    assert rate.measure(10_999) > 0
    assert rate.measure(11_000) == 0
    assert rate.idle(11_000) and not rate.idle(10_000)


def test_samples_are_reused_in_a_ring() -> None:
    rate = Rate(3, WINDOW_MS)
    for second in range(10):
        rate.record(10, now_ms=second * 1000)
    assert len(rate._samples) == 3
    assert rate.measure(9000) == pytest.approx(30 / 2)  # samples at 7, 8, 9 s; span 2 s


def test_throttle_time_is_the_excess_over_the_bound_times_the_span() -> None:
    assert throttle_time_ms(100, 100, 10_000) == 0
    assert throttle_time_ms(50, 100, 10_000) == 0
    assert throttle_time_ms(200, 100, 10_000) == 10_000
    assert throttle_time_ms(110, 100, 10_000) == 1_000


# -- precedence -----------------------------------------------------------------------------------

U, C = "user", "client-id"
ORDER = [
    (((U, "alice"), (C, "app")), ("alice", "app")),
    (((U, "alice"), (C, None)), ("alice", "app")),
    (((U, "alice"),), ("alice", "")),
    (((U, None), (C, "app")), ("alice", "app")),
    (((U, None), (C, None)), ("alice", "app")),
    (((U, None),), ("alice", "")),
    (((C, "app"),), ("", "app")),
    (((C, None),), ("", "app")),
]


def test_quota_entities_apply_in_kafkas_order() -> None:
    book = QuotaBook()
    book.replace({entity: {PRODUCE: float(rank + 1)} for rank, (entity, _) in enumerate(ORDER)})
    for rank, (entity, share) in enumerate(ORDER):
        assert book.resolve(PRODUCE, "alice", "app") == (float(rank + 1), share), entity
        book.update(entity, {})
    assert book.resolve(PRODUCE, "alice", "app") is None


def test_each_quota_key_is_resolved_on_its_own() -> None:
    book = QuotaBook()
    book.replace({((U, "alice"),): {PRODUCE: 10.0}, ((C, None),): {FETCH: 20.0, PRODUCE: 99.0}})
    assert book.resolve(PRODUCE, "alice", "app") == (10.0, ("alice", ""))
    assert book.resolve(FETCH, "alice", "app") == (20.0, ("", "app"))
    assert book.resolve(REQUEST, "alice", "app") is None
    assert book.resolve(PRODUCE, "bob", "app") == (99.0, ("", "app"))


def test_entities_of_other_users_and_clients_do_not_apply() -> None:
    book = QuotaBook()
    book.replace({((U, "bob"),): {PRODUCE: 1.0}, ((U, "alice"), (C, "other")): {PRODUCE: 2.0}})
    assert book.resolve(PRODUCE, "alice", "app") is None


# -- the manager ----------------------------------------------------------------------------------


def manager(**entities: dict[str, float]) -> QuotaManager:
    quotas = QuotaManager({"quota.window.num": SAMPLES, "quota.window.size.seconds": 1})
    quotas.book.replace({((U, user),): values for user, values in entities.items()})
    return quotas


def test_a_user_level_quota_is_shared_by_its_client_ids() -> None:
    quotas = manager(alice={PRODUCE: 100.0})
    assert quotas.record(PRODUCE, "alice", "one", 500, now_ms=0) == 0  # 50 B/s over the 10 s minimum
    assert quotas.record(PRODUCE, "alice", "two", 500, now_ms=0) == 0  # 100 B/s: at the bound
    assert quotas.record(PRODUCE, "alice", "three", 1000, now_ms=0) == 10_000  # 200 B/s: 10 s to go
    assert quotas.record(PRODUCE, "bob", "one", 10**9, now_ms=0) == 0  # no quota for bob
    assert quotas.throttled[PRODUCE] == 1 and quotas.throttle_ms_total[PRODUCE] == 10_000
    assert quotas.rate_count() == 1


def test_request_time_throttling_is_bounded_by_one_window() -> None:
    quotas = manager(alice={REQUEST: 10.0})
    assert quotas.record(REQUEST, "alice", "c", 1000 * 100, now_ms=0) == 1000  # 1000 s of request time


def test_an_unrecorded_fetch_does_not_count() -> None:
    quotas = manager(alice={FETCH: 100.0})
    assert quotas.record(FETCH, "alice", "c", 3000, now_ms=0) > 0
    quotas.unrecord(FETCH, "alice", "c", 3000, now_ms=0)
    assert quotas.record(FETCH, "alice", "c", 1000, now_ms=1) == 0


def test_a_fetch_never_asks_for_more_than_its_windows_allow() -> None:
    quotas = manager(alice={FETCH: 100.0})
    assert quotas.max_value_in_window(FETCH, "alice", "c") == 1000.0
    assert quotas.max_value_in_window(FETCH, "bob", "c") is None


def test_idle_rates_are_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("backbone.broker.quotas._SWEEP_EVERY", 2)
    quotas = QuotaManager({"quota.window.num": SAMPLES, "quota.window.size.seconds": 1})
    quotas.book.replace({((C, None),): {PRODUCE: 100.0}})
    quotas.record(PRODUCE, "alice", "old", 1, now_ms=0)
    quotas.record(PRODUCE, "alice", "new", 1, now_ms=20_000)  # the second new rate sweeps
    assert quotas.rate_count() == 1


# -- entities, keys, filters ----------------------------------------------------------------------


def test_entities_are_checked_as_kafka_checks_them() -> None:
    assert make_quota_entity([(C, "app"), (U, "alice")]) == ((U, "alice"), (C, "app"))
    for components, message in (
        ([], "empty"),
        ([("ip", "1.2.3.4")], "Unhandled client quota entity type"),
        ([(U, "a"), (U, "b")], "Duplicate user"),
        ([(C, "")], "Empty client-id"),
    ):
        with pytest.raises(InvalidRequestError, match=message):
            make_quota_entity(components)


def test_quota_values_are_checked_by_their_type() -> None:
    assert check_quota_value("producer_byte_rate", 1024.0) == 1024.0
    assert check_quota_value("request_percentage", 12.5) == 12.5
    for key, value, message in (
        ("SCRAM-SHA-256", 1.0, "Invalid configuration key"),
        ("producer_byte_rate", 10.5, "must be a Long"),
        ("consumer_byte_rate", 0.0, "positive"),
        ("request_percentage", float("nan"), "positive"),
    ):
        with pytest.raises(InvalidRequestError, match=message):
            check_quota_value(key, value)


def test_entity_nodes_are_kafkas_sanitized_paths() -> None:
    entity = ((U, "CN=a b,O=x"), (C, None))
    assert entity_node(entity) == "users/CN%3Da%20b%2CO%3Dx/clients/<default>"
    assert parse_entity_node(entity_node(entity)) == entity
    assert entity_node(((C, "a*b~c"),)) == "clients/a%2Ab%7Ec"
    assert parse_entity_node("topics/x") is None
    assert paths.desanitize_entity_name(paths.sanitize_entity_name("é/../x")) == "é/../x"
    assert quota_values(
        {"producer_byte_rate": "100", "SCRAM-SHA-512": "salt=..", "request_percentage": "x"}
    ) == {"producer_byte_rate": 100.0}


def component(entity_type: str, match_type: int, match: str | None = None) -> SimpleNamespace:
    return SimpleNamespace(entity_type=entity_type, match_type=match_type, match=match)


def test_describe_filters_match_exact_default_and_any() -> None:
    alice_app = ((U, "alice"), (C, "app"))
    alice = ((U, "alice"),)
    default_user = ((U, None),)
    exact = parse_filter([component(U, 0, "alice")])
    assert matches(alice, exact, strict=False) and matches(alice_app, exact, strict=False)
    assert matches(alice, exact, strict=True) and not matches(alice_app, exact, strict=True)
    default = parse_filter([component(U, 1)])
    assert matches(default_user, default, strict=True) and not matches(alice, default, strict=True)
    anything = parse_filter([component(C, 2)])
    assert matches(alice_app, anything, strict=False) and not matches(alice, anything, strict=False)
    assert matches(alice, parse_filter([]), strict=False) and not matches(
        alice, parse_filter([]), strict=True
    )
    for components, message in (
        ([component("ip", 2)], "ip quotas"),
        ([component("group", 2)], "Unexpected quota entity type"),
        ([component(U, 2), component(U, 1)], "Duplicate"),
        ([component(U, 7)], "Unexpected match type"),
        ([component(U, 0)], "needs a name"),
    ):
        with pytest.raises(InvalidRequestError, match=message):
            parse_filter(components)


# -- muting ---------------------------------------------------------------------------------------

THROTTLE_MS = 300


def throttled_echo(throttle_ms: int) -> network.Handler:
    async def handle(context: RequestContext) -> list[bytes]:
        context.throttle_ms = throttle_ms
        return [bytes(context.frame[context.body_offset :])]

    return handle


@contextlib.asynccontextmanager
async def serving(throttle_ms: int = THROTTLE_MS) -> AsyncIterator[Listener]:
    table: ApiTable[network.Handler] = ApiTable()
    table.register(ApiKey.PRODUCE, throttled_echo(throttle_ms))
    listener = Listener(
        Endpoint("TEST", "127.0.0.1", 0, "PLAINTEXT"), table, RegionSender(), max_request_bytes=1 << 20
    )
    await listener.start()
    await listener.start_serving()
    try:
        yield listener
    finally:
        await listener.stop()


async def test_a_throttled_answer_is_sent_at_once_then_the_connection_is_not_read() -> None:
    async with serving() as listener:
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        try:
            writer.write(encode_frame(encode_request_header(ApiKey.PRODUCE, 3, 1, "t") + b"one"))
            first = await asyncio.wait_for(read_frame(reader, 1 << 20), 10)
            first_at = time.monotonic()
            assert struct.unpack_from(">i", first)[0] == 1
            (connection,) = listener.connections
            assert connection._reading_paused  # answered first, muted after
            writer.write(encode_frame(encode_request_header(ApiKey.PRODUCE, 3, 2, "t") + b"two"))
            second = await asyncio.wait_for(read_frame(reader, 1 << 20), 10)
            assert struct.unpack_from(">i", second)[0] == 2
            assert time.monotonic() - first_at >= THROTTLE_MS / 1000 * 0.95  # read only after the throttle
        finally:
            writer.close()


async def test_a_muted_connection_the_broker_closes_is_let_go_at_once() -> None:
    # A muted connection reads nothing, so (as in Kafka) it notices the client leaving only when unmuted or
    # closed by the broker: when idle too long (connections.max.idle.ms) or when the listener stops.
    async with serving(throttle_ms=600_000) as listener:
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        writer.write(encode_frame(encode_request_header(ApiKey.PRODUCE, 3, 1, "t") + b"one"))
        await asyncio.wait_for(read_frame(reader, 1 << 20), 10)
        (connection,) = listener.connections
        assert connection._task is not None and not connection._task.done()  # muted for ten minutes
        connection.close()
        await asyncio.wait_for(connection._task, 10)
        writer.close()
