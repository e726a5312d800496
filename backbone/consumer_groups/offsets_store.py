"""The committed-offsets store's pieces below the coordinator: what it needs from the broker's log
(`OffsetsLog`), what it keeps per offset (`StoredOffset`), and rebuilding an offsets partition's state by
replaying its records (`replay_partition`).

Replay reads the partition from its log start to its end: the last record of each key wins, and a null value
(a tombstone) removes the key, exactly as compaction would leave it. A record that cannot be read is skipped
with a warning, so one damaged record never keeps a coordinator from serving the other groups.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from backbone.consumer_groups.group_types import GroupSnapshot
from backbone.consumer_groups.offsets_topic import (
    CommittedOffset,
    GroupKey,
    OffsetKey,
    decode_group_value,
    decode_key,
    decode_offset_value,
)
from backbone.protocol import TopicPartition
from backbone.protocol.errors import KafkaError
from backbone.protocol.records import KEY, OFFSET, VALUE, DecodedBatch, Record

log = logging.getLogger(__name__)


class OffsetsLog(Protocol):
    """What the coordinator needs from the broker's storage and metadata."""

    async def append(self, partition: int, records: bytes) -> int:
        """Append a batch to an offsets partition this broker leads and wait until every in-sync replica
        has it (acks=all); return its base offset. Raises KafkaError."""
        ...

    def read(self, partition: int) -> Iterator[DecodedBatch]:
        """The batches of an offsets partition from its log start to its current end (blocking)."""
        ...

    def partition_exists(self, topic: str, partition: int) -> bool: ...

    async def topic_exists(self, topic: str) -> bool:
        """Whether the topic exists, asked of the cluster's own record (not a cache that may lag)."""
        ...


@dataclass(slots=True)
class StoredOffset:
    committed: CommittedOffset
    log_offset: int  # of the record that wrote it: the later record wins


GroupOffsets = dict[str, dict[TopicPartition, StoredOffset]]


@dataclass
class LoadedPartition:
    offsets: GroupOffsets
    snapshots: dict[str, GroupSnapshot]
    records: int


def replay_partition(offsets_log: OffsetsLog, index: int) -> LoadedPartition:
    """An offsets partition's committed offsets and group snapshots, from its records (blocking)."""
    offsets: GroupOffsets = {}
    snapshots: dict[str, GroupSnapshot] = {}
    count = 0
    for batch in offsets_log.read(index):
        if batch.header.is_control:
            continue
        for record in batch.records:
            count += 1
            try:
                _replay(record, offsets, snapshots)
            except KafkaError as exc:
                log.warning(
                    "event=offsets_record_skipped partition=%d offset=%d error=%s", index, record[OFFSET], exc
                )
    return LoadedPartition(offsets, snapshots, count)


def _replay(record: Record, offsets: GroupOffsets, snapshots: dict[str, GroupSnapshot]) -> None:
    key_bytes, value = record[KEY], record[VALUE]
    if key_bytes is None:
        return
    key = decode_key(key_bytes)
    if isinstance(key, OffsetKey):
        group_offsets = offsets.setdefault(key.group, {})
        if value is None:
            group_offsets.pop((key.topic, key.partition), None)
            if not group_offsets:
                del offsets[key.group]
        else:
            group_offsets[(key.topic, key.partition)] = StoredOffset(
                decode_offset_value(value), record[OFFSET]
            )
    elif isinstance(key, GroupKey):
        if value is None:
            snapshots.pop(key.group, None)
        else:
            snapshots[key.group] = decode_group_value(value)


def keep_later(stored: dict[TopicPartition, StoredOffset], key: TopicPartition, entry: StoredOffset) -> None:
    """Cache `entry` unless a later record of the same key is cached already."""
    current = stored.get(key)
    if current is None or current.log_offset < entry.log_offset:
        stored[key] = entry
