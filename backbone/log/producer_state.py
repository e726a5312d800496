"""Idempotent producer state for one partition: sequence checks and duplicate detection.

Per producer id the leader remembers the epoch and the last few batches it appended (their first and last
sequence numbers and offsets), as Kafka's ProducerStateManager does. A retried batch that matches one of
them is answered with the offsets it got the first time instead of being written twice; a batch whose
sequence does not follow the last one gets OUT_OF_ORDER_SEQUENCE_NUMBER; an older epoch gets
INVALID_PRODUCER_EPOCH.

The state is rebuilt after a restart from the newest snapshot file plus the batch headers the log holds
after it (headers only: producer id, epoch and sequences live in the 61-byte batch header), so it
survives a broker restart, clean or not.
"""

from __future__ import annotations

import json
import logging
import os
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from backbone.protocol.errors import InvalidProducerEpochError, OutOfOrderSequenceNumberError
from backbone.protocol.record_batch import NO_PRODUCER_ID, NO_SEQUENCE, BatchHeader

log = logging.getLogger(__name__)

# Kafka keeps the metadata of the last five batches per producer: a producer has at most five in flight.
CACHED_BATCHES_PER_PRODUCER = 5
SNAPSHOT_SUFFIX = ".snapshot"
NO_EPOCH = -1
_INT32_MAX = 0x7FFFFFFF


class BatchRecord(NamedTuple):
    """What the leader remembers of one appended batch of an idempotent producer (a tuple: one per batch,
    built in a third of a frozen dataclass's time)."""

    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(slots=True)
class ProducerEntry:
    epoch: int = NO_EPOCH
    batches: deque[BatchRecord] = field(default_factory=lambda: deque(maxlen=CACHED_BATCHES_PER_PRODUCER))
    last_timestamp: int = -1

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else NO_SEQUENCE

    def find_duplicate(self, first_sequence: int, last_sequence: int) -> BatchRecord | None:
        for batch in self.batches:
            if batch.first_sequence == first_sequence and batch.last_sequence == last_sequence:
                return batch
        return None


def _next_sequence(sequence: int) -> int:
    return 0 if sequence == _INT32_MAX else sequence + 1


