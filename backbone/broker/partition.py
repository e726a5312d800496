"""One partition as this broker hosts it: its log, its leadership, idempotent producer state, and the
waiters of long-polling fetches.

The append path never unpacks records: it validates the batch headers and CRCs (the log room's
`validate_producer_records`), checks producer sequences against the headers, and appends the bytes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from backbone.broker.producer_state import ProducerStateManager
from backbone.log import Log
from backbone.log.append import validate_producer_records
from backbone.protocol.errors import (
    InvalidRecordError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
)
from backbone.protocol.record_batch import NO_PRODUCER_ID

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AppendResult:
    base_offset: int
    log_append_time_ms: int
    log_start_offset: int
    duplicate: bool = False


class Partition:
    def __init__(self, log_: Log, broker_id: int, producer_expiration_ms: int) -> None:
        self.log = log_
        self.topic = log_.topic
        self.index = log_.partition
        self.broker_id = broker_id
        self.leader_id = -1
        self.leader_epoch = -1
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        self.producer_state = ProducerStateManager(log_.directory, producer_expiration_ms)
        self._waiters: list[asyncio.Future[None]] = []
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
        self.leader_id, self.isr, self.replicas = leader, isr, replicas
        if leader_epoch != self.leader_epoch:
            self.leader_epoch = leader_epoch
            if self.is_leader:
                self.log.assign_epoch(leader_epoch)
        if self.is_leader:
            self._advance_high_watermark()
        if was_leader != self.is_leader:
            log.info(
                "event=leadership_changed partition=%s-%d leader=%d epoch=%d",
                self.topic,
                self.index,
                leader,
                leader_epoch,
            )
        self.wake_waiters()

    def _advance_high_watermark(self) -> None:
        # With this broker the only in-sync replica, everything appended is committed.
        if self.isr == (self.broker_id,) or not self.isr:
            self.log.high_watermark = self.log.log_end_offset

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
        return AppendResult(info.first_offset, info.log_append_time, self.log.log_start_offset)

    async def wait_committed(self, offset: int, timeout_ms: int) -> None:
        """Wait until `offset` is below the high watermark (every in-sync replica has it)."""
        deadline = time.monotonic() + timeout_ms / 1000
        while self.high_watermark <= offset:
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

    def new_waiter(self) -> asyncio.Future[None]:
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if len(self._waiters) >= 64:
            # Long-polls that timed out cancel their waiter; drop those so an idle partition stays small.
            self._waiters = [w for w in self._waiters if not w.done()]
        self._waiters.append(waiter)
        return waiter

    def wake_waiters(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

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
        self.log.truncate_to(offset)
        self.producer_state.truncate_to(offset)
        self._load_producer_state()

    def close(self) -> None:
        self.take_producer_snapshot()
