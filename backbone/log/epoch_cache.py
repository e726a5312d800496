"""The leader epoch cache: which leader epoch wrote which offsets, for safe truncation after failover.

Entries (epoch, start offset) are strictly increasing in both fields. They are persisted in
`leader-epoch-checkpoint` in Kafka's text format (a version line `0`, a count line, then one
"epoch start_offset" line per entry), replaced atomically (temp file, fsync, rename, fsync directory) on
every change. The semantics follow Kafka's LeaderEpochFileCache, except where noted in `end_offset_for`.
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from pathlib import Path
from typing import NamedTuple

from backbone.log.files import read_checkpoint, write_checkpoint

log = logging.getLogger(__name__)

CHECKPOINT_NAME = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochCache:
    """(epoch, start offset) entries of one partition, mirrored in its checkpoint file."""

    def __init__(self, path: Path, entries: list[EpochEntry] | None = None) -> None:
        self.path = path
        self._entries: list[EpochEntry] = list(entries or [])
        self._epochs: list[int] = [entry.epoch for entry in self._entries]
        # Set while memory holds changes the file does not; a failed write is retried on the next change or
        # by persist_if_dirty (the log calls it before it advances its recovery point).
        self._dirty = False

    @classmethod
    def load(cls, path: Path) -> tuple[LeaderEpochCache, bool]:
        """The cache from its file; the flag is False when the file was missing or unreadable (rebuild it)."""
        try:
            rows = read_checkpoint(path, 2)
        except ValueError as exc:
            log.warning("event=epoch_checkpoint_invalid path=%s reason=%r", path, str(exc))
            return cls(path), False
        if rows is None:
            return cls(path), False
        cache = cls(path)
        try:
            for epoch, start in rows:
                cache.assign(int(epoch), int(start), persist=False)
        except ValueError as exc:
            log.warning("event=epoch_checkpoint_invalid path=%s reason=%r", path, str(exc))
            return cls(path), False
        return cache, True

    # -- queries ---------------------------------------------------------------------------------------

    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int | None:
        return self._entries[-1].epoch if self._entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch.

        The epoch returned is the largest cached epoch <= the requested one; its end offset is the start
        offset of the next higher epoch, or the log end offset when the latest epoch is requested.
        UNDEFINED (-1, -1) for an undefined or unknown-higher epoch, and when the requested epoch is below
        the earliest cached one (so the follower falls back to its high watermark; recent Kafka versions
        instead answer (requested epoch, start offset of the earliest entry) there).
        """
        undefined = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return undefined
        if requested_epoch == self._entries[-1].epoch:
            return requested_epoch, log_end_offset
        higher = bisect_right(self._epochs, requested_epoch)
        if higher == len(self._entries) or higher == 0:
            return undefined
        return self._entries[higher - 1].epoch, self._entries[higher].start_offset

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch that wrote `offset` according to the cache (None before the first entry)."""
        starts = [entry.start_offset for entry in self._entries]
        i = bisect_right(starts, offset) - 1
        return self._entries[i].epoch if i >= 0 else None

    # -- changes ---------------------------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int, *, persist: bool = True) -> bool:
        """Record that `epoch` starts at `start_offset`; return whether the cache changed.

        Nothing changes when the latest entry already has this epoch at or below this offset. Otherwise
        entries that would break monotonicity (epoch >= `epoch` or start >= `start_offset`) are removed
        first, as Kafka does, so a new leader's entry always ends the list.
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry epoch={epoch} start_offset={start_offset}")
        if self._entries:
            latest = self._entries[-1]
            if latest.epoch == epoch and latest.start_offset <= start_offset:
                return False
        removed = []
        while self._entries and (
            self._entries[-1].epoch >= epoch or self._entries[-1].start_offset >= start_offset
        ):
            removed.append(self._entries.pop())
            self._epochs.pop()
        if len(removed) > 1 or (removed and removed[0].start_offset != start_offset):
            log.warning(
                "event=epoch_entries_truncated path=%s new_epoch=%d start_offset=%d removed=%s",
                self.path,
                epoch,
                start_offset,
                removed,
            )
        self._entries.append(EpochEntry(epoch, start_offset))
        self._epochs.append(epoch)
        self._changed(persist)
        return True

    def truncate_from_end(self, end_offset: int) -> None:
        """Remove entries starting at or after `end_offset` (the log was truncated there)."""
        changed = False
        while self._entries and self._entries[-1].start_offset >= end_offset >= 0:
            self._entries.pop()
            self._epochs.pop()
            changed = True
        if changed:
            self._changed(True)

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop entries wholly below the new log start; the last of them is kept, moved to `start_offset`."""
        keep_from = bisect_right([entry.start_offset for entry in self._entries], start_offset) - 1
        if keep_from < 0 or (keep_from == 0 and self._entries[0].start_offset == start_offset):
            return
        first = EpochEntry(self._entries[keep_from].epoch, start_offset)
        self._entries[: keep_from + 1] = [first]
        self._epochs[: keep_from + 1] = [first.epoch]
        self._changed(True)

    def clear(self) -> None:
        self._entries.clear()
        self._epochs.clear()
        self._changed(True)

    def persist_if_dirty(self) -> None:
        if self._dirty:
            self.persist()

    def persist(self) -> None:
        """Write the checkpoint file now (atomically)."""
        self._dirty = True
        write_checkpoint(self.path, [(entry.epoch, entry.start_offset) for entry in self._entries])
        self._dirty = False

    def _changed(self, persist: bool) -> None:
        self._dirty = True
        if persist:
            self.persist()
