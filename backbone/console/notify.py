"""Webhook notifications, as Burrow's HTTP notifier: when a group's status or a cluster's health changes,
POST a JSON body to every configured URL, retried with backoff a bounded number of times from a bounded
queue (when the queue is full the oldest notice is dropped, and that is logged)."""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from typing import Any

import aiohttp

from backbone.console.problems import problems
from backbone.console.snapshot import ClusterSnapshot

log = logging.getLogger(__name__)

QUEUE_LIMIT = 1000
ATTEMPTS = 4
FIRST_BACKOFF_S = 0.5
TIMEOUT_S = 5.0


def _health(snapshot: ClusterSnapshot) -> str:
    found = problems(snapshot)
    return "ERR" if any(p.severity == "ERR" for p in found) else "WARN" if found else "OK"


class Notifier:
    def __init__(self, urls: tuple[str, ...]) -> None:
        self.urls = urls
        self.queue: collections.deque[dict[str, Any]] = collections.deque(maxlen=QUEUE_LIMIT)
        self.ready = asyncio.Event()
        self.sent = 0
        self.failed = 0
        self._task: asyncio.Task | None = None
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        if self.urls:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT_S))
            self._task = asyncio.create_task(self._deliver(), name="webhooks")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._session is not None:
            await self._session.close()

    async def on_snapshot(self, snapshot: ClusterSnapshot, previous: ClusterSnapshot | None) -> None:
        """Queue a notice for each group whose status changed and for the cluster when its health did."""
        if not self.urls or previous is None or not previous.taken_ms:
            return
        now = int(time.time() * 1000)
        for group in snapshot.groups.values():
            before = previous.groups.get(group.group_id)
            if before is not None and before.verdict.status != group.verdict.status:
                self._queue(
                    {
                        "kind": "group",
                        "cluster": snapshot.name,
                        "group": group.group_id,
                        "time_ms": now,
                        "status": group.verdict.status,
                        "previous": before.verdict.status,
                        "condition": group.verdict.condition,
                        "rule": group.verdict.rule,
                        "total_lag": group.total_lag,
                    }
                )
        health, health_before = _health(snapshot), _health(previous)
        if health != health_before:
            self._queue(
                {
                    "kind": "cluster",
                    "cluster": snapshot.name,
                    "time_ms": now,
                    "status": health,
                    "previous": health_before,
                    "problems": [p.text for p in problems(snapshot)],
                }
            )

    def _queue(self, notice: dict[str, Any]) -> None:
        if len(self.queue) == self.queue.maxlen:
            log.warning("event=webhook_dropped reason=queue_full kind=%s", self.queue[0]["kind"])
        self.queue.append(notice)
        self.ready.set()

    async def _deliver(self) -> None:
        while True:
            await self.ready.wait()
            while self.queue:
                notice = self.queue.popleft()
                for url in self.urls:
                    await self._post(url, notice)
            self.ready.clear()

    async def _post(self, url: str, notice: dict[str, Any]) -> None:
        assert self._session is not None
        for attempt in range(1, ATTEMPTS + 1):
            try:
                async with self._session.post(url, json=notice) as response:
                    if response.status < 300:
                        self.sent += 1
                        return
                    reason = f"HTTP {response.status}"
            except (aiohttp.ClientError, TimeoutError) as error:
                reason = str(error) or type(error).__name__
            log.warning("event=webhook_failed url=%s attempt=%d reason=%s", url, attempt, reason)
            if attempt < ATTEMPTS:
                await asyncio.sleep(FIRST_BACKOFF_S * 2 ** (attempt - 1))
        self.failed += 1
