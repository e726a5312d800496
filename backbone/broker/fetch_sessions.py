"""Incremental fetch sessions (KIP-227): a fetcher names only the partitions whose position changed, and the
answer carries only the partitions with something new.

A full fetch with epoch 0 opens a session holding each asked partition's position, and the answer names the
session's id. Each later fetch in it (epochs 1, 2, ...) names the partitions that are new or moved and the
ones to forget; the broker reads every partition in the session and answers those with records, an error,
or a high watermark or log start offset the fetcher has not been told. Epoch -1 asks for no session (and
closes the one named). A wrong epoch or an unknown id is a top-level INVALID_FETCH_SESSION_EPOCH or
FETCH_SESSION_ID_NOT_FOUND; the fetcher then starts over with a full fetch.

Sessions live in a cache of `max.incremental.fetch.session.cache.slots`. When it is full a new session takes
the slot of the least recently used one idle for `min.incremental.fetch.session.eviction.ms`, or else of the
smallest consumer session when the new one is a follower's or larger; otherwise it is answered without one.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from backbone.protocol.errors import FetchSessionIdNotFoundError, InvalidFetchSessionEpochError
from backbone.wire.chunks import chunk_length
from backbone.wire.fetch import FetchPartitionResult
from backbone.wire.fetch_session import FINAL_EPOCH, INITIAL_EPOCH, next_epoch

_MAX_SESSION_ID = 2**31 - 1

TopicResults = list[tuple[str, list[FetchPartitionResult]]]


@dataclass(slots=True)
class SessionPartition:
    """A partition's position as the fetcher last named it, and what the fetcher was last answered."""

    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1
    answered_high_watermark: int = -1
    answered_log_start_offset: int = -1

    @classmethod
    def of(cls, asked: Any) -> SessionPartition:
        """A partition as a Fetch names it (a kio FetchPartition; v4-v8 carry no leader epoch)."""
        return cls(
            asked.partition,
            asked.fetch_offset,
            asked.partition_max_bytes,
            getattr(asked, "current_leader_epoch", -1),
        )

    def named(self, asked: Any) -> None:
        self.fetch_offset = asked.fetch_offset
        self.partition_max_bytes = asked.partition_max_bytes
        self.current_leader_epoch = getattr(asked, "current_leader_epoch", -1)

    def has_news(self, result: FetchPartitionResult, with_records: bool) -> bool:
        """Whether `result` tells the fetcher anything; remembers what it told."""
        news = (
            with_records
            or result.error_code != 0
            or result.high_watermark != self.answered_high_watermark
            or result.log_start_offset != self.answered_log_start_offset
        )
        self.answered_high_watermark = result.high_watermark
        self.answered_log_start_offset = result.log_start_offset
        return news


class FetchSession:
    def __init__(self, session_id: int, privileged: bool, now: float) -> None:
        self.id = session_id
        self.privileged = privileged  # a follower's: consumers' sessions never push it out
        self.epoch = 1  # the epoch the next fetch in this session must carry
        self.last_used = now
        self.partitions: dict[tuple[str, int], SessionPartition] = {}

    def __len__(self) -> int:
        return len(self.partitions)

    def update(self, topics: Iterable[Any], forgotten: Iterable[Any]) -> None:
        for topic in topics:
            for asked in topic.partitions:
                key = (topic.topic, asked.partition)
                known = self.partitions.get(key)
                if known is None:
                    self.partitions[key] = SessionPartition.of(asked)
                else:
                    known.named(asked)
        for topic in forgotten:
            for index in topic.partitions:
                self.partitions.pop((topic.topic, index), None)

    def to_read(self) -> list[tuple[str, list[SessionPartition]]]:
        by_topic: dict[str, list[SessionPartition]] = {}
        for (topic, _), partition in self.partitions.items():
            by_topic.setdefault(topic, []).append(partition)
        return list(by_topic.items())

    def answer(self, results: TopicResults, *, everything: bool) -> TopicResults:
        """The partitions of `results` to send: all of them for the fetch that opened the session, else those
        with news. Partitions that got records move to the back, so the next fetch's byte budget starts
        with the others (as Kafka rotates a session's partitions)."""
        kept: TopicResults = []
        served: list[tuple[str, int]] = []
        for topic, answers in results:
            mine = []
            for result in answers:
                key = (topic, result.partition_index)
                partition = self.partitions.get(key)
                if partition is None:
                    continue
                with_records = result.records is not None and chunk_length(result.records) > 0
                if partition.has_news(result, with_records) or everything:
                    mine.append(result)
                    if with_records:
                        served.append(key)
            if mine:
                kept.append((topic, mine))
        for key in served:
            self.partitions[key] = self.partitions.pop(key)
        return kept


