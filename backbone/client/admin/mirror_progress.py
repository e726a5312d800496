"""A mirror's lag, readable by any Admin client from the source cluster alone.

A mirror commits its source offsets with metadata naming the timestamp of the newest record it copied on
that partition and the id of the source topic it copied from
(`newest-copied-ms=1700000000000;source-topic-id=AAAAAAAAAAAAAAAAAAAAAA`): the id tells a mirror started
again whether the topic it resumes is still the one it copied, or one deleted and created again. The lag
in records is the log end minus the committed offset; the lag in seconds is how far the copy is behind in
event time: the newest source record's timestamp (ListOffsets, max timestamp) minus the newest copied
one's, 0 once caught up.
"""

from __future__ import annotations

from dataclasses import dataclass

_NEWEST_COPIED = "newest-copied-ms"
_SOURCE_TOPIC_ID = "source-topic-id"


def commit_metadata(newest_copied_ms: int | None, source_topic_id: str | None = None) -> str:
    """The metadata a mirror commits a partition's offset with."""
    fields = {_NEWEST_COPIED: newest_copied_ms, _SOURCE_TOPIC_ID: source_topic_id}
    return ";".join(f"{name}={value}" for name, value in fields.items() if value is not None)


def _fields(metadata: str | None) -> dict[str, str]:
    """The `name=value` fields of a mirror's commit metadata; empty for any other consumer's metadata."""
    if not metadata or not metadata.startswith((_NEWEST_COPIED + "=", _SOURCE_TOPIC_ID + "=")):
        return {}
    return dict(field.partition("=")[::2] for field in metadata.split(";"))


def newest_copied_ms(metadata: str | None) -> int | None:
    """The timestamp in a mirror's commit metadata; None for other metadata (any consumer's commits)."""
    try:
        return int(_fields(metadata)[_NEWEST_COPIED])
    except (KeyError, ValueError):
        return None


def copied_topic_id(metadata: str | None) -> str | None:
    """The source topic id in a mirror's commit metadata; None when it names none (older commits too)."""
    return _fields(metadata).get(_SOURCE_TOPIC_ID) or None


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
