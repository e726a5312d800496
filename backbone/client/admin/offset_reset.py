"""A consumer group's offset reset planned: where each partition's committed offset would go.

Shared by `backbone groups reset-offsets` and the console's reset action, so both move offsets alike: the
target is the log start (earliest), the log end (latest), the first record at or after a time (datetime;
the log end when there is none), an offset, or a shift from the committed offset, always clamped to the
partition's [log start, log end].
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from backbone.client.structs import TopicPartition

__all__ = ["TARGET_KINDS", "NothingToShiftError", "PlannedReset", "ResetTarget", "plan_reset"]

TARGET_KINDS = ("earliest", "latest", "datetime", "offset", "shift")
# ListOffsets answers -1 for a timestamp after every record: such partitions go to their log end.
_NOT_FOUND = -1


class ResetTarget(NamedTuple):
    """Where to move offsets: `kind` is earliest, latest, datetime (value: epoch ms), offset or shift."""

    kind: str
    value: int = 0


class PlannedReset(NamedTuple):
    topic: str
    partition: int
    current: int | None
    """the committed offset now (None: nothing committed)"""
    new: int


class NothingToShiftError(ValueError):
    """A shift was asked for partitions without a committed offset (`partitions`, sorted)."""

    def __init__(self, partitions: list[TopicPartition]) -> None:
        self.partitions = partitions
        super().__init__(f"no committed offset to shift from: {', '.join(map(str, partitions))}")


def plan_reset(
    target: ResetTarget,
    partitions: Iterable[TopicPartition],
    committed: Mapping[TopicPartition, int],
    log_start: Mapping[TopicPartition, int],
    log_end: Mapping[TopicPartition, int],
    by_time: Mapping[TopicPartition, int] | None = None,
) -> list[PlannedReset]:
    """The new offset of each partition, clamped to [log start, log end], sorted by topic and partition.

    `by_time` holds ListOffsets' answer for a datetime target (-1: no record at or after it). Shifting
    partitions without a committed offset raises NothingToShiftError naming them all.
    """
    plan = []
    unshiftable = []
    for tp in sorted(partitions):
        start, end, current = log_start[tp], log_end[tp], committed.get(tp)
        if target.kind == "earliest":
            wanted = start
        elif target.kind == "latest":
            wanted = end
        elif target.kind == "datetime":
            found = (by_time or {}).get(tp, _NOT_FOUND)
            wanted = end if found == _NOT_FOUND else found
        elif target.kind == "offset":
            wanted = target.value
        elif current is None:
            unshiftable.append(tp)
            continue
        else:
            wanted = current + target.value
        plan.append(PlannedReset(tp[0], tp[1], current, min(max(wanted, start), end)))
    if unshiftable:
        raise NothingToShiftError(unshiftable)
    return plan
