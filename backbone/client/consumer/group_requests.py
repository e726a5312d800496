"""Requests to a group's coordinator, built for whatever version was negotiated and read back as plain values.

FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit and OffsetFetch. Each function
takes a `BrokerConnection` (the consumer keeps a connection of its own to the coordinator, as the Java client
does, so a JoinGroup the coordinator holds for a whole rebalance never queues Fetch answers behind it).
Per-version differences (FindCoordinator v4 and OffsetFetch v8 batch keys and groups, LeaveGroup v3 names
members) are handled here, so callers see one shape. Error codes are returned where the caller decides
what they mean (the join and sync round trips); elsewhere they are raised.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from backbone.client.structs import OffsetAndMetadata, TopicPartition
from backbone.protocol.api import ApiKey
from backbone.protocol.errors import ErrorCode, error_for
from backbone.wire.connection import BrokerConnection
from backbone.wire.messages import group_by_topic, indexes_by_topic

__all__ = [
    "PROTOCOL_TYPE",
    "CoordinatorAddress",
    "JoinResult",
    "MemberMetadata",
    "find_coordinator",
    "heartbeat",
    "join_group",
    "leave_group",
    "offset_commit",
    "offset_fetch",
    "sync_group",
]

PROTOCOL_TYPE = "consumer"
_GROUP_KEY = 0  # FindCoordinator key type of a consumer group (1 would be a transactional id)


@dataclass(frozen=True, slots=True)
class CoordinatorAddress:
    node_id: int
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    """One member as the JoinGroup answer shows it to the leader."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    error_code: ErrorCode
    generation_id: int
    protocol_name: str | None
    leader_id: str
    member_id: str
    members: tuple[MemberMetadata, ...]
    skip_assignment: bool = False

    @property
    def is_leader(self) -> bool:
        return bool(self.member_id) and self.leader_id == self.member_id


async def find_coordinator(conn: BrokerConnection, group_id: str) -> CoordinatorAddress:
    """The broker coordinating `group_id` (raises the Kafka error when there is none yet)."""
    response = await conn.request_kio(
        ApiKey.FIND_COORDINATOR, key=group_id, key_type=_GROUP_KEY, coordinator_keys=[group_id]
    )
    found: Any = response
    if hasattr(response, "coordinators"):  # v4+: one entry per key asked for
        entries = [c for c in response.coordinators if c.key == group_id]
        if not entries:
            raise error_for(ErrorCode.coordinator_not_available, f"no coordinator named for {group_id!r}")
        found = entries[0]
    if found.error_code:
        detail = f": {found.error_message}" if found.error_message else ""
        raise error_for(found.error_code, f"FindCoordinator for group {group_id!r}{detail}")
    return CoordinatorAddress(int(found.node_id), found.host, int(found.port))


async def join_group(
    conn: BrokerConnection,
    group_id: str,
    *,
    member_id: str,
    group_instance_id: str | None,
    session_timeout_ms: int,
    rebalance_timeout_ms: int,
    protocols: Iterable[tuple[str, bytes]],
    reason: str | None,
    timeout_ms: int,
) -> JoinResult:
    """One JoinGroup round trip; the coordinator may hold it for up to the rebalance timeout."""
    response = await conn.request_kio(
        ApiKey.JOIN_GROUP,
        group_id=group_id,
        session_timeout=session_timeout_ms,
        rebalance_timeout=rebalance_timeout_ms,
        member_id=member_id,
        group_instance_id=group_instance_id,
        protocol_type=PROTOCOL_TYPE,
        protocols=[{"name": name, "metadata": metadata} for name, metadata in protocols],
        reason=reason,
        request_timeout_ms=timeout_ms,
    )
    return JoinResult(
        error_code=ErrorCode(response.error_code),
        generation_id=int(response.generation_id),
        protocol_name=response.protocol_name,
        leader_id=response.leader,
        member_id=response.member_id,
        members=tuple(
            MemberMetadata(m.member_id, getattr(m, "group_instance_id", None), bytes(m.metadata))
            for m in response.members
        ),
        skip_assignment=bool(getattr(response, "skip_assignment", False)),
    )


