"""One consumer group's membership as its coordinator serves it: JoinGroup, SyncGroup, Heartbeat and
LeaveGroup on the rebalancing core (group_rebalance.py), and what the coordinator needs (snapshot and restore,
offset-commit checks, subscriptions, description).

The leader's SyncGroup carries the assignments; they are persisted (the coordinator writes them to
`__consumer_offsets`) before any member, leader or follower, gets its share. Heartbeats keep a member
alive and tell it, with REBALANCE_IN_PROGRESS, when to rejoin.

Static members (`group.instance.id`, KIP-345) survive restarts: an instance rejoining under a new member id
takes its old place, with no rebalance unless the group's protocol changes, and the old member id is fenced.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import replace

from backbone.consumer_groups.group_member import (
    Member,
    Protocols,
    answer,
    common_protocols,
    select_protocol,
)
from backbone.consumer_groups.group_rebalance import Persist, RebalancingGroup
from backbone.consumer_groups.group_types import (
    CONSUMER_PROTOCOL_TYPE,
    DescribedMember,
    GroupConfig,
    GroupDescription,
    GroupSnapshot,
    GroupState,
    JoinResult,
    MemberSnapshot,
    SyncResult,
    subscription_topics,
)
from backbone.protocol.errors import ErrorCode

__all__ = ["Group", "GroupConfig", "GroupSnapshot", "GroupState", "MemberSnapshot"]

log = logging.getLogger(__name__)


class Group(RebalancingGroup):
    # -- the coordinator's interface ---------------------------------------------------------------------

    @classmethod
    def restore(
        cls, snapshot: GroupSnapshot, config: GroupConfig, persist: Persist, group_id: str = ""
    ) -> Group:
        """The group as loaded from `__consumer_offsets`: Stable with its members, or Empty.

        The snapshot does not hold the group id (the record key does): pass it, or set `group_id` after."""
        group = cls(group_id, config, persist)
        group.protocol_type = snapshot.protocol_type
        group.protocol_name = snapshot.protocol_name
        group.generation_id = snapshot.generation_id
        group.leader_id = snapshot.leader_id
        group.state_timestamp_ms = snapshot.state_timestamp_ms
        for saved in snapshot.members:
            group._add(Member.restore(saved, snapshot.protocol_type, snapshot.protocol_name))
        if group.members:
            group.state = GroupState.STABLE
            # Members must heartbeat to this coordinator within their session, as after any join.
            for member in group.members.values():
                group._schedule_session_expiry(member)
        return group

    def snapshot(self) -> GroupSnapshot:
        return GroupSnapshot(
            protocol_type=self.protocol_type,
            generation_id=self.generation_id,
            protocol_name=self.protocol_name,
            leader_id=self.leader_id,
            state_timestamp_ms=self.state_timestamp_ms,
            members=[m.snapshot(self.protocol_name) for m in self.members.values()],
        )

    def validate_offset_commit(
        self, member_id: str, instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        """Whether a member of this generation may commit (Kafka's validateOffsetCommit)."""
        if self.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        if generation_id >= 0 or member_id or instance_id is not None:
            error = self._check_member(member_id, instance_id)
            if error is not ErrorCode.none:
                return error
            if generation_id != self.generation_id:
                return ErrorCode.illegal_generation
            if self.state is GroupState.COMPLETING_REBALANCE:
                # The member has not got its new assignment yet: it would commit for partitions it may lose.
                return ErrorCode.rebalance_in_progress
            return ErrorCode.none
        # Without a generation only a group nobody is a member of may commit (assign()-style consumers).
        return ErrorCode.none if self.state is GroupState.EMPTY else ErrorCode.unknown_member_id

    def is_empty(self) -> bool:
        return not self.members and not self.pending_members

    def subscribed_topics(self) -> set[str] | None:
        """The union of the members' subscriptions; None if the group's protocol cannot tell."""
        if not self.members:
            return set()
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            subscribed = subscription_topics(member.metadata(self.protocol_name))
            if subscribed is None:
                return None
            topics |= subscribed
        return topics

    def mark_dead(self) -> None:
        self._end(ErrorCode.coordinator_not_available)

    def shutdown(self) -> None:
        self._end(ErrorCode.not_coordinator)

    def describe(self) -> GroupDescription:
        """What DescribeGroups shows: metadata and assignments only once Stable (as Kafka)."""
        stable = self.state is GroupState.STABLE
        members = (
            []
            if self.state is GroupState.DEAD
            else [
                DescribedMember(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.metadata(self.protocol_name) if stable else b"",
                    m.assignment if stable else b"",
                )
                for m in self.members.values()
            ]
        )
        return GroupDescription(
            self.state,
            self.protocol_type or "",
            (self.protocol_name or "") if stable else "",
            members,
        )

    # -- JoinGroup ------------------------------------------------------------------------------------

    async def join(
        self,
        *,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: Protocols,
        require_known_member_id: bool,
    ) -> JoinResult:
        """One JoinGroup; waits until the join phase completes (or answers at once with an error)."""
        if self.state is GroupState.DEAD:
            return JoinResult(ErrorCode.coordinator_not_available, member_id)
        if not (
            self.config.min_session_timeout_ms <= session_timeout_ms <= self.config.max_session_timeout_ms
        ):
            return JoinResult(ErrorCode.invalid_session_timeout, member_id)
        if not self._supports(protocol_type, protocols):
            return JoinResult(ErrorCode.inconsistent_group_protocol, member_id)
        request = Member(
            member_id,
            group_instance_id,
            client_id,
            client_host,
            rebalance_timeout_ms if rebalance_timeout_ms > 0 else session_timeout_ms,
            session_timeout_ms,
            protocol_type,
            protocols,
        )
        if not member_id:
            return await self._join_unknown_member(request, require_known_member_id)
        return await self._join_known_member(request)

    def _supports(self, protocol_type: str, protocols: Protocols) -> bool:
        if not protocol_type or not protocols:
            return False
        if not self.members:
            return True
        names = {name for name, _ in protocols}
        return protocol_type == self.protocol_type and bool(names & common_protocols(self.members.values()))

    def _is_full(self) -> bool:
        return len(self.members) + len(self.pending_members) >= self.config.max_size

    async def _join_unknown_member(self, request: Member, require_known_member_id: bool) -> JoinResult:
        instance_id = request.group_instance_id
        if instance_id is not None and instance_id in self.static_members:
            return await self._replace_static_member(request, self.static_members[instance_id])
        if self._is_full():
            return JoinResult(ErrorCode.group_max_size_reached)
        prefix = instance_id if instance_id is not None else request.client_id
        request.member_id = f"{prefix}-{uuid.uuid4()}"
        if instance_id is None and require_known_member_id:
            # KIP-394: a member learns its id first, so a join whose answer is lost leaves no ghost member.
            self.pending_members[request.member_id] = asyncio.get_running_loop().call_later(
                request.session_timeout_ms / 1000, self._expire_pending_member, request.member_id
            )
            return JoinResult(ErrorCode.member_id_required, request.member_id)
        return await self._add_member_and_rebalance(request)

    async def _join_known_member(self, request: Member) -> JoinResult:
        member_id = request.member_id
        if member_id in self.pending_members:
            self.pending_members.pop(member_id).cancel()
            return await self._add_member_and_rebalance(request)
        error = self._check_member(member_id, request.group_instance_id)
        if error is not ErrorCode.none:
            return JoinResult(error, member_id)
        member = self.members[member_id]
        unchanged = member.protocols == request.protocols
        if self.state is GroupState.PREPARING_REBALANCE:
            self._update_member(member, request)
            return await self._await_join(member)
        if self.state is GroupState.COMPLETING_REBALANCE and unchanged:
            # The member's JoinGroup answer was lost: repeat it.
            return self._join_result(member)
        if self.state is GroupState.STABLE and unchanged and member_id != self.leader_id:
            # A follower rejoining with the same metadata changes nothing.
            return self._join_result(member)
        # The leader rejoining (it wants a new assignment) or changed metadata: rebalance.
        self._update_member(member, request)
        self._prepare_rebalance(f"member {member_id} rejoined")
        return await self._await_join(member)

    async def _add_member_and_rebalance(self, request: Member) -> JoinResult:
        self._add(request)
        self._prepare_rebalance(f"member {request.member_id} joined")
        return await self._await_join(request)

    async def _replace_static_member(self, request: Member, old_member_id: str) -> JoinResult:
        """A known group.instance.id joined with no member id: a restarted static member (KIP-345)."""
        old = self.members[old_member_id]
        request.member_id = f"{request.group_instance_id}-{uuid.uuid4()}"
        self._replace_member(old, request)
        member = request
        # Kafka's rule: only a change of the group's protocol rebalances. A restarted member's subscription
        # bytes differ anyway (they carry its owned partitions and generation); if its topics changed, the
        # client asks to rejoin itself once it sees an assignment that does not match.
        # _add made the new member the leader if the group had none, so a leader is always known here.
        leader = self.members[self.leader_id] if self.leader_id is not None else member
        keeps_protocol = select_protocol(self.members.values(), leader) == self.protocol_name
        if self.state is GroupState.STABLE and keeps_protocol:
            # Keep the assignment and the generation; nobody else notices.
            error = await self._persist(self.snapshot())
            if error is not ErrorCode.none:
                if self.members.get(member.member_id) is member:
                    # Not stored, so not done: the old member id stays the instance's (as Kafka reverts).
                    self._replace_member(member, old)
                    self._schedule_session_expiry(old)
                return JoinResult(error)
            self._schedule_session_expiry(member)
            result = self._join_result(member)
            # The leader has no need to compute an assignment again (KIP-814).
            return replace(result, skip_assignment=member.member_id == self.leader_id)
        if self.state is not GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(f"static member {request.group_instance_id} rejoined")
        return await self._await_join(member)

    def _replace_member(self, old: Member, new: Member) -> None:
        """`new` takes `old`'s place (assignment, leadership); `old`'s waiting requests are fenced."""
        old.cancel_timer()
        answer(old.join_waiter, JoinResult(ErrorCode.fenced_instance_id, old.member_id))
        answer(old.sync_waiter, SyncResult(ErrorCode.fenced_instance_id))
        del self.members[old.member_id]
        new.assignment = old.assignment
        self._add(new)
        if self.leader_id == old.member_id:
            self.leader_id = new.member_id
        log.info(
            "event=static_member_replaced group=%s instance=%s old_member=%s new_member=%s",
            self.group_id,
            new.group_instance_id,
            old.member_id,
            new.member_id,
        )

    @staticmethod
    def _update_member(member: Member, request: Member) -> None:
        member.protocols = request.protocols
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.client_id = request.client_id
        member.client_host = request.client_host

    async def _await_join(self, member: Member) -> JoinResult:
        # A member may send JoinGroup again while its earlier one waits (a client retrying): the newer wins.
        answer(member.join_waiter, JoinResult(ErrorCode.rebalance_in_progress, member.member_id))
        waiter: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        member.join_waiter = waiter
        self._maybe_complete_join()
        return await waiter

    # -- SyncGroup, Heartbeat, LeaveGroup --------------------------------------------------------------

    async def sync(
        self,
        *,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> SyncResult:
        if self.state is GroupState.DEAD:
            return SyncResult(ErrorCode.coordinator_not_available)
        error = self._check_member(member_id, group_instance_id)
        if error is not ErrorCode.none:
            return SyncResult(error)
        if generation_id != self.generation_id:
            return SyncResult(ErrorCode.illegal_generation)
        if (protocol_type is not None and protocol_type != self.protocol_type) or (
            protocol_name is not None and protocol_name != self.protocol_name
        ):
            return SyncResult(ErrorCode.inconsistent_group_protocol)
        member = self.members[member_id]
        if self.state is GroupState.PREPARING_REBALANCE:
            return SyncResult(ErrorCode.rebalance_in_progress)
        if self.state is GroupState.STABLE:
            self._schedule_session_expiry(member)
            return self._sync_result(member)
        # CompletingRebalance: wait for the leader's assignments.
        answer(member.sync_waiter, SyncResult(ErrorCode.rebalance_in_progress))
        waiter: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        member.sync_waiter = waiter
        self._schedule_session_expiry(member)
        if member_id == self.leader_id:
            await self._complete_sync(assignments)
        return await waiter

    async def _complete_sync(self, assignments: dict[str, bytes]) -> None:
        generation = self.generation_id
        for member in self.members.values():
            member.assignment = assignments.get(member.member_id, b"")
        error = await self._persist(self.snapshot())
        if self.state is not GroupState.COMPLETING_REBALANCE or self.generation_id != generation:
            return  # a member left or joined meanwhile; its rebalance answered the waiters
        if error is not ErrorCode.none:
            log.warning("event=group_persist_failed group=%s error=%s", self.group_id, error.name)
            for member in self.members.values():
                member.assignment = b""
                answer(member.sync_waiter, SyncResult(error))
                member.sync_waiter = None
            self._prepare_rebalance("the group's assignment could not be stored")
            return
        self._cancel_phase_deadline()
        self._transition(GroupState.STABLE)
        for member in self.members.values():
            waiter, member.sync_waiter = member.sync_waiter, None
            answer(waiter, self._sync_result(member))

    def _sync_result(self, member: Member) -> SyncResult:
        return SyncResult(ErrorCode.none, member.assignment, self.protocol_type, self.protocol_name)

    def heartbeat(self, member_id: str, group_instance_id: str | None, generation_id: int) -> ErrorCode:
        if self.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        error = self._check_member(member_id, group_instance_id)
        if error is not ErrorCode.none:
            return error
        if generation_id != self.generation_id:
            return ErrorCode.illegal_generation
        self._schedule_session_expiry(self.members[member_id])
        if self.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave(self, leaving: list[tuple[str, str | None]]) -> tuple[ErrorCode, list[ErrorCode]]:
        """Members leaving: (member id, group.instance.id) each; the group's error and one per member."""
        if self.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available, [ErrorCode.coordinator_not_available] * len(leaving)
        return ErrorCode.none, [self._leave_one(member_id, instance_id) for member_id, instance_id in leaving]

    def _leave_one(self, member_id: str, instance_id: str | None) -> ErrorCode:
        if instance_id is not None:
            current = self.static_members.get(instance_id)
            if current is None:
                return ErrorCode.unknown_member_id
            if member_id and member_id != current:
                return ErrorCode.fenced_instance_id
            member_id = current
        elif member_id in self.pending_members:
            self.pending_members.pop(member_id).cancel()
            self._maybe_complete_join()
            return ErrorCode.none
        member = self.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        self._remove_and_rebalance(member, "left the group")
        return ErrorCode.none