class ProducerStateManager:
    """Producer state of one partition, persisted as snapshot files in the partition's directory."""

    def __init__(self, directory: str | os.PathLike[str], expiration_ms: int = 86_400_000) -> None:
        self.directory = Path(directory)
        self.expiration_ms = expiration_ms
        self.producers: dict[int, ProducerEntry] = {}
        # The offset up to which the state reflects the log (exclusive).
        self.map_end_offset = 0

    # -- the append path -------------------------------------------------------------------------

    def check(self, header: BatchHeader) -> BatchRecord | None:
        """Validate an incoming batch before it is written.

        Returns the earlier append when the batch is a retry of one already written (the caller answers
        with those offsets and writes nothing); raises when the sequence or epoch is wrong; returns None
        when the batch is new and may be appended.
        """
        if header.producer_id == NO_PRODUCER_ID or header.base_sequence == NO_SEQUENCE:
            return None
        entry = self.producers.get(header.producer_id)
        if entry is None:
            return None
        if header.producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {header.producer_id} epoch {header.producer_epoch} is older than {entry.epoch}"
            )
        if header.producer_epoch > entry.epoch:
            # A bumped epoch starts its sequences again at 0.
            if header.base_sequence != 0 and entry.epoch != NO_EPOCH:
                raise OutOfOrderSequenceNumberError(
                    f"producer {header.producer_id} new epoch {header.producer_epoch} "
                    f"must start at sequence 0, got {header.base_sequence}"
                )
            return None
        duplicate = entry.find_duplicate(header.base_sequence, header.last_sequence)
        if duplicate is not None:
            return duplicate
        expected = _next_sequence(entry.last_sequence)
        if entry.batches and header.base_sequence != expected:
            raise OutOfOrderSequenceNumberError(
                f"producer {header.producer_id} sent sequence {header.base_sequence}, expected {expected}"
            )
        return None

    def update(self, header: BatchHeader, first_offset: int, timestamp: int) -> None:
        """Record a batch that was appended at `first_offset` (leader) or replicated (follower)."""
        last_offset = first_offset + header.last_offset_delta
        self.map_end_offset = max(self.map_end_offset, last_offset + 1)
        if header.producer_id == NO_PRODUCER_ID:
            return
        entry = self.producers.setdefault(header.producer_id, ProducerEntry())
        if header.producer_epoch != entry.epoch:
            entry.epoch = header.producer_epoch
            entry.batches.clear()
        entry.last_timestamp = max(entry.last_timestamp, timestamp)
        if header.base_sequence != NO_SEQUENCE:
            entry.batches.append(
                BatchRecord(header.base_sequence, header.last_sequence, first_offset, last_offset, timestamp)
            )

    def replay(self, headers: Iterable[BatchHeader]) -> None:
        """Bring the state up to date with batches read back from the log (offsets already assigned)."""
        for header in headers:
            if header.next_offset <= self.map_end_offset:
                continue
            self.update(header, header.base_offset, header.max_timestamp)

    def expire(self, now_ms: int) -> None:
        """Forget producers that have not written for `producer.id.expiration.ms`."""
        stale = [pid for pid, e in self.producers.items() if now_ms - e.last_timestamp > self.expiration_ms]
        for pid in stale:
            del self.producers[pid]

    # -- snapshots ---------------------------------------------------------------------------------

    def _snapshot_path(self, offset: int) -> Path:
        return self.directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"

    def snapshot_offsets(self) -> list[int]:
        offsets = []
        for path in self.directory.glob(f"*{SNAPSHOT_SUFFIX}"):
            stem = path.name[: -len(SNAPSHOT_SUFFIX)]
            if stem.isdigit():
                offsets.append(int(stem))
        return sorted(offsets)

    def take_snapshot(self) -> Path:
        """Write the state as of `map_end_offset` atomically (temp file, fsync, rename)."""
        path = self._snapshot_path(self.map_end_offset)
        body = {
            "version": 1,
            "end_offset": self.map_end_offset,
            "producers": [
                {
                    "producer_id": pid,
                    "epoch": entry.epoch,
                    "last_timestamp": entry.last_timestamp,
                    "batches": [
                        [b.first_sequence, b.last_sequence, b.first_offset, b.last_offset, b.timestamp]
                        for b in entry.batches
                    ],
                }
                for pid, entry in self.producers.items()
            ],
        }
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(body, f, separators=(",", ":"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        return path

    def load_latest_snapshot(self, max_offset: int) -> None:
        """Load the newest readable snapshot at or below `max_offset`; unreadable ones are deleted.

        Snapshots above `max_offset` (the recovered log end) describe batches the log no longer holds,
        so they are removed.
        """
        self.producers.clear()
        self.map_end_offset = 0
        for offset in reversed(self.snapshot_offsets()):
            path = self._snapshot_path(offset)
            if offset > max_offset:
                path.unlink(missing_ok=True)
                continue
            try:
                body = json.loads(path.read_text(encoding="utf-8"))
                producers = {}
                for item in body["producers"]:
                    entry = ProducerEntry(epoch=item["epoch"], last_timestamp=item["last_timestamp"])
                    entry.batches.extend(BatchRecord(*b) for b in item["batches"])
                    producers[item["producer_id"]] = entry
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("event=producer_snapshot_unreadable path=%s error=%r", path, exc)
                path.unlink(missing_ok=True)
                continue
            self.producers = producers
            self.map_end_offset = body["end_offset"]
            return

    def truncate_to(self, offset: int) -> None:
        """Forget everything at or above `offset` (the log was truncated there)."""
        for snapshot in self.snapshot_offsets():
            if snapshot > offset:
                self._snapshot_path(snapshot).unlink(missing_ok=True)
        if self.map_end_offset > offset:
            # Cached batches above the cut are gone from the log; the caller replays from the snapshot.
            self.load_latest_snapshot(offset)

    def delete_snapshots_before(self, offset: int, keep: int = 2) -> None:
        """Remove old snapshots, keeping the newest `keep` and any at or above `offset`."""
        offsets = self.snapshot_offsets()
        for snapshot in offsets[:-keep] if keep else offsets:
            if snapshot < offset:
                self._snapshot_path(snapshot).unlink(missing_ok=True)