@dataclass
class FetchPlan:
    """What one Fetch reads and how its answer is cut: sessionless, opening a session, or in one."""

    to_read: Sequence[tuple[str, Sequence[Any]]]
    cache: FetchSessionCache
    privileged: bool
    session: FetchSession | None = None
    opens: bool = False  # a full fetch with epoch 0: open a session as it is answered

    def answer(self, results: TopicResults) -> tuple[TopicResults, int]:
        """The partitions to send and the session id to name."""
        if self.session is not None:
            return self.session.answer(results, everything=False), self.session.id
        if not self.opens:
            return results, 0
        partitions = {
            (topic, asked.partition): SessionPartition.of(asked)
            for topic, asked_partitions in self.to_read
            for asked in asked_partitions
        }
        session = self.cache.open(self.privileged, partitions)
        if session is None:
            return results, 0
        return session.answer(results, everything=True), session.id

    def throttled_session_id(self) -> int:
        return 0 if self.session is None else self.session.id


class FetchSessionCache:
    def __init__(
        self,
        max_slots: int = 1000,
        eviction_ms: int = 120_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_slots = max_slots
        self.eviction_s = eviction_ms / 1000
        self._clock = clock
        self._sessions: dict[int, FetchSession] = {}  # least recently used first
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def plan(self, request: Any, privileged: bool) -> FetchPlan:
        """Look up, update or close the request's session; raises the session errors KIP-227 names."""
        session_id = getattr(request, "session_id", 0)
        epoch = getattr(request, "session_epoch", FINAL_EPOCH)
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id:
                self._sessions.pop(session_id, None)
            asked = [(t.topic, t.partitions) for t in request.topics]
            return FetchPlan(asked, self, privileged, opens=epoch == INITIAL_EPOCH)
        session = self._sessions.get(session_id)
        if session is None:
            raise FetchSessionIdNotFoundError(
                f"fetch session {session_id} is not (or no longer) on this broker"
            )
        if epoch != session.epoch:
            raise InvalidFetchSessionEpochError(
                f"fetch session {session_id} expected epoch {session.epoch}, got {epoch}"
            )
        session.update(request.topics, getattr(request, "forgotten_topics_data", ()))
        session.epoch = next_epoch(session.epoch)
        self._touch(session)
        if not session.partitions:  # everything forgotten: the session ends
            del self._sessions[session.id]
            return FetchPlan([], self, privileged)
        return FetchPlan(session.to_read(), self, privileged, session=session)

    def open(
        self, privileged: bool, partitions: dict[tuple[str, int], SessionPartition]
    ) -> FetchSession | None:
        """A new session holding `partitions`, or None when no slot can be had."""
        if len(self._sessions) >= self.max_slots and not self._evict_for(privileged, len(partitions)):
            return None
        session_id = 0
        while session_id == 0 or session_id in self._sessions:
            session_id = random.randint(1, _MAX_SESSION_ID)
        session = FetchSession(session_id, privileged, self._clock())
        session.partitions = partitions
        self._sessions[session_id] = session
        return session

    def _touch(self, session: FetchSession) -> None:
        session.last_used = self._clock()
        self._sessions[session.id] = self._sessions.pop(session.id)

    def _evict_for(self, privileged: bool, size: int) -> bool:
        now = self._clock()
        oldest = next(iter(self._sessions.values()), None)
        if oldest is not None and now - oldest.last_used >= self.eviction_s:
            victim: FetchSession | None = oldest
        else:
            consumers = [s for s in self._sessions.values() if not s.privileged]
            smallest = min(consumers, key=len, default=None)
            victim = smallest if smallest is not None and (privileged or len(smallest) < size) else None
        if victim is None:
            return False
        del self._sessions[victim.id]
        self.evictions += 1
        return True
