"""The idempotent producer's bookkeeping: producer id and epoch, and sequence numbers per partition.

Every batch gets the partition's next sequence number when it is first sent and keeps it for every retry,
so a broker that already wrote a retried batch recognises it and answers with the original offsets instead
of writing it twice. Batches of a partition are numbered in the order they were drained, the sender writes
requests to a broker in the order it planned them, and a retried batch is sent again only when nothing
before it is in flight, so sequences reach the broker in order.

When the sequence space of a partition gets a hole that no retry can fill (a sequenced batch failed for
good or expired, the broker forgot the producer: UNKNOWN_PRODUCER_ID, or it reports a real gap:
OUT_OF_ORDER_SEQUENCE_NUMBER for the very next batch), the producer bumps its epoch, as the Java client
does for an idempotent (non-transactional) producer: the broker accepts a higher epoch starting again at
sequence 0. The bump waits until no batch is in flight, and every waiting batch is numbered afresh.
"""

from __future__ import annotations

import logging

from backbone.client.producer.accumulator import ProducerBatch
from backbone.client.structs import TopicPartition

__all__ = ["IdempotenceState"]

log = logging.getLogger(__name__)

_MAX_SEQUENCE = 0x7FFFFFFF
_MAX_EPOCH = 0x7FFF


class IdempotenceState:
    def __init__(self) -> None:
        self.producer_id = -1
        self.epoch = -1
        self.bump_required = False
        self._next_sequence: dict[TopicPartition, int] = {}
        self._last_acked: dict[TopicPartition, int] = {}

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    def set_producer(self, producer_id: int, epoch: int) -> None:
        self.producer_id = producer_id
        self.epoch = epoch
        self._reset_sequences()
        log.info("event=producer_id_assigned producer_id=%d epoch=%d", producer_id, epoch)

    def _reset_sequences(self) -> None:
        self._next_sequence.clear()
        self._last_acked.clear()
        self.bump_required = False

    def assign(self, batch: ProducerBatch) -> None:
        """Give a batch its producer fields; a batch that has a sequence for this epoch keeps it."""
        if (
            batch.base_sequence >= 0
            and batch.producer_epoch == self.epoch
            and batch.producer_id == self.producer_id
        ):
            return
        sequence = self._next_sequence.get(batch.tp, 0)
        batch.producer_id = self.producer_id
        batch.producer_epoch = self.epoch
        batch.base_sequence = sequence
        # Sequences wrap around at int32 max, as Kafka's DefaultRecordBatch.incrementSequence does.
        self._next_sequence[batch.tp] = (sequence + batch.record_count) & _MAX_SEQUENCE

    def acknowledged(self, batch: ProducerBatch) -> None:
        if batch.producer_epoch != self.epoch or batch.base_sequence < 0:
            return
        last = (batch.base_sequence + batch.record_count - 1) & _MAX_SEQUENCE
        self._last_acked[batch.tp] = last

    def is_next_sequence(self, batch: ProducerBatch) -> bool:
        """Whether `batch` directly follows the last acknowledged one (so an out-of-order answer is a gap)."""
        last = self._last_acked.get(batch.tp, -1)
        return batch.base_sequence == ((last + 1) & _MAX_SEQUENCE)

    def is_behind_acknowledged(self, batch: ProducerBatch) -> bool:
        """Whether a later batch of the partition was already acknowledged: a gap no retry can fill."""
        last = self._last_acked.get(batch.tp, -1)
        return last >= 0 and batch.base_sequence <= last

    def request_bump(self, tp: TopicPartition, reason: str) -> None:
        if not self.bump_required:
            log.warning("event=producer_epoch_bump_requested partition=%s reason=%s", tp, reason)
        self.bump_required = True

    def bump(self, waiting: list[ProducerBatch]) -> None:
        """Move to the next epoch; `waiting` batches lose their sequences and are numbered again."""
        if self.epoch >= _MAX_EPOCH:
            # The epoch cannot grow: forget the id; the sender asks the broker for a new one.
            self.producer_id = -1
            self.epoch = -1
        else:
            self.epoch += 1
        for batch in waiting:
            batch.producer_id = -1
            batch.producer_epoch = -1
            batch.base_sequence = -1
        self._reset_sequences()
        log.info(
            "event=producer_epoch_bumped producer_id=%d epoch=%d renumbered=%d",
            self.producer_id,
            self.epoch,
            len(waiting),
        )
