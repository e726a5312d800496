"""Webhook notices: a group's status change and a cluster's health change are POSTed as JSON, retried after a
failure, and the waiting queue is bounded."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from backbone.console import notify
from backbone.console.burrow import OK_VERDICT, Verdict
from backbone.console.snapshot import BrokerState, ClusterSnapshot, GroupState

pytestmark = pytest.mark.unit


def snapshot(status: Verdict, broker_up: bool) -> ClusterSnapshot:
    group = GroupState("etl", "Empty", "", [], [], status)
    broker = BrokerState(1, "127.0.0.1", 9092, None, up=broker_up, down_since_ms=None if broker_up else 1)
    return ClusterSnapshot("dc1", "datacenter", taken_ms=1, brokers={1: broker}, groups={"etl": group})


async def test_status_changes_are_posted_and_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(notify, "FIRST_BACKOFF_S", 0.01)
    received: list[dict] = []
    failures = {"left": 1}

    async def hook(request: web.Request) -> web.Response:
        if failures["left"]:
            failures["left"] -= 1
            return web.Response(status=503)
        received.append(await request.json())
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", hook)
    async with TestServer(app) as server:
        notifier = notify.Notifier((str(server.make_url("/hook")),))
        await notifier.start()
        try:
            stopped = Verdict("ERR", "STOP", "t partition 0: offset 5 has not moved for 10 samples")
            await notifier.on_snapshot(snapshot(OK_VERDICT, True), snapshot(OK_VERDICT, True))  # no change
            await notifier.on_snapshot(snapshot(stopped, False), snapshot(OK_VERDICT, True))
            async with asyncio.timeout(10):
                while len(received) < 2:
                    await asyncio.sleep(0.01)
        finally:
            await notifier.close()
    group, cluster = received
    assert (group["kind"], group["group"], group["previous"], group["status"]) == (
        "group",
        "etl",
        "OK",
        "ERR",
    )
    assert group["rule"] == "t partition 0: offset 5 has not moved for 10 samples"
    assert (cluster["kind"], cluster["previous"], cluster["status"]) == ("cluster", "OK", "ERR")
    assert any("broker 1 down" in line for line in cluster["problems"])
    assert (notifier.sent, notifier.failed) == (2, 0)


async def test_an_unreachable_hook_gives_up_after_its_attempts_and_the_queue_is_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(notify, "FIRST_BACKOFF_S", 0.01)
    notifier = notify.Notifier(("http://127.0.0.1:1/hook",))
    for i in range(notify.QUEUE_LIMIT + 5):
        notifier._queue({"kind": "group", "n": i})
    assert len(notifier.queue) == notify.QUEUE_LIMIT and notifier.queue[0]["n"] == 5
    notifier.queue.clear()
    await notifier.start()
    try:
        notifier._queue({"kind": "group", "n": 0})
        async with asyncio.timeout(10):
            while not notifier.failed:
                await asyncio.sleep(0.01)
    finally:
        await notifier.close()
    assert (notifier.sent, notifier.failed) == (0, 1)
