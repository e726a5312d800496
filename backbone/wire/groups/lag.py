"""Consumer lag: how far a group's committed offsets are behind the end of each partition's log.

Pure calculation, no I/O: the admin client gathers committed offsets (OffsetFetch), log end offsets
(ListOffsets latest) and which member owns which partition (DescribeGroups), and this module turns them into
one row per group, topic and partition, as kafka-consumer-groups.sh shows them.

Partitions are plain (topic, partition) pairs, so this room needs nothing from the client's types (the
client's TopicPartition is such a pair).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

__all__ = ["MemberInfo", "PartitionLag", "group_lag", "partition_lag", "total_lag"]

Partition = tuple[str, int]
P = TypeVar("P", bound=Partition)  # a plain pair, or a pair type such as the client's TopicPartition
V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class MemberInfo:
    """The member of a group that owns a partition."""

    member_id: str
    client_id: str
    host: str
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """One group's position on one partition.

    `committed_offset` is None when the group committed nothing there; `log_end_offset` is None when it is
    unknown (no leader answered); `lag` is None when either is. A negative lag means the committed offset is
    past the log end (the log was truncated or deleted below it) and is shown as it is, as Kafka does.
    """

    group_id: str
    topic: str
    partition: int
    committed_offset: int | None
    log_end_offset: int | None
    lag: int | None
    owner: MemberInfo | None = None


def partition_lag(committed_offset: int | None, log_end_offset: int | None) -> int | None:
    """Log end offset minus committed offset; None when either is unknown (negative offsets mean unknown)."""
    if committed_offset is None or committed_offset < 0 or log_end_offset is None or log_end_offset < 0:
        return None
    return log_end_offset - committed_offset


def group_lag(
    group_id: str,
    committed: Mapping[P, int | None],
    log_end: Mapping[P, int | None],
    owners: Mapping[P, MemberInfo] | None = None,
) -> list[PartitionLag]:
    """A row for every partition the group committed an offset for or has assigned to a member.

    Rows are sorted by topic and partition. `committed` may hold None (or -1) for "no offset committed";
    partitions missing from `log_end` get an unknown log end offset.
    """
    offsets, ends, owned = _by_pair(committed), _by_pair(log_end), _by_pair(owners or {})
    rows = []
    for topic, partition in sorted({*offsets, *owned}):
        offset = offsets.get((topic, partition))
        offset = None if offset is None or offset < 0 else offset
        end = ends.get((topic, partition))
        rows.append(
            PartitionLag(
                group_id,
                topic,
                partition,
                offset,
                end,
                partition_lag(offset, end),
                owned.get((topic, partition)),
            )
        )
    return rows


def _by_pair(values: Mapping[P, V]) -> dict[Partition, V]:
    """The mapping keyed by plain (topic, partition) pairs."""
    return {(str(topic), int(partition)): value for (topic, partition), value in values.items()}


def total_lag(rows: Iterable[PartitionLag]) -> int:
    """The sum of the known lags (partitions without a committed offset or known end count as 0)."""
    return sum(row.lag for row in rows if row.lag is not None)
