"""One member of a consumer group as its coordinator keeps it, and the choice of the group's protocol."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field

from backbone.consumer_groups.group_types import JoinResult, MemberSnapshot, SyncResult

# (protocol name, the member's metadata for it), in the member's order of preference.
Protocols = list[tuple[str, bytes]]


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    assignment: bytes = b""
    # The member's JoinGroup or SyncGroup waiting for the rest of the group, if any.
    join_waiter: asyncio.Future[JoinResult] | None = None
    sync_waiter: asyncio.Future[SyncResult] | None = None
    session_timer: asyncio.TimerHandle | None = field(default=None, repr=False)

    @classmethod
    def restore(cls, saved: MemberSnapshot, protocol_type: str | None, protocol_name: str | None) -> Member:
        """A stored member: only its metadata for the group's chosen protocol was kept."""
        return cls(
            saved.member_id,
            saved.group_instance_id,
            saved.client_id,
            saved.client_host,
            saved.rebalance_timeout_ms,
            saved.session_timeout_ms,
            protocol_type or "",
            [(protocol_name or "", saved.subscription)],
            saved.assignment,
        )

    def snapshot(self, protocol_name: str | None) -> MemberSnapshot:
        return MemberSnapshot(
            self.member_id,
            self.group_instance_id,
            self.client_id,
            self.client_host,
            self.rebalance_timeout_ms,
            self.session_timeout_ms,
            self.metadata(protocol_name),
            self.assignment,
        )

    def metadata(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def cancel_timer(self) -> None:
        if self.session_timer is not None:
            self.session_timer.cancel()
            self.session_timer = None


def answer(waiter: asyncio.Future | None, result: object) -> None:
    """Complete a waiting request unless it was answered already."""
    if waiter is not None and not waiter.done():
        waiter.set_result(result)


def common_protocols(members: Iterable[Member]) -> set[str]:
    """The protocols every member supports."""
    common: set[str] | None = None
    for member in members:
        names = {name for name, _ in member.protocols}
        common = names if common is None else common & names
    return common or set()


def select_protocol(members: Iterable[Member], leader: Member) -> str:
    """The protocol every member supports that most members prefer (Kafka's vote)."""
    members = list(members)
    candidates = common_protocols(members)
    votes: dict[str, int] = {}
    for member in members:
        choice = next(name for name, _ in member.protocols if name in candidates)
        votes[choice] = votes.get(choice, 0) + 1
    # Ties go to the protocol the leader prefers, which keeps the choice deterministic.
    leader_order = [name for name, _ in leader.protocols]
    return max(votes, key=lambda name: (votes[name], -leader_order.index(name)))
