"""A consumer's membership of its group: the coordinator, the join/sync round trips, heartbeats, commits.

Kafka's classic group protocol, as the Java client runs it:

- **Coordinator.** FindCoordinator (to any broker) names the group's coordinator; the member then opens a
  connection of its own to it, so a JoinGroup held for a whole rebalance never delays Fetch answers from
  the same broker. NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE or a lost connection send it looking again.
- **Joining.** JoinGroup (from v4 the coordinator first answers MEMBER_ID_REQUIRED with an id to come back
  with), then SyncGroup: the leader, chosen by the coordinator, runs the assignor over every member's
  subscription and hands the assignments in; everyone gets its own back. UNKNOWN_MEMBER_ID and
  ILLEGAL_GENERATION start over (with a fresh member id for the first), REBALANCE_IN_PROGRESS rejoins.
  The rebalance timeout sent is `max.poll.interval.ms`, the session timeout `session.timeout.ms`.
- **Heartbeats** go out every `heartbeat.interval.ms` from a background task while the member is in a
  generation. An answer of REBALANCE_IN_PROGRESS asks for a rejoin (done by the next `poll`), one of
  ILLEGAL_GENERATION/UNKNOWN_MEMBER_ID means the member was dropped: its partitions are lost.
  When `poll` has not been called for `max.poll.interval.ms`, the task leaves the group, as Kafka's does,
  so a stuck application does not hold partitions others could read.
- **Leaving** on close sends LeaveGroup, except for static members (`group.instance.id`), which keep their
  place through restarts until the session times out.

What the group does with an assignment (listeners, positions, the fetcher) is the owner's business: it
passes `MembershipHooks`. Joining happens only when the owner calls `ensure_active` (the consumer does so in
`poll`), so listeners run between polls, never while the application is still processing records.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from backbone.client.cluster import ClusterClient, backoff_ms
from backbone.client.consumer.group_requests import (
    CoordinatorAddress,
    JoinResult,
    MemberMetadata,
    find_coordinator,
    heartbeat,
    join_group,
    leave_group,
    offset_commit,
    offset_fetch,
    sync_group,
)
from backbone.client.structs import OffsetAndMetadata, TopicPartition
from backbone.protocol.errors import ErrorCode, KafkaError, error_for
from backbone.wire.connection import BrokerConnection
from backbone.wire.errors import (
    CommitFailedError,
    KafkaClientError,
    KafkaConnectionError,
    KafkaTimeoutError,
    is_retriable,
)

__all__ = ["GroupMembership", "MembershipHooks"]

log = logging.getLogger(__name__)

# The coordinator moved or is not there: look it up again and retry.
COORDINATOR_ERRORS = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available})
# The member is no longer in the generation it thinks it is in.
_MEMBERSHIP_ERRORS = frozenset({ErrorCode.illegal_generation, ErrorCode.unknown_member_id})
# A JoinGroup or SyncGroup answer is awaited this much longer than the rebalance timeout (as the Java
# client does).
_JOIN_GRACE_MS = 5_000


class MembershipHooks(Protocol):
    """What the group membership asks of its owner (the consumer's group state)."""

    def join_protocols(self, generation_id: int) -> list[tuple[str, bytes]]:
        """(assignor name, subscription metadata) pairs, most preferred first."""

    async def assign(self, protocol_name: str, members: Sequence[MemberMetadata]) -> Mapping[str, bytes]:
        """The leader's part: every member's assignment bytes."""

    async def on_join_prepare(self) -> None:
        """Before (re)joining: revoke what must go first (eager: everything), or report it lost."""

    async def on_join_complete(self, protocol_name: str, assignment: bytes) -> bool:
        """Apply the new assignment; True when another rebalance is needed (cooperative revocations)."""

    async def on_membership_lost(self) -> None:
        """The coordinator dropped this member: its partitions belong to someone else already."""


class GroupMembership:
    def __init__(self, cluster: ClusterClient, config: Mapping[str, Any], hooks: MembershipHooks) -> None:
        self.cluster = cluster
        self.config = config
        self.hooks = hooks
        self.group_id: str = config["group.id"]
        self.group_instance_id: str | None = config["group.instance.id"]
        self.session_timeout_ms: int = config["session.timeout.ms"]
        self.rebalance_timeout_ms: int = config["max.poll.interval.ms"]
        self.heartbeat_interval_s: float = config["heartbeat.interval.ms"] / 1000
        self.member_id = ""
        self.generation_id = -1
        self.protocol_name: str | None = None
        self.leader_id = ""
        self.rejoin_needed = True
        self.in_group = False
        """Whether this member holds a generation (joined and synced, not dropped since)."""
        self.fatal: BaseException | None = None
        """An error no retry can fix (fenced instance, bad group id, ...), raised by the next poll."""
        self.last_poll = time.monotonic()
        self._coordinator: CoordinatorAddress | None = None
        self._conn: BrokerConnection | None = None
        self._lookup_failures = 0
        self._join_failures = 0  # JoinGroup/SyncGroup rounds failed by the coordinator in a row
        self._joining = False
        self._requested_while_joining = False
        self._join_task: asyncio.Task[None] | None = None
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._heartbeat_wakeup = asyncio.Event()
        self._closed = False

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        if self._heartbeat_task is None:
            self._heartbeat_task = asyncio.ensure_future(self._heartbeat_loop())

    async def close(self, leave: bool = True) -> None:
        """Stop heartbeating and, unless a static member, leave the group."""
        if self._closed:
            return
        self._closed = True
        # Finished tasks are gathered too: a join that failed unobserved must not be reported as lost.
        tasks = [t for t in (self._heartbeat_task, self._join_task) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if leave:
            await self.leave("the consumer is closing")
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    @property
    def coordinator_id(self) -> int | None:
        return self._coordinator.node_id if self._coordinator is not None else None

    @property
    def _rebalance_request_timeout_ms(self) -> int:
        """How long to await a JoinGroup or SyncGroup answer: the coordinator may hold it a rebalance long."""
        return max(self.config["request.timeout.ms"], self.rebalance_timeout_ms + _JOIN_GRACE_MS)

    # -- the coordinator --------------------------------------------------------------------------

    async def coordinator(self, deadline: float | None = None) -> BrokerConnection:
        """A ready connection to the group's coordinator, looking it up (and retrying) until `deadline`."""
        while True:
            self._raise_if_closed()
            conn = self._conn
            if conn is not None and not conn.is_closed:
                try:
                    await conn.connect()
                    return conn
                except (KafkaConnectionError, KafkaError) as error:
                    self.coordinator_dead(f"cannot connect: {error}")
            try:
                return await self._lookup()
            except (KafkaClientError, KafkaError) as error:
                if not is_retriable(error):
                    raise
                self._lookup_failures += 1
                delay = backoff_ms(
                    self.config["retry.backoff.ms"],
                    self.config["retry.backoff.max.ms"],
                    self._lookup_failures,
                )
                if deadline is not None and time.monotonic() + delay / 1000 > deadline:
                    raise KafkaTimeoutError(
                        f"no coordinator found for group {self.group_id!r} in time (last error: {error}); "
                        "are the brokers up?"
                    ) from None
                log.debug("event=coordinator_lookup_failed group=%s error=%s", self.group_id, error)
                await asyncio.sleep(delay / 1000)

    async def _lookup(self) -> BrokerConnection:
        address = await find_coordinator(await self.cluster.any_connection(), self.group_id)
        conn = BrokerConnection(
            address.host,
            address.port,
            address.node_id,
            client_id=self.cluster.client_id,
            request_timeout_ms=self.config["request.timeout.ms"],
            connect_timeout_ms=self.config["socket.connection.setup.timeout.ms"],
            security=self.cluster.security,
        )
        try:
            await conn.connect()
        except BaseException:
            await conn.close()
            raise
        if self._coordinator != address:
            log.info(
                "event=coordinator_found group=%s node=%d address=%s",
                self.group_id,
                address.node_id,
                conn.address,
            )
        self._coordinator, self._conn, self._lookup_failures = address, conn, 0
        return conn

    def coordinator_dead(self, reason: str) -> None:
        """Forget the coordinator (it moved, or its connection failed); the next request looks it up again."""
        conn, self._conn = self._conn, None
        if conn is not None:
            log.info("event=coordinator_lost group=%s node=%s reason=%s", self.group_id, conn.node_id, reason)
            conn.abort()

    def _raise_if_closed(self) -> None:
        if self._closed:
            raise KafkaClientError("the consumer's group membership is closed")

    # -- joining ----------------------------------------------------------------------------------

    async def ensure_active(self, timeout_s: float) -> bool:
        """Join (or rejoin) the group if needed, waiting up to `timeout_s`; True once in a stable generation.

        A join not finished in time carries on in the background and the next call waits for it again, so
        a short poll timeout never abandons a rebalance half way.
        """
        if self.fatal is not None:
            error, self.fatal = self.fatal, None
            raise error
        if not self.rejoin_needed and self.in_group:
            return True
        if self._join_task is None or self._join_task.done():
            self._join_task = asyncio.ensure_future(self._join_until_stable())
        done, _ = await asyncio.wait({self._join_task}, timeout=max(timeout_s, 0))
        if not done:
            return False
        task, self._join_task = self._join_task, None
        task.result()  # raises what the join could not get past
        return not self.rejoin_needed and self.in_group

    async def _join_until_stable(self) -> None:
        prepared = False
        while self.rejoin_needed or not self.in_group:
            if not prepared:
                await self.hooks.on_join_prepare()  # heartbeats go on meanwhile: listeners may take time
                prepared = True
            # No heartbeats while the coordinator holds the join and sync (it keeps the session alive).
            self._joining = True
            self._requested_while_joining = False
            try:
                result = await self._join_once()
                assignment = None if result is None else await self._sync_once(result)
            finally:
                self._joining = False
                self._heartbeat_wakeup.set()
            if result is None or assignment is None:
                continue
            # A rejoin asked for during this join (a pattern matching a new topic) must not be lost with it.
            self.rejoin_needed = self._requested_while_joining
            self.in_group = True
            log.info(
                "event=group_joined group=%s generation=%d member=%s leader=%s protocol=%s",
                self.group_id,
                self.generation_id,
                self.member_id,
                result.is_leader,
                self.protocol_name,
            )
            if await self.hooks.on_join_complete(self.protocol_name or "", assignment):
                self.rejoin_needed = True
            if self.rejoin_needed:
                prepared = False

    async def _join_once(self) -> JoinResult | None:
        """One JoinGroup; None when it must be sent again (after fixing what the answer said)."""
        conn = await self.coordinator()
        try:
            result = await join_group(
                conn,
                self.group_id,
                member_id=self.member_id,
                group_instance_id=self.group_instance_id,
                session_timeout_ms=self.session_timeout_ms,
                rebalance_timeout_ms=self.rebalance_timeout_ms,
                protocols=self.hooks.join_protocols(self.generation_id),
                reason=None,
                timeout_ms=self._rebalance_request_timeout_ms,
            )
        except (KafkaConnectionError, KafkaTimeoutError) as error:
            await self._lost_coordinator(str(error))
            return None
        code = result.error_code
        if code == ErrorCode.none:
            self.member_id, self.generation_id = result.member_id, result.generation_id
            self.protocol_name, self.leader_id = result.protocol_name, result.leader_id
            self.in_group = False  # joined, not yet synced
            return result
        if code == ErrorCode.member_id_required:
            self.member_id = result.member_id  # come back with the id the coordinator chose (KIP-394)
        elif code == ErrorCode.unknown_member_id:
            self.reset_generation(forget_member=True)
        elif code in (ErrorCode.illegal_generation, ErrorCode.rebalance_in_progress):
            pass  # the join itself goes again
        elif code in COORDINATOR_ERRORS:
            await self._lost_coordinator(code.name)
        elif code == ErrorCode.coordinator_load_in_progress:
            await self._back_off()
        else:
            # FENCED_INSTANCE_ID, INCONSISTENT_GROUP_PROTOCOL, INVALID_SESSION_TIMEOUT,
            # GROUP_MAX_SIZE_REACHED, INVALID_GROUP_ID, GROUP_AUTHORIZATION_FAILED: retrying cannot help.
            raise error_for(code, f"JoinGroup of group {self.group_id!r}{_advice(code)}")
        return None

    async def _sync_once(self, joined: JoinResult) -> bytes | None:
        """SyncGroup for the generation just joined: this member's assignment, or None to join again."""
        assignments: Mapping[str, bytes] = {}
        if joined.is_leader and not joined.skip_assignment:
            assignments = await self.hooks.assign(joined.protocol_name or "", joined.members)
        conn = await self.coordinator()
        try:
            code, assignment = await sync_group(
                conn,
                self.group_id,
                generation_id=self.generation_id,
                member_id=self.member_id,
                group_instance_id=self.group_instance_id,
                protocol_name=self.protocol_name,
                assignments=assignments,
                timeout_ms=self._rebalance_request_timeout_ms,
            )
        except (KafkaConnectionError, KafkaTimeoutError) as error:
            await self._lost_coordinator(str(error))
            return None
        if code == ErrorCode.none:
            self._join_failures = 0
            return assignment
        if code == ErrorCode.rebalance_in_progress:
            return None
        if code in _MEMBERSHIP_ERRORS:
            self.reset_generation(forget_member=code == ErrorCode.unknown_member_id)
            return None
        if code in COORDINATOR_ERRORS:
            await self._lost_coordinator(code.name)
            return None
        raise error_for(code, f"SyncGroup of group {self.group_id!r}{_advice(code)}")

    async def _lost_coordinator(self, reason: str) -> None:
        """A join or sync failed with the coordinator: forget it, then back off before joining again."""
        self.coordinator_dead(reason)
        await self._back_off()

    async def _back_off(self) -> None:
        """Wait before joining again after the coordinator failed us, longer each time in a row (as Kafka's
        client sleeps `retry.backoff.ms`): a coordinator that cannot store the group answers SyncGroup
        with COORDINATOR_NOT_AVAILABLE at once, and rejoining at once would spin against it. Answers that
        are part of a normal rebalance (a member id to use, a generation moved on) rejoin at once."""
        self._join_failures += 1
        delay = backoff_ms(
            self.config["retry.backoff.ms"], self.config["retry.backoff.max.ms"], self._join_failures
        )
        await asyncio.sleep(delay / 1000)

    def reset_generation(self, forget_member: bool) -> None:
        self.generation_id = -1
        self.in_group = False
        self.rejoin_needed = True
        if forget_member:
            self.member_id = ""

    def request_rejoin(self, reason: str) -> None:
        if not self.rejoin_needed or self._joining:
            log.info("event=rejoin_requested group=%s reason=%s", self.group_id, reason)
        self.rejoin_needed = True
        if self._joining:
            self._requested_while_joining = True  # the join under way was built before this change

    # -- heartbeats -------------------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        while not self._closed:
            self._heartbeat_wakeup.clear()
            try:
                async with asyncio.timeout(self.heartbeat_interval_s):
                    await self._heartbeat_wakeup.wait()
            except TimeoutError:
                pass
            if self._joining or not self.in_group or self.generation_id < 0:
                continue
            if time.monotonic() - self.last_poll > self.rebalance_timeout_ms / 1000:
                await self._poll_interval_exceeded()
                continue
            try:
                await self._heartbeat_once()
            except (KafkaClientError, KafkaError) as error:
                log.debug("event=heartbeat_failed group=%s error=%s", self.group_id, error)

    async def _heartbeat_once(self) -> None:
        conn = await self.coordinator(time.monotonic() + self.heartbeat_interval_s)
        generation = self.generation_id
        try:
            code = await heartbeat(
                conn,
                self.group_id,
                generation_id=generation,
                member_id=self.member_id,
                group_instance_id=self.group_instance_id,
            )
        except (KafkaConnectionError, KafkaTimeoutError) as error:
            self.coordinator_dead(str(error))
            return
        if self._joining or generation != self.generation_id:
            return  # a join started meanwhile: the answer is about a generation that is over
        if code == ErrorCode.none:
            return
        if code == ErrorCode.rebalance_in_progress:
            self.request_rejoin("the coordinator started a rebalance")
        elif code in _MEMBERSHIP_ERRORS:
            log.warning(
                "event=dropped_from_group group=%s member=%s error=%s",
                self.group_id,
                self.member_id,
                code.name,
            )
            self.reset_generation(forget_member=code == ErrorCode.unknown_member_id)
            await self.hooks.on_membership_lost()
        elif code in COORDINATOR_ERRORS:
            self.coordinator_dead(code.name)
        elif code == ErrorCode.fenced_instance_id:
            self.fatal = error_for(code, f"group {self.group_id!r}{_advice(code)}")
        else:
            log.warning("event=heartbeat_error group=%s error=%s", self.group_id, code.name)

    async def _poll_interval_exceeded(self) -> None:
        log.warning(
            "event=poll_interval_exceeded max.poll.interval.ms=%d group=%s then=leave_group "
            "advice='process records faster, lower max.poll.records or raise max.poll.interval.ms'",
            self.rebalance_timeout_ms,
            self.group_id,
        )
        await self.leave("max.poll.interval.ms passed without a poll")
        await self.hooks.on_membership_lost()

    # -- leaving ----------------------------------------------------------------------------------

    async def leave(self, reason: str) -> None:
        """Leave the group now (static members only forget their generation: they keep their place)."""
        member_id, in_generation = self.member_id, self.generation_id >= 0
        self.reset_generation(forget_member=self.group_instance_id is None)
        if self.group_instance_id is not None or not member_id or not in_generation:
            return
        conn = self._conn
        if conn is None or conn.is_closed:
            return
        try:
            code = await leave_group(
                conn, self.group_id, member_id=member_id, group_instance_id=None, reason=reason
            )
        except (KafkaClientError, KafkaError) as error:
            log.info(
                "event=leave_group_failed group=%s error=%s then='the session timeout removes the member'",
                self.group_id,
                error,
            )
            return
        log.info("event=group_left group=%s member=%s result=%s", self.group_id, member_id, code.name)

    # -- committed offsets ------------------------------------------------------------------------

    async def commit(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata], timeout_s: float, *, in_group: bool
    ) -> None:
        """Commit `offsets` for this member (`in_group`: in its generation; else as a plain client)."""
        if not offsets:
            return
        deadline = time.monotonic() + timeout_s
        while True:
            conn = await self.coordinator(deadline)
            generation, member_id = (self.generation_id, self.member_id) if in_group else (-1, "")
            try:
                errors = await offset_commit(
                    conn,
                    self.group_id,
                    offsets,
                    generation_id=generation,
                    member_id=member_id,
                    group_instance_id=self.group_instance_id if in_group else None,
                )
            except (KafkaConnectionError, KafkaTimeoutError) as error:
                self.coordinator_dead(str(error))
                self._check_deadline(deadline, f"commit: {error}")
                continue
            failed = {tp: code for tp, code in errors.items() if code != ErrorCode.none}
            if not failed:
                return
            code = next(iter(failed.values()))
            if code in COORDINATOR_ERRORS or code == ErrorCode.coordinator_load_in_progress:
                if code in COORDINATOR_ERRORS:
                    self.coordinator_dead(code.name)
                self._check_deadline(deadline, f"commit: {code.name}")
                await asyncio.sleep(self.config["retry.backoff.ms"] / 1000)
                continue
            if code == ErrorCode.rebalance_in_progress:
                self.request_rejoin("a commit found the group rebalancing")
                raise CommitFailedError(
                    f"commit to group {self.group_id!r} failed: the group is rebalancing; poll() to rejoin"
                )
            if code in _MEMBERSHIP_ERRORS:
                self.reset_generation(forget_member=code == ErrorCode.unknown_member_id)
                raise CommitFailedError(
                    f"commit to group {self.group_id!r} failed ({code.name}): this member was dropped from "
                    "the group, so its partitions may belong to another member now; poll() to rejoin"
                )
            shown = ", ".join(f"{tp}: {c.name}" for tp, c in sorted(failed.items()))
            raise error_for(code, f"commit to group {self.group_id!r} failed for {shown}")

    async def committed(
        self, partitions: Sequence[TopicPartition], timeout_s: float
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets of `partitions` (None where nothing is committed)."""
        deadline = time.monotonic() + timeout_s
        while True:
            conn = await self.coordinator(deadline)
            try:
                found = await offset_fetch(conn, self.group_id, partitions)
            except (KafkaConnectionError, KafkaTimeoutError) as error:
                self.coordinator_dead(str(error))
                self._check_deadline(deadline, f"fetching committed offsets: {error}")
                continue
            except KafkaError as error:
                if not error.retriable:
                    raise
                if error.code in COORDINATOR_ERRORS:
                    self.coordinator_dead(error.code.name)
                self._check_deadline(deadline, f"fetching committed offsets: {error}")
                await asyncio.sleep(self.config["retry.backoff.ms"] / 1000)
                continue
            return {tp: found.get(tp) for tp in partitions}

    def _check_deadline(self, deadline: float, what: str) -> None:
        if time.monotonic() >= deadline:
            raise KafkaTimeoutError(f"group {self.group_id!r}: {what}; gave up after the timeout")


def _advice(code: ErrorCode) -> str:
    return {
        ErrorCode.fenced_instance_id: ": another consumer runs with the same group.instance.id",
        ErrorCode.inconsistent_group_protocol: (
            ": the group's members share no partition.assignment.strategy "
            "(or the group is not a consumer group)"
        ),
        ErrorCode.invalid_session_timeout: (
            ": session.timeout.ms is outside the broker's group.min/max.session.timeout.ms"
        ),
        ErrorCode.group_max_size_reached: ": the group has group.max.size members already",
    }.get(code, "")
