"""The rebalancing core of a consumer group (Kafka's classic group protocol): states, generations, timers.

    Empty -> PreparingRebalance -> CompletingRebalance -> Stable   (and Dead when deleted or unloaded)

A rebalance starts when a member joins, leaves, changes its metadata or misses its session timeout. In
PreparingRebalance the coordinator holds every JoinGroup until all known members have rejoined or the
rebalance timeout (the largest of the members') passes; members that did not rejoin are dropped. A new,
empty group first waits `group.initial.rebalance.delay.ms` (extended by each newcomer, up to the rebalance
timeout) so a fleet starting together gets one rebalance, not one per member. Completing the join starts a
new generation: every member learns the chosen protocol and the leader, and the leader alone gets everyone's
metadata. Members that send no SyncGroup within the rebalance timeout are dropped in turn.

`Group` (group.py) builds the requests on this; nothing here touches ZooKeeper, sockets or logs (storage is
the coordinator's, through `persist`). Everything runs on the event loop; timers are loop callbacks.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from backbone.consumer_groups.group_member import Member, answer, select_protocol
from backbone.consumer_groups.group_types import (
    GroupConfig,
    GroupSnapshot,
    GroupState,
    JoinedMember,
    JoinResult,
    SyncResult,
)
from backbone.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

Persist = Callable[[GroupSnapshot], Awaitable[ErrorCode]]


def now_ms() -> int:
    return int(time.time() * 1000)


class RebalancingGroup:
    def __init__(self, group_id: str, config: GroupConfig, persist: Persist) -> None:
        self.group_id = group_id
        self.config = config
        self._persist = persist
        self.state = GroupState.EMPTY
        self.state_timestamp_ms = now_ms()
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation_id = 0
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        # Member ids handed out with MEMBER_ID_REQUIRED (JoinGroup v4+) whose second join has not come yet.
        self.pending_members: dict[str, asyncio.TimerHandle] = {}
        # The end of the join phase (PreparingRebalance) or of the wait for SyncGroups (CompletingRebalance).
        self._phase_deadline: asyncio.TimerHandle | None = None
        self._initial_delay_limit_ms = 0.0  # the longest an initial delay may stretch (monotonic ms)
        self._background: set[asyncio.Task[None]] = set()

    def _add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def _join_result(self, member: Member) -> JoinResult:
        is_leader = member.member_id == self.leader_id
        return JoinResult(
            ErrorCode.none,
            member.member_id,
            self.generation_id,
            self.protocol_type,
            self.protocol_name,
            self.leader_id or "",
            [
                JoinedMember(m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
                for m in self.members.values()
            ]
            if is_leader
            else [],
        )

    def snapshot(self) -> GroupSnapshot:
        raise NotImplementedError  # Group's: what is stored

    def _transition(self, state: GroupState) -> None:
        if state is not self.state:
            log.info(
                "event=group_state group=%s from=%s to=%s generation=%d members=%d",
                self.group_id,
                self.state.value,
                state.value,
                self.generation_id,
                len(self.members),
            )
        self.state = state
        self.state_timestamp_ms = now_ms()

    def _rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def _prepare_rebalance(self, reason: str) -> None:
        if self.state is GroupState.PREPARING_REBALANCE:
            return  # already collecting joins; this one's reason is covered
        if self.state is GroupState.COMPLETING_REBALANCE:
            # Assignments of the generation being completed will never be handed out.
            for member in self.members.values():
                member.assignment = b""
                answer(member.sync_waiter, SyncResult(ErrorCode.rebalance_in_progress))
                member.sync_waiter = None
        was_empty = self.state is GroupState.EMPTY
        self._transition(GroupState.PREPARING_REBALANCE)
        log.info("event=rebalance_started group=%s reason=%r", self.group_id, reason)
        loop = asyncio.get_running_loop()
        self._cancel_phase_deadline()
        if was_empty and self.config.initial_rebalance_delay_ms > 0:
            self._initial_delay_limit_ms = time.monotonic() * 1000 + self._rebalance_timeout_ms()
            delay_ms = min(self.config.initial_rebalance_delay_ms, self._rebalance_timeout_ms())
        else:
            self._initial_delay_limit_ms = 0.0
            delay_ms = self._rebalance_timeout_ms()
        self._phase_deadline = loop.call_later(delay_ms / 1000, self._join_phase_over)
        # Everyone may have joined already (e.g. the last member left): then there is nothing to wait for.
        self._maybe_complete_join()

    def _cancel_phase_deadline(self) -> None:
        if self._phase_deadline is not None:
            self._phase_deadline.cancel()
            self._phase_deadline = None

    def _maybe_complete_join(self) -> None:
        if self.state is not GroupState.PREPARING_REBALANCE:
            return
        if self._initial_delay_limit_ms:
            self._extend_initial_delay()
            return
        if not self.pending_members and all(m.join_waiter is not None for m in self.members.values()):
            self._complete_join()

    def _extend_initial_delay(self) -> None:
        """A newcomer during the initial delay pushes the end of the join phase out (up to the timeout)."""
        if self._phase_deadline is None:
            return
        remaining_ms = self._initial_delay_limit_ms - time.monotonic() * 1000
        delay_ms = min(self.config.initial_rebalance_delay_ms, max(remaining_ms, 0))
        self._phase_deadline.cancel()
        self._phase_deadline = asyncio.get_running_loop().call_later(delay_ms / 1000, self._join_phase_over)

    def _join_phase_over(self) -> None:
        self._phase_deadline = None
        self._initial_delay_limit_ms = 0.0
        if self.state is GroupState.PREPARING_REBALANCE:
            self._complete_join()

    def _complete_join(self) -> None:
        self._cancel_phase_deadline()
        self._initial_delay_limit_ms = 0.0
        for member in [m for m in self.members.values() if m.join_waiter is None]:
            self._remove(member, "not rejoined")
        self.generation_id += 1
        if not self.members:
            # The protocol type stays: an empty consumer group is still listed as one (as Kafka does).
            self.protocol_name = None
            self.leader_id = None
            self._transition(GroupState.EMPTY)
            self._persist_in_background()
            return
        if self.leader_id not in self.members:
            self.leader_id = next(iter(self.members))
        self.protocol_name = select_protocol(self.members.values(), self.members[self.leader_id])
        self._transition(GroupState.COMPLETING_REBALANCE)
        for member in self.members.values():
            waiter, member.join_waiter = member.join_waiter, None
            answer(waiter, self._join_result(member))
            self._schedule_session_expiry(member)
        self._phase_deadline = asyncio.get_running_loop().call_later(
            self._rebalance_timeout_ms() / 1000, self._sync_phase_over
        )

    def _sync_phase_over(self) -> None:
        """Members that sent no SyncGroup within the rebalance timeout are dropped (Kafka's pending-sync
        timeout): without the leader's, the others would wait for ever while their sessions are held open."""
        self._phase_deadline = None
        if self.state is not GroupState.COMPLETING_REBALANCE:
            return
        for member in [m for m in self.members.values() if m.sync_waiter is None]:
            self._remove(member, "no SyncGroup")
        self._prepare_rebalance("members sent no SyncGroup within the rebalance timeout")

    def _remove(self, member: Member, reason: str) -> None:
        log.info("event=member_removed group=%s member=%s reason=%r", self.group_id, member.member_id, reason)
        member.cancel_timer()
        self.members.pop(member.member_id, None)
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == (
            member.member_id
        ):
            del self.static_members[member.group_instance_id]
        if self.leader_id == member.member_id:
            self.leader_id = next(iter(self.members), None)

    def _remove_and_rebalance(self, member: Member, reason: str) -> None:
        answer(member.join_waiter, JoinResult(ErrorCode.unknown_member_id, member.member_id))
        answer(member.sync_waiter, SyncResult(ErrorCode.unknown_member_id))
        self._remove(member, reason)
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(f"member {member.member_id} left ({reason})")
        elif self.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join()

    def _persist_in_background(self) -> None:
        task = asyncio.get_running_loop().create_task(self._persist_logged(self.snapshot()))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _persist_logged(self, snapshot: GroupSnapshot) -> None:
        error = await self._persist(snapshot)
        if error is not ErrorCode.none:
            log.warning("event=group_persist_failed group=%s error=%s", self.group_id, error.name)

    def _schedule_session_expiry(self, member: Member) -> None:
        member.cancel_timer()
        member.session_timer = asyncio.get_running_loop().call_later(
            member.session_timeout_ms / 1000, self._session_expired, member
        )

    def _session_expired(self, member: Member) -> None:
        member.session_timer = None
        if self.members.get(member.member_id) is not member:
            return
        if member.join_waiter is not None or member.sync_waiter is not None:
            # A member waiting on us cannot heartbeat; the rebalance timeout bounds that wait instead.
            self._schedule_session_expiry(member)
            return
        self._remove_and_rebalance(member, "session timeout")

    def _expire_pending_member(self, member_id: str) -> None:
        if self.pending_members.pop(member_id, None) is not None:
            log.info("event=pending_member_expired group=%s member=%s", self.group_id, member_id)
            self._maybe_complete_join()

    def _check_member(self, member_id: str, instance_id: str | None) -> ErrorCode:
        """FENCED_INSTANCE_ID for a stale member id of a static member, UNKNOWN_MEMBER_ID for a stranger."""
        if instance_id is not None:
            current = self.static_members.get(instance_id)
            if current is not None and current != member_id:
                return ErrorCode.fenced_instance_id
        return ErrorCode.none if member_id in self.members else ErrorCode.unknown_member_id

    def _end(self, error: ErrorCode) -> None:
        """Dead: timers stop and every waiting request is answered with `error`."""
        self._cancel_phase_deadline()
        for timer in self.pending_members.values():
            timer.cancel()
        self.pending_members.clear()
        for member in self.members.values():
            member.cancel_timer()
            answer(member.join_waiter, JoinResult(error, member.member_id))
            answer(member.sync_waiter, SyncResult(error))
            member.join_waiter = member.sync_waiter = None
        self._transition(GroupState.DEAD)
