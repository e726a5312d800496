"""What a mirror keeps about its work: where each source topic's records go, each partition's progress,
and the chunks sent to the target and not yet settled."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from backbone.client import TopicPartition
from backbone.protocol.record_copy import HeaderedRun


@dataclass
class Route:
    """Where a source topic's records go."""

    target_topic: str
    source_partitions: int
    target_partitions: int
    source_topic_id: str | None = None

    def partition_for(self, source_partition: int) -> int | None:
        same = self.source_partitions == self.target_partitions
        return source_partition if same else None  # None: the producer hashes the key


@dataclass
class PartitionProgress:
    acknowledged: int | None = None  # next source offset to commit: everything before it is in the target
    resumed_from: int | None = None  # where copying started: the committed offset, else the log start
    committed: int | None = None
    newest_timestamp: int | None = None
    stopped_reason: str | None = None


@dataclass
class MirrorStats:
    partitions: dict[TopicPartition, PartitionProgress] = field(default_factory=dict)

    def of(self, tp: TopicPartition) -> PartitionProgress:
        return self.partitions.setdefault(tp, PartitionProgress())


@dataclass
class SentChunk:
    """Records of one source partition sent together, and what became of them."""

    tp: TopicPartition
    polled: int
    """Records polled, the skipped ones included."""
    next_offset: int
    """The source offset after the chunk's last record: acknowledged once every sent record is."""
    offsets: list[int] = field(default_factory=list)
    """The source offsets of the records sent, in order (a record that has been in the target cluster is
    skipped)."""
    timestamps: list[int] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    """Each sent record's key and value bytes."""
    skipped: int = 0
    outcomes: list[tuple[int, Any]] = field(default_factory=list)
    """(end, future or exception), in order: the sent records from the previous end up to `end` travel
    together."""

    def add(self, offset: int, timestamp: int, size: int) -> None:
        self.offsets.append(offset)
        self.timestamps.append(timestamp)
        self.sizes.append(size)

    def add_run(self, copies: HeaderedRun) -> None:
        """The records of a run, sent together (their lists made in C, not one by one)."""
        count = len(copies)
        self.offsets += range(copies.first_offset, copies.first_offset + count)
        self.timestamps += copies.timestamps()
        self.sizes += [copies.payload_size] * count
