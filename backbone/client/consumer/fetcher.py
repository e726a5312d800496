"""The consumer's fetcher: positions per partition, pipelined Fetch requests, and record decoding.

Each assigned partition has a consumed `position` (the next offset `poll` returns) and a `fetch_position`
(the next offset to ask the broker for), which runs ahead: as soon as a Fetch answer arrives, the offset
after its last whole batch is known from the batch headers alone, so the next Fetch for that partition goes
out before a single record is decoded, and the network works while the application processes records. At
most `_MAX_BUFFERED` answers wait per partition, which bounds memory at about that many times
`fetch.max.bytes`.

One Fetch is in flight per broker (the leader of the partitions in it), in a fetch session (KIP-227) with that
broker where it offers one; answers for a partition that was sought or unassigned since the request went out
are dropped (each seek bumps the partition's generation).
Offsets that must be looked up first (`seek_to_beginning`/`seek_to_end`, `auto.offset.reset`) are resolved
with ListOffsets by the same loop.

Decoding happens in `poll`, batch by batch, only as far as `max.poll.records` needs (the partitions a poll
served come last in the next one, so a backlog on one never holds another's records back): control batches are
skipped, and with `isolation.level=read_committed` so are batches of aborted transactions. Batches are
decoded lazily (`LazyRecords`): checked whole in `poll`, but the records of their runs of alike records
are made only as the application reads them, one at a time, which spares the garbage collector.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import itertools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from backbone.client.cluster import ClusterClient
from backbone.client.producer.sender import METADATA_ERRORS
from backbone.client.structs import ConsumerRecord, RecordList, TimestampType, TopicPartition
from backbone.protocol.api import ApiKey
from backbone.protocol.errors import (
    ErrorCode,
    KafkaError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
    error_for,
)
from backbone.protocol.record_batch import HEADER_SIZE, peek_size, read_header
from backbone.protocol.records import ControlType, DecodedBatch, Record, control_type, decode_batch
from backbone.wire.errors import KafkaClientError, KafkaConnectionError, KafkaTimeoutError
from backbone.wire.fetch import (
    FetchedPartition,
    FetchRequestPartition,
    decode_fetch_response,
    encode_fetch_request,
)
from backbone.wire.fetch_session import FINAL_EPOCH, FetchSessionBuilder
from backbone.wire.messages import group_by_topic

__all__ = ["EARLIEST", "LATEST", "CompletedFetch", "Fetcher", "PartitionState"]

log = logging.getLogger(__name__)

EARLIEST = -2
LATEST = -1
_MAX_BUFFERED = 2
_CLOSE_SESSIONS_S = 1.0
_state_serials = itertools.count(1)
_new_tuple = tuple.__new__
_CREATE = TimestampType.CREATE_TIME
_APPEND = TimestampType.LOG_APPEND_TIME


@dataclass(slots=True)
class CompletedFetch:
    """One partition's records from one Fetch answer, decoded lazily by `poll`."""

    tp: TopicPartition
    generation: int
    records: bytes | bytearray | memoryview
    """The partition's records section: a view of the Fetch response frame as the connection gives it."""
    aborted: list[tuple[int, int]] | None
    starts: list[int] = field(default_factory=list)
    """Where each whole batch starts in `records`; decoded from `next_batch` on."""
    next_batch: int = 0
    pending: Sequence[Any] = field(default_factory=list)
    """Records decoded but not yet returned (a poll took fewer than a whole batch): plain Record tuples
    (a LazyRecords or a list), or ConsumerRecords when deserializers made them (`pending_kind` None)."""
    pending_kind: TimestampType | None = None
    pending_end: int = -1
    """The offset after the batch `pending` came from."""
    aborted_producers: set[int] = field(default_factory=set)

    @property
    def finished(self) -> bool:
        return self.next_batch >= len(self.starts) and not self.pending


