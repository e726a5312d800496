"""Follower fetchers: copy the leader's log to this broker with the Fetch API, as any consumer would.

One fetcher per leader broker. It first truncates each new partition to where its history and the
leader's agree (OffsetForLeaderEpoch, KIP-101/279: never to the high watermark blindly), then fetches from
its log end offset in a loop (long-polling `replica.fetch.wait.max.ms` on the leader), appends what comes
back as it is, and takes the leader's high watermark and log start offset. The offsets it fetches at are
how the leader learns what this follower holds. The fetches run in an incremental fetch session (KIP-227):
each names only the partitions that moved, each answer only the partitions with news.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from backbone.broker.partition import Partition
from backbone.log.append import UnexpectedAppendOffsetError
from backbone.protocol.api import ApiKey
from backbone.protocol.errors import KafkaError, error_for
from backbone.wire.connection import BrokerConnection
from backbone.wire.errors import KafkaClientError
from backbone.wire.fetch import (
    FetchedPartition,
    FetchRequestPartition,
    decode_fetch_response,
    encode_fetch_request,
)
from backbone.wire.fetch_session import FetchSessionBuilder
from backbone.wire.messages import group_by_topic
from backbone.wire.security import ClientSecurity

log = logging.getLogger(__name__)

# Errors a new leader epoch or a metadata update resolves within moments: retry soon, not after a backoff.
_TRANSIENT = {
    ErrorCode.not_leader_or_follower,
    ErrorCode.unknown_leader_epoch,
    ErrorCode.fenced_leader_epoch,
    ErrorCode.unknown_topic_or_partition,
    ErrorCode.leader_not_available,
}
_TRANSIENT_BACKOFF_S = 0.05
EARLIEST = -2
LATEST = -1  # asked with our replica id, the leader answers its log end offset, not its high watermark


@dataclass
class FetcherSettings:
    broker_id: int
    listener: str
    wait_max_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 10 * 1024 * 1024
    partition_max_bytes: int = 1024 * 1024
    backoff_ms: int = 1000
    socket_timeout_ms: int = 30000
    security: ClientSecurity | None = None  # the inter-broker listener's TLS and SASL


@dataclass
class _Followed:
    partition: Partition
    leader_epoch: int
    truncated: bool = False  # has it been truncated to the leader's history in this epoch?
    out_of_range: bool = False  # the leader refused our fetch offset: reset from the leader's offsets
    retry_at: float = 0.0


class ReplicaFetcher:
    """Fetches every partition this broker follows from one leader."""

    def __init__(
        self,
        leader_id: int,
        settings: FetcherSettings,
        endpoint: Callable[[int], tuple[str, int] | None],
    ) -> None:
        self.leader_id = leader_id
        self.settings = settings
        self._endpoint = endpoint
        self.partitions: dict[tuple[str, int], _Followed] = {}
        self._changed = asyncio.Event()
        self._connection: BrokerConnection | None = None
        self._session: FetchSessionBuilder[tuple[str, int]] = FetchSessionBuilder()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    def __repr__(self) -> str:
        return f"ReplicaFetcher(leader={self.leader_id}, partitions={len(self.partitions)})"

    # -- membership --------------------------------------------------------------------------------

    def add(self, partition: Partition, leader_epoch: int) -> None:
        key = (partition.topic, partition.index)
        current = self.partitions.get(key)
        if current is not None and current.leader_epoch == leader_epoch and current.partition is partition:
            return
        self.partitions[key] = _Followed(partition, leader_epoch)
        self._changed.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"replica-fetcher-{self.leader_id}"
            )

    def remove(self, key: tuple[str, int]) -> None:
        if self.partitions.pop(key, None) is not None:
            self._changed.set()

    async def stop(self) -> None:
        # The flag as well as the cancel: Python 3.11's wait_for can swallow a cancellation that arrives as
        # the awaited event fires (a partition removed just before the stop does exactly that).
        self._stopping = True
        self._changed.set()
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait({self._task})
            self._task = None
        if self._connection is not None:
            await self._connection.close()
            self._connection = None

    # -- the loop -----------------------------------------------------------------------------------

    async def _run(self) -> None:
        while not self._stopping:
            self._changed.clear()
            if not self.partitions:
                await self._changed.wait()
                continue
            try:
                connection = self._connect()
                if any(not f.truncated for f in self.partitions.values()):
                    await self._truncate(connection)
                await self._fetch(connection)
            except (KafkaClientError, KafkaError, OSError) as exc:
                log.info(
                    "event=replica_fetch_failed leader=%d partitions=%d error=%r",
                    self.leader_id,
                    len(self.partitions),
                    str(exc),
                )
                await self._drop_connection()
                await self._sleep(self.settings.backoff_ms / 1000)
            except Exception:
                log.exception("event=replica_fetcher_error leader=%d", self.leader_id)
                await self._drop_connection()
                await self._sleep(self.settings.backoff_ms / 1000)

    async def _sleep(self, seconds: float) -> None:
        """Sleep, but wake early when the followed partitions change (a new epoch to truncate to)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), seconds)

    def _connect(self) -> BrokerConnection:
        if self._connection is not None and not self._connection.is_closed:
            return self._connection
        address = self._endpoint(self.leader_id)
        if address is None:
            raise KafkaClientError(
                f"leader {self.leader_id} has no {self.settings.listener} endpoint registered (not live?)"
            )
        self._connection = BrokerConnection(
            address[0],
            address[1],
            self.leader_id,
            client_id=f"broker-{self.settings.broker_id}-replica-fetcher",
            request_timeout_ms=self.settings.socket_timeout_ms + self.settings.wait_max_ms,
            connect_timeout_ms=min(self.settings.socket_timeout_ms, 10_000),
            max_in_flight=1,
            security=self.settings.security,
        )
        return self._connection

    async def _drop_connection(self) -> None:
        self._session.failed()
        if self._connection is not None:
            await self._connection.close()
            self._connection = None

    def _ready(self) -> list[tuple[tuple[str, int], _Followed]]:
        now = asyncio.get_running_loop().time()
        return [(k, f) for k, f in self.partitions.items() if f.truncated and f.retry_at <= now]

    def _retry_later(self, followed: _Followed, seconds: float) -> None:
        followed.retry_at = asyncio.get_running_loop().time() + seconds

    # -- truncation -----------------------------------------------------------------------------------

    async def _truncate(self, connection: BrokerConnection) -> None:
        pending = {k: f for k, f in self.partitions.items() if not f.truncated}
        asked: dict[tuple[str, int], tuple[_Followed, int]] = {}
        for key, followed in pending.items():
            latest = followed.partition.log.leader_epoch_cache.latest_epoch
            if latest is None:
                followed.truncated = True  # nothing of any epoch here: nothing can diverge
            else:
                asked[key] = (followed, latest)
        if not asked:
            return
        rows = [
            (
                key,
                {"partition": key[1], "current_leader_epoch": f.leader_epoch, "leader_epoch": epoch},
            )
            for key, (f, epoch) in asked.items()
        ]
        response = await connection.request_kio(
            ApiKey.OFFSET_FOR_LEADER_EPOCH,
            replica_id=self.settings.broker_id,
            topics=group_by_topic(rows, "topic"),
        )
        for topic in response.topics:
            for answer in topic.partitions:
                key = (topic.topic, int(answer.partition))
                entry = asked.get(key)
                if entry is None or self.partitions.get(key) is not entry[0]:
                    continue  # no longer followed from here, or a newer epoch came meanwhile
                followed, epoch = entry
                if answer.error_code != ErrorCode.none:
                    self._partition_error(followed, ErrorCode(answer.error_code), "OffsetForLeaderEpoch")
                    continue
                self._truncate_partition(followed, epoch, int(answer.leader_epoch), int(answer.end_offset))

    def _truncate_partition(self, followed: _Followed, asked_epoch: int, epoch: int, end_offset: int) -> None:
        partition = followed.partition
        hosted = partition.log
        if epoch < 0 or end_offset < 0:
            # The leader knows nothing that old: fall back to the high watermark, the last known-safe point.
            target = hosted.high_watermark
        elif epoch == asked_epoch:
            target = end_offset
        else:
            # The leader's history for our latest epoch ended earlier; ours for the epoch it names ends at
            # the start of our next epoch. Both agree up to the smaller one (KIP-279).
            _, own_end = hosted.end_offset_for_epoch(epoch)
            target = min(end_offset, own_end) if own_end >= 0 else end_offset
        target = min(target, hosted.log_end_offset)
        if target < hosted.log_end_offset:
            log.info(
                "event=follower_truncating partition=%s-%d leader=%d leader_epoch=%d from=%d to=%d",
                partition.topic,
                partition.index,
                self.leader_id,
                followed.leader_epoch,
                hosted.log_end_offset,
                target,
            )
            partition.truncate_to(target)
        followed.truncated = True

    # -- fetching ------------------------------------------------------------------------------------

    async def _fetch(self, connection: BrokerConnection) -> None:
        ready = self._ready()
        if not ready:
            waits = [f.retry_at for f in self.partitions.values() if f.truncated]
            delay = max(0.0, min(waits) - asyncio.get_running_loop().time()) if waits else 1.0
            await self._sleep(delay)
            return
        settings = self.settings
        sent = {key: (f, f.partition.log.log_end_offset) for key, f in ready}
        wanted = {
            key: FetchRequestPartition(
                key[1],
                offset,
                settings.partition_max_bytes,
                f.leader_epoch,
                f.partition.log.log_start_offset,
            )
            for key, (f, offset) in sent.items()
        }
        # In a fetch session only the partitions whose row moved are named; the leader still reads them all.
        session_id, epoch, rows, forgotten = self._session.next_request(wanted)
        response = await connection.request(
            ApiKey.FETCH,
            functools.partial(
                encode_fetch_request,
                replica_id=settings.broker_id,
                max_wait_ms=settings.wait_max_ms,
                min_bytes=settings.min_bytes,
                max_bytes=settings.max_bytes,
                isolation_level=0,
                partitions=rows,
                session_id=session_id,
                session_epoch=epoch,
                forgotten=forgotten,
            ),
            decode_fetch_response,
        )
        if response.error_code:
            error = error_for(response.error_code, f"Fetch from leader {self.leader_id}")
            if self._session.failed(error):
                return  # evicted, or the leader restarted: the next fetch opens a new session
            raise error
        self._session.answered(response.session_id)
        for topic, answers in response.topics:
            for answer in answers:
                key = (topic, answer.partition)
                entry = sent.get(key)
                if entry is None or self.partitions.get(key) is not entry[0]:
                    continue  # no longer followed from here (a new epoch or leader came meanwhile)
                self._take(entry[0], entry[1], answer)
        out_of_range = {k: f for k, (f, _) in sent.items() if f.out_of_range and self.partitions.get(k) is f}
        if out_of_range:
            await self._reset_out_of_range(connection, out_of_range)

    async def _reset_out_of_range(self, connection: BrokerConnection, followed: dict[Any, _Followed]) -> None:
        """Our log end is past the leader's (after an unclean election) or below its log start (retention or
        DeleteRecords while we were away): move ours to match, from the leader's own offsets."""
        earliest = await self._list_offsets(connection, followed, EARLIEST)
        latest = await self._list_offsets(connection, followed, LATEST)
        for key, entry in followed.items():
            entry.out_of_range = False
            if key not in earliest or key not in latest or self.partitions.get(key) is not entry:
                self._retry_later(entry, self.settings.backoff_ms / 1000)
                continue
            partition, hosted = entry.partition, entry.partition.log
            if hosted.log_end_offset > latest[key]:
                log.warning(
                    "event=follower_truncating partition=%s-%d leader=%d from=%d to=%d reason=ahead",
                    partition.topic,
                    partition.index,
                    self.leader_id,
                    hosted.log_end_offset,
                    latest[key],
                )
                partition.truncate_to(latest[key])
            elif hosted.log_end_offset < earliest[key]:
                log.info(
                    "event=follower_restarting_log partition=%s-%d leader=%d log_start_offset=%d",
                    partition.topic,
                    partition.index,
                    self.leader_id,
                    earliest[key],
                )
                partition.restart_log_at(earliest[key])

    async def _list_offsets(
        self, connection: BrokerConnection, followed: dict[Any, _Followed], timestamp: int
    ) -> dict[tuple[str, int], int]:
        rows = (
            (
                key,
                {
                    "partition_index": key[1],
                    "current_leader_epoch": f.leader_epoch,
                    "timestamp": timestamp,
                },
            )
            for key, f in followed.items()
        )
        response = await connection.request_kio(
            ApiKey.LIST_OFFSETS,
            replica_id=self.settings.broker_id,
            isolation_level=0,
            topics=group_by_topic(rows),
        )
        found = {}
        for topic in response.topics:
            for answer in topic.partitions:
                if answer.error_code == ErrorCode.none:
                    found[(topic.name, int(answer.partition_index))] = int(answer.offset)
        return found

    def _take(self, followed: _Followed, fetch_offset: int, answer: FetchedPartition) -> None:
        partition = followed.partition
        code = ErrorCode(answer.error_code)
        if code != ErrorCode.none:
            self._partition_error(followed, code, "Fetch")
            return
        hosted = partition.log
        if answer.records:
            if hosted.log_end_offset != fetch_offset:
                return  # truncated meanwhile: the next fetch starts from the new end
            try:
                partition.append_as_follower(memoryview(answer.records))
            except UnexpectedAppendOffsetError as exc:
                log.warning(
                    "event=follower_append_rejected partition=%s-%d error=%r",
                    partition.topic,
                    partition.index,
                    str(exc),
                )
                followed.truncated = False
                return
        hosted.high_watermark = min(answer.high_watermark, hosted.log_end_offset)
        if answer.log_start_offset > hosted.log_start_offset:
            with contextlib.suppress(KafkaError):
                hosted.increment_log_start_offset(min(answer.log_start_offset, hosted.high_watermark))

    def _partition_error(self, followed: _Followed, code: ErrorCode, request: str) -> None:
        partition = followed.partition
        if code == ErrorCode.offset_out_of_range:
            followed.out_of_range = True
            return
        backoff = _TRANSIENT_BACKOFF_S if code in _TRANSIENT else self.settings.backoff_ms / 1000
        log.info(
            "event=replica_fetch_partition_error partition=%s-%d leader=%d request=%s error=%s",
            partition.topic,
            partition.index,
            self.leader_id,
            request,
            code.name,
        )
        self._retry_later(followed, backoff)


