"""Admin operations on consumer groups: list, describe, committed offsets (read, alter, delete), delete
groups, and lag.

Every group request goes to the group's coordinator, found with FindCoordinator (key type 0) before each
attempt, so a coordinator that moved (NOT_COORDINATOR), is still loading its groups
(COORDINATOR_LOAD_IN_PROGRESS) or is not available yet (COORDINATOR_NOT_AVAILABLE, e.g. while the offsets
topic is being created) is simply asked again until `default.api.timeout.ms` runs out. ListGroups is asked of
every broker, since each lists only the groups it coordinates.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, NamedTuple, TypeVar

from backbone.client.admin.host import AdminHost
from backbone.client.admin.mirror_progress import MirrorLag, lag_seconds, newest_copied_ms
from backbone.client.consumer.group_requests import (
    PROTOCOL_TYPE,
    find_coordinator,
    offset_commit,
    offset_fetch,
)
from backbone.client.structs import OffsetAndMetadata, OffsetAndTimestamp, TopicPartition
from backbone.protocol.api import ApiKey
from backbone.protocol.errors import ErrorCode, KafkaError, error_for
from backbone.protocol.headers import MalformedMessage
from backbone.wire.connection import BrokerConnection
from backbone.wire.groups.consumer_protocol import decode_assignment
from backbone.wire.groups.lag import MemberInfo, PartitionLag, group_lag
from backbone.wire.messages import group_by_topic

__all__ = ["GroupAdminMixin", "GroupDescription", "GroupListing", "MemberDescription"]

V = TypeVar("V")

INACTIVE_STATES = frozenset({"Empty", "Dead"})


class GroupListing(NamedTuple):
    group_id: str
    protocol_type: str
    """"consumer" for consumer groups; "" for a group that only committed offsets."""
    state: str | None
    """Stable, PreparingRebalance, CompletingRebalance, Empty or Dead (None before ListGroups v4)."""
    coordinator: int


class MemberDescription(NamedTuple):
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: tuple[TopicPartition, ...]
    """Partitions assigned to the member (decoded for consumer groups; empty otherwise)."""


class GroupDescription(NamedTuple):
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    """The partition assignor chosen for consumer groups ("range", "cooperative-sticky", ...)."""
    members: list[MemberDescription]
    coordinator: int

    @property
    def is_active(self) -> bool:
        """Whether members are in the group (then its offsets are theirs to commit, not an admin's)."""
        return bool(self.members) or self.state not in INACTIVE_STATES


class GroupAdminMixin(AdminHost):
    """Mixed into AsyncAdmin."""

    # -- coordinators -------------------------------------------------------------------------------

    async def _find_coordinator(self, group_id: str) -> int:
        """The id of the broker coordinating `group_id`."""
        return (await find_coordinator(await self.cluster.any_connection(), group_id)).node_id

    async def _by_coordinator(self, group_ids: Iterable[str]) -> dict[int, list[str]]:
        wanted = list(dict.fromkeys(group_ids))
        nodes = await asyncio.gather(*(self._find_coordinator(group_id) for group_id in wanted))
        groups: dict[int, list[str]] = collections.defaultdict(list)
        for group_id, node in zip(wanted, nodes, strict=True):
            groups[node].append(group_id)
        return groups

    async def _coordinator_connection(self, group_id: str) -> BrokerConnection:
        return await self.cluster.connection(await self._find_coordinator(group_id))

    async def _per_group(
        self,
        group_ids: Iterable[str],
        send: Callable[[int, list[str]], Awaitable[Iterable[tuple[str, int, V]]]],
        what: str,
        timeout_ms: int | None,
    ) -> dict[str, V]:
        """Send each coordinator its groups (`send` returns (group, error code, value) rows); groups that
        failed retriably are sent again, to their coordinator found anew."""
        from backbone.client.admin.client import _raise_failures

        wanted = list(dict.fromkeys(group_ids))
        results: dict[str, V] = {}
        errors: dict[str, KafkaError] = {}

        async def attempt() -> None:
            pending = [g for g in wanted if g not in results and g not in errors]
            by_node = await self._by_coordinator(pending)
            retry = None
            for rows in await asyncio.gather(*(send(node, groups) for node, groups in by_node.items())):
                for group_id, code, value in rows:
                    if not code:
                        results[group_id] = value
                        continue
                    error = error_for(code, f"{what} of group {group_id!r}")
                    if error.retriable:
                        retry = error
                    else:
                        errors[group_id] = error
            if retry is not None:
                raise retry

        if wanted:
            await self._retrying(attempt, what, timeout_ms)
        return _raise_failures(results, errors)

    # -- groups -------------------------------------------------------------------------------------

    async def list_consumer_groups(
        self, states: Iterable[str] | None = None, *, timeout_ms: int | None = None
    ) -> list[GroupListing]:
        """Every consumer group of the cluster (asking every broker), sorted by id; only those in `states`
        ("Stable", "Empty", ...; case as Kafka spells them) when given."""
        wanted = sorted(set(states)) if states is not None else []

        async def ask(node: int) -> list[GroupListing]:
            response = await self.cluster.request_kio(node, ApiKey.LIST_GROUPS, states_filter=wanted)
            if response.error_code:
                raise error_for(response.error_code, f"ListGroups on broker {node}")
            return [
                GroupListing(g.group_id, g.protocol_type, getattr(g, "group_state", None), node)
                for g in response.groups
                if g.protocol_type in (PROTOCOL_TYPE, "")
            ]

        async def attempt() -> list[GroupListing]:
            metadata = await self.cluster.refresh_metadata()
            answers = await asyncio.gather(*(ask(node) for node in sorted(metadata.brokers)))
            listed = [g for found in answers for g in found]
            # Brokers before ListGroups v4 cannot filter; their listings carry no state to filter on either.
            if wanted:
                listed = [g for g in listed if g.state is None or g.state in wanted]
            return sorted(listed)

        return await self._retrying(attempt, "list_consumer_groups", timeout_ms)

    async def describe_consumer_groups(
        self, group_ids: Iterable[str], *, timeout_ms: int | None = None
    ) -> dict[str, GroupDescription]:
        """State, assignor and members (client id, host, assigned partitions) of each group.

        A group that does not exist is described as state "Dead" with no members (GroupIdNotFoundError from
        brokers speaking DescribeGroups v6+).
        """

        async def send(node: int, groups: list[str]) -> list[tuple[str, int, GroupDescription]]:
            response = await self.cluster.request_kio(
                node, ApiKey.DESCRIBE_GROUPS, groups=groups, include_authorized_operations=False
            )
            return [(g.group_id, int(g.error_code), _group_description(g, node)) for g in response.groups]

        return await self._per_group(group_ids, send, "describe_consumer_groups", timeout_ms)

    async def delete_consumer_groups(
        self, group_ids: Iterable[str], *, timeout_ms: int | None = None
    ) -> dict[str, None]:
        """Delete groups and their committed offsets; {group: None}. A group with members cannot be deleted
        (NonEmptyGroupError); one that does not exist raises GroupIdNotFoundError."""

        async def send(node: int, groups: list[str]) -> list[tuple[str, int, None]]:
            response = await self.cluster.request_kio(node, ApiKey.DELETE_GROUPS, groups_names=groups)
            return [(r.group_id, int(r.error_code), None) for r in response.results]

        return await self._per_group(group_ids, send, "delete_consumer_groups", timeout_ms)

    # -- committed offsets --------------------------------------------------------------------------

    async def list_consumer_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets: of every partition it committed (None), or of `partitions`.
        Partitions without a committed offset are left out."""
        wanted = None if partitions is None else [TopicPartition(*tp) for tp in partitions]

        async def attempt() -> dict[TopicPartition, OffsetAndMetadata]:
            conn = await self._coordinator_connection(group_id)
            found = await offset_fetch(conn, group_id, wanted)
            return {tp: committed for tp, committed in found.items() if committed is not None}

        return await self._retrying(attempt, "list_consumer_group_offsets", timeout_ms)

    async def alter_consumer_group_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
        *,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, None]:
        """Commit `offsets` for the group from outside it (generation -1), as kafka-consumer-groups.sh does
        to reset offsets. The group must have no members: its coordinator refuses otherwise
        (UnknownMemberIdError, or RebalanceInProgressError)."""
        wanted = {
            TopicPartition(*tp): o if isinstance(o, OffsetAndMetadata) else OffsetAndMetadata(int(o))
            for tp, o in offsets.items()
        }

        async def attempt() -> dict[TopicPartition, None]:
            codes = await offset_commit(await self._coordinator_connection(group_id), group_id, wanted)
            return _partition_results(codes, f"commit of group {group_id!r}")

        return await self._retrying(attempt, "alter_consumer_group_offsets", timeout_ms)

    async def delete_consumer_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition],
        *,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, None]:
        """Delete the group's committed offsets of `partitions` (OffsetDelete); {partition: None}.
        GroupSubscribedToTopicError for topics the group's members are subscribed to."""
        topics = group_by_topic((TopicPartition(*tp), {"partition_index": tp[1]}) for tp in partitions)

        async def attempt() -> dict[TopicPartition, None]:
            conn = await self._coordinator_connection(group_id)
            response = await conn.request_kio(ApiKey.OFFSET_DELETE, group_id=group_id, topics=topics)
            if response.error_code:
                raise error_for(response.error_code, f"deleting offsets of group {group_id!r}")
            codes = {
                TopicPartition(topic.name, int(part.partition_index)): ErrorCode(part.error_code)
                for topic in response.topics
                for part in topic.partitions
            }
            return _partition_results(codes, f"offset deletion in group {group_id!r}")

        return await self._retrying(attempt, "delete_consumer_group_offsets", timeout_ms)

    # -- lag ----------------------------------------------------------------------------------------

    async def consumer_group_lag(
        self, group_ids: Iterable[str] | str, *, timeout_ms: int | None = None
    ) -> dict[str, list[PartitionLag]]:
        """Per group (one group id, or several), a row for each partition it committed or has assigned:
        committed offset, log end offset, lag (end minus committed; None without a committed offset) and
        the member that owns it.

        A partition whose log end cannot be learnt (its topic was deleted, it has no leader) gets a log end
        offset and lag of None rather than failing the whole view.
        """
        wanted = [group_ids] if isinstance(group_ids, str) else list(dict.fromkeys(group_ids))
        descriptions = await self.describe_consumer_groups(wanted, timeout_ms=timeout_ms)
        committed = dict(
            zip(
                wanted,
                await asyncio.gather(
                    *(self.list_consumer_group_offsets(g, timeout_ms=timeout_ms) for g in wanted)
                ),
                strict=True,
            )
        )
        owners = {g: _owners(descriptions[g]) for g in wanted}
        partitions = {tp for g in wanted for tp in (*committed[g], *owners[g])}
        log_end = await self._log_end_offsets(partitions, timeout_ms)
        return {
            g: group_lag(g, {tp: o.offset for tp, o in committed[g].items()}, log_end, owners[g])
            for g in wanted
        }

    async def mirror_lag(self, group_id: str, *, timeout_ms: int | None = None) -> list[MirrorLag]:
        """A mirror group's lag per source partition, in records and in seconds of event time (see
        `mirror_progress`). Ask the source cluster: that is where a mirror's group commits. A partition
        assigned to a mirror that has committed nothing on it yet counts from its log start, where the
        mirror begins."""
        committed = await self.list_consumer_group_offsets(group_id, timeout_ms=timeout_ms)
        description = (await self.describe_consumer_groups([group_id], timeout_ms=timeout_ms))[group_id]
        uncommitted = [tp for tp in _owners(description) if tp not in committed]
        if uncommitted:
            starts = await self.list_offsets(dict.fromkeys(uncommitted, "earliest"), timeout_ms=timeout_ms)
            committed = {**committed, **{tp: OffsetAndMetadata(starts[tp].offset, "") for tp in starts}}
        log_end = await self._log_end_offsets(committed, timeout_ms)
        records = {
            tp: None if (end := log_end[tp]) is None else end - committed[tp].offset for tp in committed
        }
        lagging = [tp for tp, behind in records.items() if behind is not None and behind > 0]
        newest: dict[TopicPartition, Any] = {}
        if lagging:
            specs = dict.fromkeys(lagging, "max_timestamp")
            with contextlib.suppress(KafkaError):  # a partition without a leader right now: seconds unknown
                newest = await self.list_offsets(specs, timeout_ms=timeout_ms)
        return [
            MirrorLag(
                tp.topic,
                tp.partition,
                offset.offset,
                log_end[tp],
                records[tp],
                lag_seconds(
                    records[tp],
                    newest[tp].timestamp if tp in newest else None,
                    newest_copied_ms(offset.metadata),
                ),
            )
            for tp, offset in sorted(committed.items())
        ]

    async def _log_end_offsets(
        self, partitions: Iterable[TopicPartition], timeout_ms: int | None
    ) -> dict[TopicPartition, int | None]:
        """Log end offsets; None for partitions that no longer exist or have no leader right now (a group
        keeps offsets of deleted topics until retention removes them, and they must not hide the rest)."""
        wanted = list(partitions)
        if not wanted:
            return {}
        topics = {tp.topic for tp in wanted}
        metadata = await self._retrying(lambda: self.cluster.fetch_metadata(topics), "metadata", timeout_ms)
        led = [tp for tp in wanted if metadata.leader_for(tp) >= 0]
        found: dict[TopicPartition, OffsetAndTimestamp] = {}
        if led:
            try:
                found = await self.list_offsets(dict.fromkeys(led, "latest"), timeout_ms=timeout_ms)
            except KafkaError as error:
                answered = getattr(error, "results", None)
                if answered is None:  # not a per-partition failure: nothing was learnt
                    raise
                found = answered
        return {tp: found[tp].offset if tp in found else None for tp in wanted}


def _partition_results(codes: Mapping[TopicPartition, ErrorCode], what: str) -> dict[TopicPartition, None]:
    """{partition: None} of a per-partition answer; the first failure raised with every failure attached
    (a retriable one, such as NOT_COORDINATOR, at once so the whole request is retried)."""
    from backbone.client.admin.client import _raise_failures

    results: dict[TopicPartition, None] = {}
    errors: dict[TopicPartition, KafkaError] = {}
    for tp, code in codes.items():
        if not code:
            results[tp] = None
            continue
        error = error_for(code, f"{what}, partition {tp}")
        if error.retriable:
            raise error
        errors[tp] = error
    return _raise_failures(results, errors)


def _group_description(group: Any, coordinator: int) -> GroupDescription:
    consumer = group.protocol_type == PROTOCOL_TYPE
    members = [
        MemberDescription(
            m.member_id,
            getattr(m, "group_instance_id", None),
            m.client_id,
            m.client_host,
            decode_assigned_partitions(m.member_assignment) if consumer else (),
        )
        for m in group.members
    ]
    return GroupDescription(
        group.group_id, group.group_state, group.protocol_type, group.protocol_data, members, coordinator
    )


def _owners(description: GroupDescription) -> dict[TopicPartition, MemberInfo]:
    return {
        tp: MemberInfo(m.member_id, m.client_id, m.host, m.group_instance_id)
        for m in description.members
        for tp in m.assignment
    }


def decode_assigned_partitions(assignment: bytes) -> tuple[TopicPartition, ...]:
    """The partitions in a consumer protocol assignment, sorted; none when it is empty (a member between
    joining and syncing has none yet) or unreadable (a client writing something else under "consumer")."""
    try:
        decoded = decode_assignment(assignment)
    except MalformedMessage:
        return ()
    return tuple(sorted(TopicPartition(topic, partition) for topic, partition in decoded.partitions))