@dataclass(slots=True)
class PartitionState:
    position: int | None = None
    fetch_position: int | None = None
    reset_to: int | None = None
    """EARLIEST, LATEST or a timestamp to look the position up by; None when the position is known."""
    skip_before_timestamp: int | None = None
    """After a reset by timestamp: records before the first one at or after it are not returned. Kafka
    answers ListOffsets with that very record, but a broker may answer with the start of its batch."""
    generation: int = 0
    paused: bool = False
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    buffered: collections.deque[CompletedFetch] = field(default_factory=collections.deque)
    error: BaseException | None = None
    awaiting_committed: bool = False
    """Not fetched yet: the group's committed offset is being looked up (see consumer_group.py)."""
    awaiting_listener: bool = False
    """Not fetched yet: newly assigned, and the rebalance listener's `on_partitions_assigned` (which may
    seek it) has not returned."""
    serial: int = field(default_factory=lambda: next(_state_serials))
    """Tells this state from an earlier one of the same partition (to its fetch session)."""

    def seek(self, offset: int | None, reset_to: int | None = None) -> None:
        self.position = self.fetch_position = offset
        self.reset_to = reset_to
        self.skip_before_timestamp = None
        self.generation += 1
        self.buffered.clear()
        self.error = None
        self.awaiting_committed = False


def scan_batches(records: bytes | bytearray | memoryview) -> tuple[list[int], int | None]:
    """Where the whole batches of a records section start, and the offset after the last one.

    Headers only, no records: cheap enough to run the moment an answer arrives. A partial batch at the end
    (the broker cuts at the byte limit) is left out; it is fetched again from the returned offset.
    """
    starts: list[int] = []
    pos = 0
    end = len(records)
    last = None
    while True:
        size = peek_size(records, pos)
        if size is None or size > end - pos or size < HEADER_SIZE:
            return starts, last
        starts.append(pos)
        last = read_header(records, pos).next_offset
        pos += size


def next_fetch_offset(records: bytes | bytearray | memoryview) -> int | None:
    """The offset after the last whole batch in a records section (None when it holds no whole batch)."""
    return scan_batches(records)[1]


