"""The values a consumer group's state machine (group.py) takes in and hands out.

GroupSnapshot and MemberSnapshot are what the coordinator stores in `__consumer_offsets` and gives back on
load; GroupConfig holds the broker's `group.*` settings; JoinResult, SyncResult and GroupDescription are the
answers the JoinGroup, SyncGroup and DescribeGroups handlers turn into responses.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field
from typing import Any

from backbone.protocol.errors import ErrorCode
from backbone.protocol.headers import MalformedMessage
from backbone.wire.groups.consumer_protocol import decode_subscription

log = logging.getLogger(__name__)

CONSUMER_PROTOCOL_TYPE = "consumer"
# Kafka's group.max.size default: Integer.MAX_VALUE, i.e. no limit.
UNLIMITED_GROUP_SIZE = 2**31 - 1


class GroupState(enum.Enum):
    """Kafka's classic group states; the values are the names DescribeGroups and ListGroups use."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True)
class GroupConfig:
    """The broker's group settings (Kafka's names and defaults)."""

    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    initial_rebalance_delay_ms: int = 3000
    max_size: int = UNLIMITED_GROUP_SIZE

    @classmethod
    def from_broker_config(cls, config: Any) -> GroupConfig:
        """From a BrokerConfig (anything indexable by property name)."""
        return cls(
            min_session_timeout_ms=config["group.min.session.timeout.ms"],
            max_session_timeout_ms=config["group.max.session.timeout.ms"],
            initial_rebalance_delay_ms=config["group.initial.rebalance.delay.ms"],
            max_size=config["group.max.size"],
        )


@dataclass(frozen=True)
class MemberSnapshot:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes  # the member's metadata for the group's selected protocol
    assignment: bytes


@dataclass(frozen=True)
class GroupSnapshot:
    """A group as stored: Kafka's GroupMetadataValue."""

    protocol_type: str | None
    generation_id: int
    protocol_name: str | None
    leader_id: str | None
    state_timestamp_ms: int
    members: list[MemberSnapshot] = field(default_factory=list)


@dataclass(frozen=True)
class JoinedMember:
    """One member as the leader sees it in its JoinGroup answer."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True)
class JoinResult:
    error: ErrorCode
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: list[JoinedMember] = field(default_factory=list)
    skip_assignment: bool = False


@dataclass(frozen=True)
class SyncResult:
    error: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(frozen=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupDescription:
    state: GroupState
    protocol_type: str
    protocol_name: str
    members: list[DescribedMember]


def subscription_topics(metadata: bytes) -> set[str] | None:
    """The topics a consumer-protocol subscription names; None if the bytes are not one."""
    try:
        return set(decode_subscription(metadata).topics)
    except MalformedMessage as exc:
        log.debug("event=undecodable_subscription error=%r", exc)
        return None
