"""A mirror's lag, readable by any Admin client from the source cluster alone.

A mirror commits its source offsets with metadata naming the timestamp of the newest record it copied on
that partition (`newest-copied-ms=1700000000000`). The lag in records is the log end minus the committed
offset; the lag in seconds is how far the copy is behind in event time: the newest source record's
timestamp (ListOffsets, max timestamp) minus the newest copied one's, 0 once caught up.
"""

from __future__ import annotations

from dataclasses import dataclass

_PREFIX = "newest-copied-ms="


def commit_metadata(newest_copied_ms: int | None) -> str:
    """The metadata a mirror commits a partition's offset with."""
    return "" if newest_copied_ms is None else f"{_PREFIX}{newest_copied_ms}"


def newest_copied_ms(metadata: str | None) -> int | None:
    """The timestamp in a mirror's commit metadata; None for other metadata (any consumer's commits)."""
    if not metadata or not metadata.startswith(_PREFIX):
        return None
    try:
        return int(metadata[len(_PREFIX) :])
    except ValueError:
        return None


@dataclass(frozen=True)
class MirrorLag:
    """A mirror group's position on one source partition."""

    topic: str
    partition: int
    committed_offset: int
    log_end_offset: int | None
    """None when no leader answered for the partition."""
    records: int | None
    """Records still to copy: log end minus committed (None when the log end is unknown)."""
    seconds: float | None
    """Event-time lag: newest source record's timestamp minus the newest copied one's; 0.0 when caught up,
    None when lagging but the mirror's commits carry no timestamp."""


def lag_seconds(records: int | None, newest_source_ms: int | None, copied_ms: int | None) -> float | None:
    if records is not None and records <= 0:
        return 0.0
    if newest_source_ms is None or copied_ms is None or newest_source_ms < 0:
        return None
    return max(0.0, (newest_source_ms - copied_ms) / 1000)