class Fetcher:
    def __init__(
        self,
        cluster: ClusterClient,
        config: Mapping[str, Any],
        deserialize: Callable[[str, Any, Any], tuple[Any, Any]] | None,
    ) -> None:
        self.cluster = cluster
        self.assignment: dict[TopicPartition, PartitionState] = {}
        self.default_reset = {"earliest": EARLIEST, "latest": LATEST, "none": None}[
            config["auto.offset.reset"]
        ]
        self.isolation = 1 if config["isolation.level"] == "read_committed" else 0
        self.min_bytes: int = config["fetch.min.bytes"]
        self.max_wait_ms: int = config["fetch.max.wait.ms"]
        self.max_bytes: int = config["fetch.max.bytes"]
        self.partition_max_bytes: int = config["max.partition.fetch.bytes"]
        self.check_crcs: bool = config["check.crcs"]
        self.record_regions: bool = config["record.regions"]
        self.timeout_ms: int = config["request.timeout.ms"] + self.max_wait_ms
        self.backoff_s: float = config["retry.backoff.ms"] / 1000
        self._deserialize = deserialize
        # A partition without a position takes auto.offset.reset only once the application asks for records or
        # a position (poll, position), as Kafka's consumer does: a seek() right after assign() then starts the
        # reading, with no fetch from the reset position (a long-poll at the end) to wait for first.
        self.positions_wanted = False
        self._busy_nodes: set[int] = set()
        self._wakeup = asyncio.Event()
        self.data_ready = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._task: asyncio.Task[None] | None = None
        self._sessions: dict[int, FetchSessionBuilder[TopicPartition]] = {}  # per broker

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())
        self.cluster.listeners.append(self.wakeup)

    async def stop(self) -> None:
        tasks = [t for t in (self._task, *self._tasks) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._close_sessions()

    async def _close_sessions(self) -> None:
        """Tell each broker holding a fetch session of ours to drop it (a fetch with the final epoch, as
        Kafka's consumer sends on close), so its slot is free at once, not after the broker's eviction
        time. Bounded by `_CLOSE_SESSIONS_S`: a broker that cannot be reached keeps it until then."""
        held = {node_id: s.session_id for node_id, s in self._sessions.items() if s.session_id}
        self._sessions.clear()
        if not held:
            return

        async def close(node_id: int, session_id: int) -> None:
            encode = functools.partial(
                encode_fetch_request,
                replica_id=-1,
                max_wait_ms=0,
                min_bytes=0,
                max_bytes=self.max_bytes,
                isolation_level=self.isolation,
                partitions={},
                session_id=session_id,
                session_epoch=FINAL_EPOCH,
            )
            await self.cluster.request(node_id, ApiKey.FETCH, encode, decode_fetch_response)

        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_CLOSE_SESSIONS_S):
                await asyncio.gather(*(close(n, s) for n, s in held.items()), return_exceptions=True)

    def wakeup(self) -> None:
        self._wakeup.set()

    # -- the loop ---------------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            self._wakeup.clear()
            self._send_requests()
            await self._wakeup.wait()

    def _send_requests(self) -> None:
        fetches: dict[int, list[tuple[TopicPartition, PartitionState]]] = {}
        resets: dict[int, list[tuple[TopicPartition, PartitionState]]] = {}
        for tp, state in self.assignment.items():
            if state.paused or state.error is not None or state.awaiting_committed or state.awaiting_listener:
                continue
            if state.reset_to is None and state.fetch_position is None:
                if not self.positions_wanted:
                    continue
                if self.default_reset is None:
                    state.error = OffsetOutOfRangeError(
                        f"{tp} has no position and auto.offset.reset is none; seek() it first"
                    )
                    self.data_ready.set()
                    continue
                state.reset_to = self.default_reset
            leader = self.cluster.metadata.leader_for(tp)
            if leader < 0:
                self.cluster.add_topics([tp.topic])
                self.cluster.request_update()
                continue
            if leader in self._busy_nodes:
                continue
            if state.reset_to is not None:
                resets.setdefault(leader, []).append((tp, state))
            elif len(state.buffered) < _MAX_BUFFERED:
                fetches.setdefault(leader, []).append((tp, state))
        for node_id, parts in resets.items():
            self._spawn(node_id, self._reset(node_id, parts))
        for node_id, parts in fetches.items():
            if node_id not in self._busy_nodes:
                self._spawn(node_id, self._fetch(node_id, parts))

    def _spawn(self, node_id: int, coroutine: Any) -> None:
        self._busy_nodes.add(node_id)
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)

        def done(finished: asyncio.Task[None]) -> None:
            self._tasks.discard(finished)
            self._busy_nodes.discard(node_id)
            self.wakeup()

        task.add_done_callback(done)

    async def _backoff_after(self, error: BaseException, what: str) -> None:
        log.warning("event=fetcher_request_failed request=%r error=%s", what, error)
        if (
            isinstance(error, KafkaConnectionError | KafkaTimeoutError)
            or getattr(error, "code", None) in METADATA_ERRORS
        ):
            self.cluster.request_update()
        await asyncio.sleep(self.backoff_s)

    # -- offsets lookups --------------------------------------------------------------------------

    async def _reset(self, node_id: int, parts: list[tuple[TopicPartition, PartitionState]]) -> None:
        # (generation, reset target); the caller passes only partitions with a target
        wanted = {tp: (state.generation, state.reset_to) for tp, state in parts if state.reset_to is not None}
        try:
            found = await self.list_offsets(node_id, {tp: target for tp, (_, target) in wanted.items()})
        except (KafkaClientError, KafkaError) as error:
            await self._backoff_after(error, f"offset lookup on node {node_id}")
            return
        for tp, (offset, _) in found.items():
            state = self.assignment.get(tp)
            if state is None or state.generation != wanted[tp][0]:
                continue  # sought or unassigned meanwhile
            if offset < 0:  # no record at or after the timestamp: go to the end, as Kafka does
                state.reset_to = LATEST
                continue
            target = wanted[tp][1]
            state.skip_before_timestamp = target if target >= 0 else None
            state.position = state.fetch_position = offset
            state.reset_to = None
            log.debug("event=position_reset partition=%s offset=%d", tp, offset)

    async def list_offsets(
        self, node_id: int, targets: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, tuple[int, int]]:
        """ListOffsets on one leader: {tp: (offset, timestamp)} for EARLIEST, LATEST or a timestamp."""
        rows = (
            (tp, {"partition_index": tp.partition, "timestamp": target}) for tp, target in targets.items()
        )
        response = await self.cluster.request_kio(
            node_id,
            ApiKey.LIST_OFFSETS,
            replica_id=-1,
            isolation_level=self.isolation,
            topics=group_by_topic(rows),
        )
        result = {}
        for topic in response.topics:
            for part in topic.partitions:
                if part.error_code:
                    raise error_for(part.error_code, f"ListOffsets for {topic.name}-{part.partition_index}")
                result[TopicPartition(topic.name, int(part.partition_index))] = (
                    int(part.offset),
                    int(part.timestamp),
                )
        return result

    # -- fetching ---------------------------------------------------------------------------------

    async def _fetch(self, node_id: int, parts: list[tuple[TopicPartition, PartitionState]]) -> None:
        sent = {tp: (state.generation, state.fetch_position) for tp, state in parts}
        limit = self.partition_max_bytes
        wanted = {}
        for tp, (_, offset) in sent.items():
            assert offset is not None  # _send_requests sends partitions without a position to _reset
            wanted[tp] = FetchRequestPartition(tp.partition, offset, limit)
        # A fetch session (KIP-227) per broker: only the partitions that moved are named, and only those with
        # news come back. Partitions not fetched this time (paused, buffered enough) are forgotten meanwhile.
        session: FetchSessionBuilder[TopicPartition] = self._sessions.setdefault(
            node_id, FetchSessionBuilder()
        )
        session_id, epoch, rows, forgotten = session.next_request(
            wanted, owners={tp: state.serial for tp, state in parts}
        )
        try:
            response = await self.cluster.request(
                node_id,
                ApiKey.FETCH,
                functools.partial(
                    encode_fetch_request,
                    replica_id=-1,
                    max_wait_ms=self.max_wait_ms,
                    min_bytes=self.min_bytes,
                    max_bytes=self.max_bytes,
                    isolation_level=self.isolation,
                    partitions=rows,
                    session_id=session_id,
                    session_epoch=epoch,
                    forgotten=forgotten,
                ),
                decode_fetch_response,
                timeout_ms=self.timeout_ms,
            )
        except (KafkaClientError, KafkaError) as error:
            session.failed(error)
            await self._backoff_after(error, f"fetch from node {node_id}")
            return
        if response.error_code:
            refused = error_for(response.error_code, "Fetch")
            if not session.failed(refused):  # a session the broker lost: the next fetch opens one at once
                await self._backoff_after(refused, f"fetch from node {node_id}")
            return
        session.answered(response.session_id)
        retry = False
        for topic, partitions in response.topics:
            for fetched in partitions:
                tp = TopicPartition(topic, fetched.partition)
                state = self.assignment.get(tp)
                if state is None or tp not in sent or state.generation != sent[tp][0]:
                    continue
                retry |= self._handle(tp, state, fetched, sent[tp][1])
        if retry:
            await asyncio.sleep(self.backoff_s)

    def _handle(
        self, tp: TopicPartition, state: PartitionState, fetched: FetchedPartition, offset: int | None
    ) -> bool:
        """Take one partition's answer; True when the partition should be retried after a backoff."""
        code = fetched.error_code
        if code == ErrorCode.none:
            state.high_watermark = fetched.high_watermark
            state.last_stable_offset = fetched.last_stable_offset
            state.log_start_offset = fetched.log_start_offset
            records = fetched.records
            if not records:
                return False
            starts, next_offset = scan_batches(records)
            if next_offset is None:
                state.error = RecordListTooLargeError(
                    f"{tp} at offset {offset} holds a batch larger than max.partition.fetch.bytes "
                    f"({self.partition_max_bytes}); raise it (and fetch.max.bytes)"
                )
            else:
                state.fetch_position = next_offset
                completed = CompletedFetch(
                    tp, state.generation, records, fetched.aborted_transactions, starts
                )
                state.buffered.append(completed)
            self.data_ready.set()
            return False
        if code == ErrorCode.offset_out_of_range:
            if self.default_reset is None:
                state.error = OffsetOutOfRangeError(
                    f"offset {offset} is out of range for {tp} (log start {fetched.log_start_offset}, end "
                    f"{fetched.high_watermark}) and auto.offset.reset is none; seek() to a valid offset"
                )
                self.data_ready.set()
            else:
                log.info(
                    "event=offset_out_of_range partition=%s offset=%s resetting=%s",
                    tp,
                    offset,
                    self.default_reset,
                )
                state.seek(None, self.default_reset)
            return False
        error = error_for(code, f"fetching {tp}")
        if code in METADATA_ERRORS or error.retriable:
            self.cluster.request_update()
            log.debug("event=fetch_partition_error partition=%s error=%s", tp, error)
            return True
        state.error = error
        self.data_ready.set()
        return False

    # -- decoding (called by poll) ----------------------------------------------------------------

    def drain(self, max_records: int) -> dict[TopicPartition, RecordList]:
        """Up to `max_records` decoded records from the buffered answers, advancing positions."""
        result: dict[TopicPartition, RecordList] = {}
        budget = max_records
        for tp, state in self.assignment.items():
            if state.error is not None:
                error, state.error = state.error, None
                if result:  # deliver what was decoded first; the error comes on the next poll
                    state.error = error
                    break
                raise error
            if state.paused:
                continue
            out = None
            while budget > 0 and state.buffered:
                completed = state.buffered[0]
                if out is None:
                    out = RecordList(tp.topic, tp.partition)
                budget -= self._take(completed, state, budget, out)
                if completed.finished:
                    state.buffered.popleft()
            if out:
                result[tp] = out
            if budget <= 0:
                break
        # The partitions served go last for the next poll, as Kafka's consumer does: a consumer behind on one
        # partition must not leave another's records waiting until that backlog is gone.
        for tp in result:
            self.assignment[tp] = self.assignment.pop(tp)
        # Only what poll can return counts: data buffered for a paused partition must not keep the event set,
        # or poll would spin on it without ever yielding to the event loop.
        if not any(state.buffered and not state.paused for state in self.assignment.values()):
            self.data_ready.clear()
        self.wakeup()  # buffers shrank: partitions may be fetched again
        return result

    def _take(self, completed: CompletedFetch, state: PartitionState, budget: int, out: RecordList) -> int:
        """Move up to `budget` records into `out`; return how many."""
        assert state.position is not None, "records are buffered only for partitions with a position"
        position = state.position
        taken = 0
        while taken < budget:
            if not completed.pending:
                batch = self._next_batch(completed)
                if batch is None:
                    break
                if batch.is_control or self._is_aborted(completed, batch):
                    position = max(position, batch.next_offset)
                    continue
                completed.pending_kind, completed.pending = self._records(
                    completed.tp, batch, position, state
                )
                completed.pending_end = batch.next_offset
            pending = completed.pending
            room = budget - taken
            if len(pending) <= room:
                out.add(completed.pending_kind, pending)
                taken += len(pending)
                completed.pending = []
                # The batch's end, not its last record + 1: compaction may have removed its tail.
                position = max(position, completed.pending_end)
            else:
                out.add(completed.pending_kind, pending[:room])
                taken += room
                completed.pending = pending[room:]
                last = pending[room - 1]
                position = (last.offset if completed.pending_kind is None else last[0]) + 1
        state.position = position
        return taken

    def _next_batch(self, completed: CompletedFetch) -> DecodedBatch | None:
        if completed.next_batch >= len(completed.starts):
            return None
        start = completed.starts[completed.next_batch]
        completed.next_batch += 1
        return decode_batch(
            completed.records, start, verify_crc=self.check_crcs, lazy=True, regions=self.record_regions
        )

    @staticmethod
    def _skip_early(records: Sequence[Record], state: PartitionState) -> Sequence[Record]:
        target = state.skip_before_timestamp
        for index, record in enumerate(records):
            if record[1] >= target:  # type: ignore[operator]
                state.skip_before_timestamp = None
                return records[index:]
        return []

    def _is_aborted(self, completed: CompletedFetch, batch: DecodedBatch) -> bool:
        """read_committed: whether `batch` belongs to an aborted transaction (Kafka's consumer algorithm)."""
        aborted = completed.aborted
        if not self.isolation or not aborted:
            return False
        header = batch.header
        while aborted and aborted[0][1] <= header.last_offset:
            completed.aborted_producers.add(aborted.pop(0)[0])
        if header.is_control:
            if batch.records and control_type(batch.records[0]) == ControlType.ABORT:
                completed.aborted_producers.discard(header.producer_id)
            return True
        return header.is_transactional and header.producer_id in completed.aborted_producers

    def _records(
        self, tp: TopicPartition, batch: DecodedBatch, position: int, state: PartitionState
    ) -> tuple[TimestampType | None, Sequence[Any]]:
        """The batch's records from `position` on: plain tuples and their timestamp type, or, with
        deserializers, finished ConsumerRecords (type None)."""
        kind = _APPEND if batch.header.has_log_append_time else _CREATE
        records = batch.records
        # A batch that starts before the position (after a seek into it); the header says so without
        # making a record.
        if batch.header.base_offset < position and records and records[0][0] < position:
            records = [r for r in records if r[0] >= position]
        if state.skip_before_timestamp is not None:
            records = self._skip_early(records, state)
        deserialize = self._deserialize
        if deserialize is None:
            return kind, records
        topic, partition = tp
        out = []
        for o, t, k, v, h in records:
            key, value = deserialize(topic, k, v)
            out.append(_new_tuple(ConsumerRecord, (topic, partition, o, t, kind, key, value, h)))
        return None, out
