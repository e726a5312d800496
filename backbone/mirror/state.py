"""What a mirror keeps about its work: where each source topic's records go, each partition's progress,
and the chunks sent to the target and not yet settled."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from backbone.client import TopicPartition
from backbone.protocol.records import Record


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
    sent: list[Record]
    """The records sent, in order (a record that has been in the target cluster is skipped)."""
    outcomes: list[tuple[int, Any]]
    """(end, future or exception), in order: `sent` from the previous end up to `end` travel together."""
