"""The fetcher's half of incremental fetch sessions (KIP-227): what each Fetch names of its partitions.

The first fetch is full and carries epoch 0, which asks the leader to open a session; the answer names its
id. Later fetches carry the id and the next epoch, name only the partitions whose row (fetch offset, leader
epoch, ...) differs from what the session holds, and list the partitions dropped since as forgotten; the
answer then holds only the partitions with news. After any failure the next fetch is full again, with
epoch 0 and the old id, which closes that session on the leader and opens a new one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Generic

from backbone.protocol.errors import FetchSessionIdNotFoundError, InvalidFetchSessionEpochError
from backbone.wire.fetch import FetchRequestPartition, K

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_MAX_EPOCH = 2**31 - 1


def next_epoch(epoch: int) -> int:
    """The epoch after `epoch`; past the largest int32 it wraps to 1 (0 and -1 mean open and close)."""
    return 1 if epoch == _MAX_EPOCH else epoch + 1


Row = FetchRequestPartition


class FetchSessionBuilder(Generic[K]):
    def __init__(self) -> None:
        self.session_id = 0
        self.epoch = INITIAL_EPOCH
        self._held: dict[K, Row] = {}  # partition -> the row the leader's session holds
        self._owners: dict[K, int] = {}  # partition -> whom its answers went to
        self._pending: tuple[dict[K, Row], dict[K, int]] | None = None  # the same, for the fetch in flight

    def next_request(
        self, wanted: Mapping[K, Row], owners: Mapping[K, int] | None = None
    ) -> tuple[int, int, dict[K, Row], list[K]]:
        """(session id, epoch, the rows to send, the partitions to forget) for a fetch of `wanted`.

        `owners` names whom each partition's answers are for (a consumer's state of it). The leader answers
        a session's partition only with news, so a new owner would never hear what the old one was told (the
        high watermark of a partition idle since): a change of owner makes the fetch full again."""
        self._pending = (dict(wanted), dict(owners or {}))
        if owners is not None and any(self._owners.get(key, owner) != owner for key, owner in owners.items()):
            self.epoch = INITIAL_EPOCH
        if self.epoch == INITIAL_EPOCH:
            return self.session_id, INITIAL_EPOCH, dict(wanted), []
        send = {key: row for key, row in wanted.items() if self._held.get(key) != row}
        forgotten = [key for key in self._held if key not in wanted]
        return self.session_id, self.epoch, send, forgotten

    def answered(self, session_id: int) -> None:
        """The fetch just built was answered without a top-level error, naming `session_id`."""
        assert self._pending is not None, "answered() without next_request()"
        full = self.epoch == INITIAL_EPOCH
        if session_id == 0 or (not full and session_id != self.session_id):
            self.reset(session_id=0)  # no slot, or the leader ended the session: full fetches again
            return
        self.session_id = session_id
        self.epoch = next_epoch(self.epoch)
        (self._held, self._owners), self._pending = self._pending, None

    def failed(self, error: Exception | None = None) -> bool:
        """The fetch failed (a session error, a lost connection): the next one is full. True when `error` was
        the session's own (evicted, or the broker restarted): that full fetch may go at once."""
        self.reset(session_id=0 if isinstance(error, FetchSessionIdNotFoundError) else self.session_id)
        return isinstance(error, FetchSessionIdNotFoundError | InvalidFetchSessionEpochError)

    def reset(self, session_id: int) -> None:
        self.session_id = session_id
        self.epoch = INITIAL_EPOCH
        self._held = {}
        self._owners = {}
        self._pending = None
