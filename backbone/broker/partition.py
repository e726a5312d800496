"""One partition as this broker hosts it: its log, its leadership, idempotent producer state, and the
waiters of long-polling fetches and acks=all produces.

The append path never unpacks records: it validates the batch headers and CRCs (the log room's
`validate_producer_records`), checks producer sequences against the headers, and appends the bytes.

As leader it tracks where each follower's log ends (from the offsets followers fetch at), moves the high
watermark to the lowest log end among the in-sync replicas, and asks for ISR changes: a follower that has
not caught up for `replica.lag.time.max.ms` leaves the ISR, one that reaches the high watermark joins it.
ISR changes are written to ZooKeeper by the replica manager (one at a time per partition); until a change is
written, the high watermark counts the larger of the two sets, as Kafka's "maximal ISR" does.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from backbone.log import Log
from backbone.log.append import AppendInfo, check_batches, validate_producer_records
from backbone.log.files import ReadResult
from backbone.log.producer_state import ProducerStateManager
from backbone.protocol.errors import (
    InvalidRecordError,
    NotEnoughReplicasAfterAppendError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from backbone.protocol.record_batch import NO_PRODUCER_ID

log = logging.getLogger(__name__)


class AppendResult(NamedTuple):  # one per append: a tuple builds in a third of a frozen dataclass's time
    base_offset: int
    log_append_time_ms: int
    log_start_offset: int
    duplicate: bool = False
    records: int = 0  # how many the append added (from the offsets it assigned, not by counting)


# A follower the controller keeps taking out of the ISR (it finds the broker dead while this leader still
# hears from it) is added back at most this often, not in a tight loop of ZooKeeper writes.
EXPANSION_DAMPING_S = 1.0


@dataclass(slots=True)
class FollowerState:
    """What the leader knows of one follower, from its fetches (times are time.monotonic())."""

    log_end_offset: int = -1  # unknown until its first fetch in this leader epoch
    last_caught_up: float = 0.0
    last_fetch: float = 0.0
    leader_end_at_last_fetch: int = -1


IsrRequest = Callable[["Partition", tuple[int, ...]], None]


class Partition:
    def __init__(
        self,
        log_: Log,
        broker_id: int,
        producer_expiration_ms: int,
        *,
        replica_lag_time_max_ms: int = 30000,
        request_isr_change: IsrRequest | None = None,
        may_join_isr: Callable[[int], bool] = lambda replica: True,
    ) -> None:
        self.log = log_
        self.topic = log_.topic
        self.index = log_.partition
        self.broker_id = broker_id
        self.leader_id = -1
        self.leader_epoch = -1
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        self.followers: dict[int, FollowerState] = {}
        self.pending_isr: tuple[int, ...] | None = None
        self.epoch_start_offset = 0  # the log end offset when this broker became leader
        self._last_expansion: dict[int, float] = {}
        self.replica_lag_time_max_s = replica_lag_time_max_ms / 1000
        self._request_isr_change = request_isr_change
        self._may_join_isr = may_join_isr
        # Compaction stays below the high watermark: records above it may still be truncated away.
        log_.cleaner_upper_bound = lambda: log_.high_watermark
        self.producer_state = ProducerStateManager(log_.directory, producer_expiration_ms)
        self._waiters: list[asyncio.Future[bool]] = []
        # Set when this broker stops hosting the partition (its topic deleted, or the replica moved away):
        # what acks=all produces still wait for then fails at once rather than at the request's timeout.
        self.removed: str | None = None  # "deleted" or "moved"
        self._load_producer_state()

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.index}, leader={self.leader_id}, epoch={self.leader_epoch})"

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.broker_id

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    # -- leadership ----------------------------------------------------------------------------------

    def apply_state(
        self, leader: int, leader_epoch: int, isr: tuple[int, ...], replicas: tuple[int, ...]
    ) -> None:
        """Take the leadership and ISR the controller decided (idempotent for an unchanged state)."""
        was_leader = self.is_leader
        new_epoch = leader_epoch != self.leader_epoch
        self.leader_id, self.isr, self.replicas = leader, isr, replicas
        self.leader_epoch = leader_epoch
        if self.pending_isr is not None and (new_epoch or self.pending_isr == isr):
            self.pending_isr = None
        if self.is_leader:
            if new_epoch or not was_leader:
                self.log.assign_epoch(leader_epoch)
                self.epoch_start_offset = self.log.log_end_offset
                self._reset_followers()
            for replica in replicas:
                if replica != self.broker_id and replica not in self.followers:
                    self.followers[replica] = FollowerState(last_caught_up=time.monotonic())
            for replica in [r for r in self.followers if r not in replicas]:
                del self.followers[replica]  # reassigned away
            if any(r not in replicas for r in isr):
                # A replica reassigned away but still counted in sync would hold the high watermark back.
                self._ask_isr_change(tuple(r for r in isr if r in replicas))
            self._advance_high_watermark()
        else:
            self.followers.clear()
        if was_leader != self.is_leader:
            log.info(
                "event=leadership_changed partition=%s-%d leader=%d epoch=%d",
                self.topic,
                self.index,
                leader,
                leader_epoch,
            )
        self.wake_waiters()

    def _reset_followers(self) -> None:
        # A new leader counts every in-sync follower as caught up now: it gets a full lag time to fetch.
        now = time.monotonic()
        self.followers = {r: FollowerState(last_caught_up=now) for r in self.replicas if r != self.broker_id}

    def _advance_high_watermark(self) -> bool:
        """Move the high watermark to the lowest log end among the in-sync replicas; True when it moved."""
        high_watermark = self.log.log_end_offset
        for replica in self.maximal_isr():
            if replica != self.broker_id:
                follower = self.followers.get(replica)
                high_watermark = min(high_watermark, -1 if follower is None else follower.log_end_offset)
        if high_watermark <= self.log.high_watermark:
            return False
        self.log.high_watermark = high_watermark
        return True

    def maximal_isr(self) -> tuple[int, ...]:
        """The ISR, or while a change is being written, the larger of the old and the new one."""
        if self.pending_isr is None:
            return self.isr
        return self.isr + tuple(r for r in self.pending_isr if r not in self.isr)

    # -- reads (leader side) ---------------------------------------------------------------------------

    def read(self, fetch_offset: int, max_bytes: int, replica_id: int = -1) -> tuple[ReadResult, int, int]:
        """Whole batches from `fetch_offset`, with the high watermark and log start offset to answer with.

        A consumer (`replica_id` < 0) reads below the high watermark only. A follower reads up to the log
        end, and the offset it asks for first tells this leader what it holds (which may move the high
        watermark and the ISR).
        """
        if replica_id >= 0:
            self.update_follower(replica_id, fetch_offset)
            max_offset = None
        else:
            max_offset = self.log.high_watermark
        log_ = self.log
        high_watermark = log_.high_watermark
        log_start_offset = log_.log_start_offset
        return log_.read(fetch_offset, max_bytes, max_offset=max_offset), high_watermark, log_start_offset

    # -- followers (leader side) ----------------------------------------------------------------------

    def update_follower(self, replica_id: int, fetch_offset: int) -> None:
        """A follower fetched from `fetch_offset`: everything below it is on its log."""
        follower = self.followers.get(replica_id)
        if follower is None:
            raise NotLeaderOrFollowerError(
                f"broker {replica_id} is not a replica of {self.topic}-{self.index} "
                f"(replicas: {list(self.replicas)})"
            )
        now = time.monotonic()
        leader_end = self.log.log_end_offset
        if fetch_offset >= leader_end:
            follower.last_caught_up = now
        elif fetch_offset >= follower.leader_end_at_last_fetch >= 0:
            # It has everything the leader had at its previous fetch: it was caught up then.
            follower.last_caught_up = max(follower.last_caught_up, follower.last_fetch)
        follower.log_end_offset = fetch_offset
        follower.last_fetch = now
        follower.leader_end_at_last_fetch = leader_end
        if replica_id not in self.isr:
            self._maybe_expand_isr(replica_id, fetch_offset)
        if self._advance_high_watermark():
            self.wake_waiters()

    def _maybe_expand_isr(self, replica_id: int, fetch_offset: int) -> None:
        # It must hold everything committed and everything up to this leader's epoch, so it never joins with
        # a history that diverges from this leader's.
        if fetch_offset < self.high_watermark or fetch_offset < self.epoch_start_offset:
            return
        if not self._may_join_isr(replica_id):
            return  # the controller would take it out again (KIP-841): dead, unregistered or shutting down
        now = time.monotonic()
        if now - self._last_expansion.get(replica_id, 0.0) < EXPANSION_DAMPING_S:
            return
        self._last_expansion[replica_id] = now
        self._ask_isr_change((*self.isr, replica_id))

    def shrink_isr_if_lagging(self) -> None:
        """Drop followers that have not caught up for replica.lag.time.max.ms (leader only)."""
        if not self.is_leader:
            return
        deadline = time.monotonic() - self.replica_lag_time_max_s
        lagging = [
            r
            for r in self.isr
            if r != self.broker_id
            and (r not in self.followers or self.followers[r].last_caught_up < deadline)
        ]
        if lagging:
            log.info(
                "event=follower_lagging partition=%s-%d replicas=%s high_watermark=%d log_end_offset=%d",
                self.topic,
                self.index,
                lagging,
                self.high_watermark,
                self.log.log_end_offset,
            )
            self._ask_isr_change(tuple(r for r in self.isr if r not in lagging))

    def _ask_isr_change(self, new_isr: tuple[int, ...]) -> None:
        if self.pending_isr is not None or self._request_isr_change is None or new_isr == self.isr:
            return
        self.pending_isr = new_isr
        self._request_isr_change(self, new_isr)

    def isr_change_ended(self) -> None:
        """The ISR write is over, whether written, superseded or failed: nothing is pending any more, and a
        later fetch or check asks again if the ISR still needs the change."""
        self.pending_isr = None

    # -- append ---------------------------------------------------------------------------------------

    def append_as_leader(self, records: memoryview) -> AppendResult:
        """Validate and append a producer's record set; a retried idempotent batch is not written twice."""
        if not self.is_leader:
            raise NotLeaderOrFollowerError(
                f"broker {self.broker_id} is not the leader of {self.topic}-{self.index}"
            )
        batches = validate_producer_records(records, self.log.config, self.log.name)
        idempotent = [h for _, h in batches if h.producer_id != NO_PRODUCER_ID]
        if idempotent:
            if len(batches) != 1:
                raise InvalidRecordError(
                    "an idempotent producer must send one batch per partition per request"
                )
            duplicate = self.producer_state.check(batches[0][1])
            if duplicate is not None:
                log.info(
                    "event=duplicate_batch partition=%s-%d producer_id=%d sequence=%d offset=%d",
                    self.topic,
                    self.index,
                    batches[0][1].producer_id,
                    batches[0][1].base_sequence,
                    duplicate.first_offset,
                )
                return AppendResult(duplicate.first_offset, -1, self.log.log_start_offset, duplicate=True)
        info = self.log.append(records, leader_epoch=self.leader_epoch, validated=batches)
        offset = info.first_offset
        for _, header in batches:
            self.producer_state.update(header, offset, info.max_timestamp)
            offset += header.last_offset_delta + 1
        self._advance_high_watermark()
        self.wake_waiters()
        return AppendResult(
            info.first_offset,
            info.log_append_time,
            self.log.log_start_offset,
            records=info.last_offset - info.first_offset + 1,
        )

    def append_as_follower(self, records: memoryview) -> AppendInfo:
        """Append the leader's batches as they are, and keep producer state as the leader does."""
        batches = check_batches(records)
        info = self.log.append_as_follower(records, checked=batches)
        for _, header in batches:
            if header.producer_id != NO_PRODUCER_ID:
                self.producer_state.update(header, header.base_offset, header.max_timestamp)
        return info

    async def wait_committed(self, offset: int, timeout_ms: int, min_insync_replicas: int = 1) -> None:
        """Wait until `offset` is below the high watermark (every in-sync replica has it).

        NOT_ENOUGH_REPLICAS_AFTER_APPEND when it got committed by fewer in-sync replicas than required (the
        ISR shrank while waiting).
        """
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            if self.high_watermark > offset:
                if len(self.isr) < min_insync_replicas:
                    raise NotEnoughReplicasAfterAppendError(
                        f"{self.topic}-{self.index}: offset {offset} is committed by {len(self.isr)} in-sync "
                        f"replicas, fewer than min.insync.replicas={min_insync_replicas}"
                    )
                return
            if self.removed is not None:
                raise self._removal_error()
            if not self.is_leader:
                raise NotLeaderOrFollowerError(
                    f"{self.topic}-{self.index} lost leadership while waiting for acks"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RequestTimedOutError(
                    f"{self.topic}-{self.index}: offset {offset} not in sync within {timeout_ms} ms"
                )
            try:
                await asyncio.wait_for(self.new_waiter(), remaining)
            except TimeoutError:
                continue

    # -- long-poll fetch support ----------------------------------------------------------------------

    def new_waiter(self) -> asyncio.Future[bool]:
        waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.add_waiter(waiter)
        return waiter

    def add_waiter(self, waiter: asyncio.Future[bool]) -> None:
        """Have the next append or leadership change complete `waiter` (one future may wait on several
        partitions: whichever moves first completes it)."""
        if len(self._waiters) >= 64:
            # Long-polls woken elsewhere or timed out leave done waiters; drop those so an idle partition
            # stays small.
            self._waiters = [w for w in self._waiters if not w.done()]
        self._waiters.append(waiter)

    def remove(self, *, topic_deleted: bool) -> None:
        """This broker no longer hosts the partition: every waiter wakes, and acks waits fail as Kafka's
        delayed produces do (UNKNOWN_TOPIC_OR_PARTITION for a deleted topic, else NOT_LEADER_OR_FOLLOWER)."""
        self.removed = "deleted" if topic_deleted else "moved"
        self.wake_waiters()

    def _removal_error(self) -> Exception:
        where = f"{self.topic}-{self.index}"
        if self.removed == "deleted":
            return UnknownTopicOrPartitionError(f"{where} was deleted while waiting for acks")
        return NotLeaderOrFollowerError(f"{where} moved off this broker while waiting for acks")

    def wake_waiters(self, answer_now: bool = False) -> None:
        """Wake the long-polls waiting here; with `answer_now` (the broker stopping) they answer at once,
        else each reads again only if the partition has more for it."""
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(answer_now)

    # -- producer state persistence -------------------------------------------------------------------

    def _load_producer_state(self) -> None:
        state = self.producer_state
        state.load_latest_snapshot(self.log.log_end_offset)
        start = max(state.map_end_offset, self.log.log_start_offset)
        replayed = 0
        # Headers only (61 bytes per batch): producer ids and sequences never need the records.
        for header in self.log.iter_batch_headers(start):
            state.update(header, header.base_offset, header.max_timestamp)
            replayed += 1
        state.map_end_offset = self.log.log_end_offset
        if replayed:
            log.info(
                "event=producer_state_rebuilt partition=%s-%d batches=%d producers=%d",
                self.topic,
                self.index,
                replayed,
                len(state.producers),
            )

    def take_producer_snapshot(self) -> None:
        self.producer_state.map_end_offset = self.log.log_end_offset
        self.producer_state.take_snapshot()
        self.producer_state.delete_snapshots_before(self.log.log_start_offset)

    def expire_producers(self) -> None:
        self.producer_state.expire(int(time.time() * 1000))

    def truncate_to(self, offset: int) -> None:
        """Drop everything at and above `offset` (a follower whose history diverged from its leader's)."""
        self.log.truncate_to(offset)
        self.producer_state.truncate_to(offset)
        self._load_producer_state()

    def restart_log_at(self, offset: int) -> None:
        """Empty the log and start it at `offset` (a follower behind its leader's log start)."""
        self.log.truncate_fully_and_start_at(offset)
        self.producer_state.truncate_to(0)
        self._load_producer_state()

    def close(self) -> None:
        self.take_producer_snapshot()