async def sync_group(
    conn: BrokerConnection,
    group_id: str,
    *,
    generation_id: int,
    member_id: str,
    group_instance_id: str | None,
    protocol_name: str | None,
    assignments: Mapping[str, bytes],
    timeout_ms: int,
) -> tuple[ErrorCode, bytes]:
    """One SyncGroup round trip: (error code, this member's assignment bytes)."""
    response = await conn.request_kio(
        ApiKey.SYNC_GROUP,
        group_id=group_id,
        generation_id=generation_id,
        member_id=member_id,
        group_instance_id=group_instance_id,
        protocol_type=PROTOCOL_TYPE,
        protocol_name=protocol_name,
        assignments=[{"member_id": m, "assignment": a} for m, a in assignments.items()],
        request_timeout_ms=timeout_ms,
    )
    return ErrorCode(response.error_code), bytes(response.assignment or b"")


async def heartbeat(
    conn: BrokerConnection,
    group_id: str,
    *,
    generation_id: int,
    member_id: str,
    group_instance_id: str | None,
) -> ErrorCode:
    response = await conn.request_kio(
        ApiKey.HEARTBEAT,
        group_id=group_id,
        generation_id=generation_id,
        member_id=member_id,
        group_instance_id=group_instance_id,
    )
    return ErrorCode(response.error_code)


async def leave_group(
    conn: BrokerConnection, group_id: str, *, member_id: str, group_instance_id: str | None, reason: str
) -> ErrorCode:
    """Leave the group (v3+ name the member in a list; their per-member error wins over the top-level one)."""
    response = await conn.request_kio(
        ApiKey.LEAVE_GROUP,
        group_id=group_id,
        member_id=member_id,
        members=[{"member_id": member_id, "group_instance_id": group_instance_id, "reason": reason}],
    )
    for member in getattr(response, "members", ()):
        if member.error_code:
            return ErrorCode(member.error_code)
    return ErrorCode(response.error_code)


async def offset_commit(
    conn: BrokerConnection,
    group_id: str,
    offsets: Mapping[TopicPartition, OffsetAndMetadata],
    *,
    generation_id: int = -1,
    member_id: str = "",
    group_instance_id: str | None = None,
) -> dict[TopicPartition, ErrorCode]:
    """Commit `offsets`; the error code of each partition (ErrorCode.none where it was stored)."""
    rows = (
        (
            tp,
            {
                "partition_index": tp.partition,
                "committed_offset": meta.offset,
                "committed_leader_epoch": meta.leader_epoch,
                "committed_metadata": meta.metadata,
            },
        )
        for tp, meta in offsets.items()
    )
    response = await conn.request_kio(
        ApiKey.OFFSET_COMMIT,
        group_id=group_id,
        generation_id_or_member_epoch=generation_id,
        member_id=member_id,
        group_instance_id=group_instance_id,
        topics=group_by_topic(rows),
    )
    return {
        TopicPartition(topic.name, int(part.partition_index)): ErrorCode(part.error_code)
        for topic in response.topics
        for part in topic.partitions
    }


async def offset_fetch(
    conn: BrokerConnection, group_id: str, partitions: Iterable[TopicPartition] | None
) -> dict[TopicPartition, OffsetAndMetadata | None]:
    """The committed offsets of `partitions` (None: every partition the group has committed).

    A partition without a committed offset maps to None. Group-level errors (NOT_COORDINATOR,
    COORDINATOR_LOAD_IN_PROGRESS, ...) and partition errors are raised.
    """
    topics = None if partitions is None else indexes_by_topic(partitions)
    response = await conn.request_kio(
        ApiKey.OFFSET_FETCH,
        group_id=group_id,
        topics=topics,
        groups=[{"group_id": group_id, "topics": topics}],
    )
    answer: Any = response
    if hasattr(response, "groups"):  # v8+: one entry per group asked for
        answer = next((g for g in response.groups if g.group_id == group_id), None)
        if answer is None:
            raise error_for(ErrorCode.coordinator_not_available, f"OffsetFetch left out group {group_id!r}")
    code = getattr(answer, "error_code", ErrorCode.none)
    if code:
        raise error_for(code, f"OffsetFetch for group {group_id!r}")
    result: dict[TopicPartition, OffsetAndMetadata | None] = {}
    for topic in answer.topics:
        for part in topic.partitions:
            tp = TopicPartition(topic.name, int(part.partition_index))
            if part.error_code:
                raise error_for(part.error_code, f"OffsetFetch of {tp} for group {group_id!r}")
            offset = int(part.committed_offset)
            result[tp] = (
                None
                if offset < 0
                else OffsetAndMetadata(
                    offset, part.metadata or "", int(getattr(part, "committed_leader_epoch", -1))
                )
            )
    return result
