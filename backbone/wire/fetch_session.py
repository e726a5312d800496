"""The fetcher's half of incremental fetch sessions (KIP-227): what each Fetch names of its partitions.

The first fetch is full and carries epoch 0, which asks the leader to open a session; the answer names its
id. Later fetches carry the id and the next epoch, name only the partitions whose row (fetch offset, leader
epoch, ...) differs from what the session holds, and list the partitions dropped since as forgotten; the
answer then holds only the partitions with news. After any failure the next fetch is full again, with
epoch 0 and the old id, which closes that session on the leader and opens a new one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from backbone.protocol.errors import FetchSessionIdNotFoundError

INITIAL_EPOCH = 0
_MAX_EPOCH = 2**31 - 1

Row = Mapping[str, Any]


class FetchSessionBuilder:
    def __init__(self) -> None:
        self.session_id = 0
        self.epoch = INITIAL_EPOCH
        self._held: dict[tuple[str, int], Row] = {}  # partition -> the row the leader's session holds
        self._pending: dict[tuple[str, int], Row] | None = None

    def next_request(
        self, wanted: Mapping[tuple[str, int], Row]
    ) -> tuple[int, int, dict[tuple[str, int], Row], list[tuple[str, int]]]:
        """(session id, epoch, the rows to send, the partitions to forget) for a fetch of `wanted`."""
        self._pending = dict(wanted)
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
        self.epoch = 1 if self.epoch == _MAX_EPOCH else self.epoch + 1
        self._held, self._pending = self._pending, None

    def failed(self, error: Exception | None = None) -> None:
        """The fetch failed (a session error, a lost connection): the next one is full."""
        self.reset(session_id=0 if isinstance(error, FetchSessionIdNotFoundError) else self.session_id)

    def reset(self, session_id: int) -> None:
        self.session_id = session_id
        self.epoch = INITIAL_EPOCH
        self._held = {}
        self._pending = None
