"""DescribeGroups (v0-v5) and ListGroups (v0-v4, v4 with the states filter): the groups this broker
coordinates, their state, protocol and members.

A group this coordinator does not know is described as Dead with no members and no error (Kafka's answer
before KIP-1043); groups on other coordinators get NOT_COORDINATOR, so an admin client asks each group's
coordinator, and lists groups by asking every broker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from backbone.broker.handlers.common import build, error_code_of, response_module, throttle
from backbone.broker.network import Handler, RequestContext
from backbone.consumer_groups.coordinator import GroupCoordinator
from backbone.consumer_groups.group_types import GroupDescription, GroupState
from backbone.protocol.api import ApiKey
from backbone.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from backbone.broker.security.authorizer import Authorizer

# DescribeGroups' value when the client did not ask for authorized operations.
OPERATIONS_NOT_REQUESTED = -(2**31)

_UNKNOWN_GROUP = GroupDescription(GroupState.DEAD, "", "", [])


def group_listing_handlers(coordinator: GroupCoordinator, authorizer: Authorizer) -> dict[ApiKey, Handler]:
    async def describe_groups(context: RequestContext) -> Any:
        request = context.decode()
        module = response_module(ApiKey.DESCRIBE_GROUPS, context.api_version)
        asked = getattr(request, "include_authorized_operations", False)
        described = []
        for group_id in request.groups:
            # What the principal may do to the group, where asked (Kafka's READ, DELETE and DESCRIBE).
            operations = (
                authorizer.authorized_operations(context, "GROUP", group_id)
                if asked
                else OPERATIONS_NOT_REQUESTED
            )
            error = ErrorCode.none
            try:
                group = coordinator.group(group_id)
                description = _UNKNOWN_GROUP if group is None else group.describe()
            except Exception as exc:  # CoordinatorError carries its code; anything else is logged once
                error, description = error_code_of(exc), _UNKNOWN_GROUP
            described.append(
                build(
                    module.DescribedGroup,
                    error_code=error,
                    group_id=group_id,
                    # Kafka leaves the state empty when the coordinator could not look (an error).
                    group_state=description.state.value if error is ErrorCode.none else "",
                    protocol_type=description.protocol_type,
                    protocol_data=description.protocol_name,
                    members=tuple(
                        build(
                            module.DescribedGroupMember,
                            member_id=m.member_id,
                            group_instance_id=m.group_instance_id,
                            client_id=m.client_id,
                            client_host=m.client_host,
                            member_metadata=m.metadata,
                            member_assignment=m.assignment,
                        )
                        for m in description.members
                    ),
                    authorized_operations=operations,
                )
            )
        return build(module.DescribeGroupsResponse, throttle_time=throttle(), groups=tuple(described))

    async def list_groups(context: RequestContext) -> Any:
        request = context.decode()
        module = response_module(ApiKey.LIST_GROUPS, context.api_version)
        # State names match case-insensitively, as Kafka parses them; an unknown name matches nothing.
        wanted = {state.lower() for state in getattr(request, "states_filter", ())}
        listed = []
        for group in coordinator.groups():
            state = group.state
            if state is GroupState.DEAD or (wanted and state.value.lower() not in wanted):
                continue
            listed.append(
                build(
                    module.ListedGroup,
                    group_id=group.group_id,
                    protocol_type=group.protocol_type or "",
                    group_state=state.value,
                )
            )
        listed.sort(key=lambda entry: entry.group_id)
        return build(
            module.ListGroupsResponse,
            throttle_time=throttle(),
            error_code=ErrorCode.none,
            groups=tuple(listed),
        )

    return {ApiKey.DESCRIBE_GROUPS: describe_groups, ApiKey.LIST_GROUPS: list_groups}
