"""JoinGroup (v0-v9), SyncGroup (v0-v5), Heartbeat (v0-v4) and LeaveGroup (v0-v5): the classic group
protocol, served by the group's state machine (backbone/consumer_groups/group.py) on its coordinator.

A broker that does not coordinate the group answers NOT_COORDINATOR (or COORDINATOR_LOAD_IN_PROGRESS while
it loads the group's offsets partition), which sends the client back to FindCoordinator. JoinGroup and
SyncGroup may wait for the other members (the join phase, the leader's assignment); the connection's later
requests queue behind them, as on Kafka's brokers.
"""

from __future__ import annotations

from typing import Any

from backbone.broker.handlers.common import build, error_code_of, response_module, throttle
from backbone.broker.network import Handler, RequestContext
from backbone.consumer_groups.coordinator import GroupCoordinator
from backbone.consumer_groups.group import Group
from backbone.consumer_groups.group_types import JoinResult
from backbone.protocol.api import ApiKey
from backbone.protocol.errors import ErrorCode

# JoinGroup v4+ clients accept MEMBER_ID_REQUIRED (KIP-394); older ones get their member id in one round.
FIRST_VERSION_REQUIRING_MEMBER_ID = 4
# JoinGroup v7+ and SyncGroup v5+ have nullable protocol fields; older versions need a string.
FIRST_JOIN_VERSION_WITH_NULLABLE_PROTOCOL = 7
# LeaveGroup v3+ carries a batch of members (KIP-345); older versions one member id.
FIRST_BATCH_LEAVE_VERSION = 3


def find_group(coordinator: GroupCoordinator, group_id: str, *, create: bool = False) -> Group | ErrorCode:
    """The group, or the error to answer with: the coordinator's, or UNKNOWN_MEMBER_ID for no such group."""
    try:
        group = coordinator.get_or_create_group(group_id) if create else coordinator.group(group_id)
    except Exception as exc:  # CoordinatorError carries its code; anything else is logged once
        return error_code_of(exc)
    return ErrorCode.unknown_member_id if group is None else group


def client_host(context: RequestContext) -> str:
    """The client's address as Kafka shows it ("/127.0.0.1")."""
    return "/" + context.connection.peer.rsplit(":", 1)[0]


def group_membership_handlers(coordinator: GroupCoordinator) -> dict[ApiKey, Handler]:
    async def join_group(context: RequestContext) -> Any:
        request = context.decode()
        version = context.api_version
        module = response_module(ApiKey.JOIN_GROUP, version)
        # Joining with no member id may create the group; a member id names a group that must exist.
        group = find_group(coordinator, request.group_id, create=not request.member_id)
        if isinstance(group, ErrorCode):
            result = JoinResult(group, request.member_id)
        else:
            session_ms = int(request.session_timeout.total_seconds() * 1000)
            rebalance = getattr(request, "rebalance_timeout", None)  # v1+; v0 uses the session timeout
            rebalance_ms = session_ms if rebalance is None else int(rebalance.total_seconds() * 1000)
            result = await group.join(
                member_id=request.member_id,
                group_instance_id=getattr(request, "group_instance_id", None),
                client_id=context.header.client_id or "",
                client_host=client_host(context),
                session_timeout_ms=session_ms,
                rebalance_timeout_ms=rebalance_ms,
                protocol_type=request.protocol_type,
                protocols=[(p.name, bytes(p.metadata)) for p in request.protocols],
                require_known_member_id=version >= FIRST_VERSION_REQUIRING_MEMBER_ID,
            )
        nullable = version >= FIRST_JOIN_VERSION_WITH_NULLABLE_PROTOCOL
        return build(
            module.JoinGroupResponse,
            throttle_time=throttle(),
            error_code=result.error,
            generation_id=result.generation_id,
            protocol_type=result.protocol_type,
            protocol_name=result.protocol_name if nullable else (result.protocol_name or ""),
            leader=result.leader_id,
            skip_assignment=result.skip_assignment,
            member_id=result.member_id,
            members=tuple(
                build(
                    module.JoinGroupResponseMember,
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    metadata=m.metadata,
                )
                for m in result.members
            ),
        )

    async def sync_group(context: RequestContext) -> Any:
        request = context.decode()
        module = response_module(ApiKey.SYNC_GROUP, context.api_version)
        group = find_group(coordinator, request.group_id)
        error, assignment, protocol_type, protocol_name = group, b"", None, None
        if isinstance(group, Group):
            result = await group.sync(
                member_id=request.member_id,
                group_instance_id=getattr(request, "group_instance_id", None),
                generation_id=int(request.generation_id),
                protocol_type=getattr(request, "protocol_type", None),
                protocol_name=getattr(request, "protocol_name", None),
                assignments={a.member_id: bytes(a.assignment) for a in request.assignments},
            )
            error, assignment = result.error, result.assignment
            protocol_type, protocol_name = result.protocol_type, result.protocol_name
        return build(
            module.SyncGroupResponse,
            throttle_time=throttle(),
            error_code=error,
            protocol_type=protocol_type,
            protocol_name=protocol_name,
            assignment=assignment,
        )

    async def heartbeat(context: RequestContext) -> Any:
        request = context.decode()
        module = response_module(ApiKey.HEARTBEAT, context.api_version)
        group = find_group(coordinator, request.group_id)
        error = (
            group.heartbeat(
                request.member_id, getattr(request, "group_instance_id", None), int(request.generation_id)
            )
            if isinstance(group, Group)
            else group
        )
        return build(module.HeartbeatResponse, throttle_time=throttle(), error_code=error)

    async def leave_group(context: RequestContext) -> Any:
        request = context.decode()
        version = context.api_version
        module = response_module(ApiKey.LEAVE_GROUP, version)
        if version >= FIRST_BATCH_LEAVE_VERSION:
            leaving = [(m.member_id, m.group_instance_id) for m in request.members]
        else:
            leaving = [(request.member_id, None)]
        group = find_group(coordinator, request.group_id)
        if isinstance(group, Group):
            error, member_errors = group.leave(leaving)
        elif group is ErrorCode.unknown_member_id:  # no such group: none of them is a member
            error, member_errors = ErrorCode.none, [group] * len(leaving)
        else:
            error, member_errors = group, [group] * len(leaving)
        if version < FIRST_BATCH_LEAVE_VERSION:
            # One member: its error is the request's.
            error = member_errors[0] if error is ErrorCode.none else error
            return build(module.LeaveGroupResponse, throttle_time=throttle(), error_code=error)
        answers = zip(leaving, member_errors, strict=True)
        return module.LeaveGroupResponse(
            throttle_time=throttle(),
            error_code=error,
            members=tuple(
                build(module.MemberResponse, member_id=member_id, group_instance_id=instance, error_code=code)
                for (member_id, instance), code in answers
            ),
        )

    return {
        ApiKey.JOIN_GROUP: join_group,
        ApiKey.SYNC_GROUP: sync_group,
        ApiKey.HEARTBEAT: heartbeat,
        ApiKey.LEAVE_GROUP: leave_group,
    }
