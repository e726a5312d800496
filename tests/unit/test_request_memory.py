"""The broker-wide budget of request bytes (`queued.max.request.bytes`, request_memory.py): many clients
pipelining large and small requests at a listener whose handler holds them hold no more than the bound,
the connections wait instead, and every request is still answered once the handler lets them go."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator

import pytest

from backbone.broker.request_memory import RequestMemory, check_budget
from backbone.properties import ConfigError
from backbone.protocol.framing import STREAM_BYTES
from tests.unit.test_broker_network import MAX_REQUEST_BYTES, EchoListener, answers, request, wait_until

pytestmark = pytest.mark.unit

CLIENTS = 16
BUDGET = MAX_REQUEST_BYTES  # the least Kafka accepts: one request of the largest size


def bodies_of(client: int) -> list[bytes]:
    rng = random.Random(client)
    # Large requests (each reserves its size as it begins) and small ones (charged when complete).
    return [rng.randbytes(rng.choice((1024 * 1024, 3 * 1024 * 1024 + 7, 200, 40_000))) for _ in range(8)]


async def client(port: int, index: int) -> list[tuple[int, bytes]]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    bodies = bodies_of(index)
    writer.write(b"".join(request(i, body) for i, body in enumerate(bodies)))
    got = await answers(reader, len(bodies))
    writer.close()
    return got


@pytest.fixture
async def listener() -> AsyncIterator[EchoListener]:
    """An echo listener with a request memory of BUDGET bytes, its handler holding requests until the test
    opens its gate."""
    served = EchoListener()
    served.memory = RequestMemory(BUDGET)
    served.gate.clear()
    await served.start()
    await served.start_serving()
    yield served
    served.gate.set()
    await served.stop()


async def test_many_clients_with_large_requests_hold_at_most_the_budget_and_all_are_answered(
    listener: EchoListener,
) -> None:
    memory = listener.memory
    assert memory is not None
    # The handler holds every request: they pile up as fast as they are read.
    clients = [asyncio.create_task(client(listener.port, i)) for i in range(CLIENTS)]
    await wait_until(lambda: len(memory.waiting) >= CLIENTS // 2, "connections to wait for the budget")
    offered = sum(len(body) for i in range(CLIENTS) for body in bodies_of(i))
    bound = BUDGET + MAX_REQUEST_BYTES + CLIENTS * STREAM_BYTES
    assert memory.spent and memory.used <= bound < offered / 4, (memory.used, bound, offered)
    assert all(not c.transport.is_reading() for c in memory.waiting)  # type: ignore[union-attr]
    listener.gate.set()
    results = await asyncio.wait_for(asyncio.gather(*clients), timeout=120)
    for index, got in enumerate(results):
        assert got == list(enumerate(bodies_of(index)))
    assert memory.peak <= bound, (memory.peak, bound)
    await wait_until(lambda: memory.used == 0, "every byte to be released")


async def test_a_closed_connection_gives_back_what_it_held(listener: EchoListener) -> None:
    memory = listener.memory
    assert memory is not None
    _, writer = await asyncio.open_connection("127.0.0.1", listener.port)
    # Two whole requests and the start of a third, large one (its size reserved as it begins).
    writer.write(request(1, b"x" * 100) + request(2, b"y" * 2_000_000) + request(3, b"z" * 3_000_000)[:9000])
    await wait_until(lambda: memory.used >= 5_000_000, "the requests and the reservation")
    writer.close()
    await wait_until(lambda: not listener.connections, "the connection to go")
    assert memory.used == 0 and not memory.waiting


def test_a_budget_smaller_than_one_request_is_refused() -> None:
    check_budget(-1, MAX_REQUEST_BYTES)
    check_budget(MAX_REQUEST_BYTES, MAX_REQUEST_BYTES)
    with pytest.raises(ConfigError, match=r"queued\.max\.request\.bytes .* socket\.request\.max\.bytes"):
        check_budget(MAX_REQUEST_BYTES - 1, MAX_REQUEST_BYTES)