class ReplicaFetchers:
    """This broker's fetchers, one per leader it follows partitions from."""

    def __init__(self, settings: FetcherSettings, endpoint: Callable[[int], tuple[str, int] | None]) -> None:
        self.settings = settings
        self._endpoint = endpoint
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._following: dict[tuple[str, int], int] = {}  # partition -> leader fetched from
        self._stopping: set[asyncio.Task[None]] = set()

    def follow(self, partition: Partition, leader_id: int, leader_epoch: int) -> None:
        """Fetch `partition` from `leader_id` in `leader_epoch` (truncating first when the epoch is new)."""
        key = (partition.topic, partition.index)
        previous = self._following.get(key)
        if previous is not None and previous != leader_id:
            self.fetchers[previous].remove(key)
            self._stop_if_idle(previous)
        fetcher = self.fetchers.get(leader_id)
        if fetcher is None:
            fetcher = self.fetchers[leader_id] = ReplicaFetcher(leader_id, self.settings, self._endpoint)
        fetcher.add(partition, leader_epoch)
        self._following[key] = leader_id

    def unfollow(self, key: tuple[str, int]) -> None:
        leader_id = self._following.pop(key, None)
        if leader_id is not None:
            self.fetchers[leader_id].remove(key)
            self._stop_if_idle(leader_id)

    def _stop_if_idle(self, leader_id: int) -> None:
        """A fetcher left with no partitions (its broker leads nothing we follow) stops and disconnects."""
        fetcher = self.fetchers[leader_id]
        if fetcher.partitions:
            return
        del self.fetchers[leader_id]
        task = asyncio.get_running_loop().create_task(fetcher.stop())
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    async def stop(self) -> None:
        fetchers, self.fetchers = list(self.fetchers.values()), {}
        self._following.clear()
        await asyncio.gather(*(f.stop() for f in fetchers), *self._stopping)
