"""The consumer's side of group membership: subscriptions, assignments, the rebalance listener, commits.

`ConsumerGroup` is what `AsyncConsumer` delegates to once it has a `group.id`. It answers the membership's
questions (`MembershipHooks`): what to put in JoinGroup (one subscription per assignor in
`partition.assignment.strategy`, with the partitions owned and the generation, for the sticky assignors),
how the leader assigns (the assignors of `backbone.wire.groups.assignors`), and what an assignment means
for the fetcher:

- **Eager** rebalancing (whenever some configured assignor is eager, as with the default
  `[range, cooperative-sticky]`): before rejoining, every partition is revoked (auto-commit commits first,
  then `on_partitions_revoked`), and the new assignment is all added.
- **Cooperative** (every assignor cooperative, e.g. `["cooperative-sticky"]`): nothing is revoked before
  joining; the new assignment revokes only what moved away, and then one more rebalance hands those
  partitions to their new owners.

A partition's position after it is assigned is the group's committed offset, or `auto.offset.reset` when
none is committed. With `enable.auto.commit`, `poll` commits the positions of what earlier polls returned
every `auto.commit.interval.ms`, and so do revocations and `close`: whatever the application got from a
poll before calling poll again counts as processed (at-least-once when processing happens between polls).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from backbone.client.cluster import ClusterClient
from backbone.client.consumer.fetcher import Fetcher, PartitionState
from backbone.client.consumer.group_requests import MemberMetadata
from backbone.client.consumer.membership import GroupMembership
from backbone.client.consumer.subscription import CommitCallback, Subscription, call_listener, changes
from backbone.client.structs import OffsetAndMetadata, TopicPartition
from backbone.protocol.errors import KafkaError
from backbone.wire.errors import CommitFailedError, ConfigError, IllegalStateError, KafkaClientError
from backbone.wire.groups import assignors as assignor_room
from backbone.wire.groups import consumer_protocol

__all__ = ["ConsumerGroup", "load_assignors"]

log = logging.getLogger(__name__)

# A partition assigned anew starts from a generation no earlier state of it had, so a Fetch answer sent for
# the earlier state (revoked while in flight) is never taken for the new one's.
_state_generations = itertools.count(1 << 20, 1 << 20)


# The Java client's class names, accepted as well as the protocol names.
_JAVA_NAMES = {
    "org.apache.kafka.clients.consumer.RangeAssignor": "range",
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
    "org.apache.kafka.clients.consumer.StickyAssignor": "sticky",
    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": "cooperative-sticky",
}


def load_assignors(names: Sequence[str]) -> list[Any]:
    """The assignors named in `partition.assignment.strategy`, in order (ConfigError for unknown ones)."""
    chosen = []
    for name in names:
        short = _JAVA_NAMES.get(name, name)
        try:
            chosen.append(assignor_room.assignor_for(short))
        except ValueError as error:
            raise ConfigError(f"consumer property 'partition.assignment.strategy': {error}") from None
    try:
        assignor_room.rebalance_protocol(chosen)
    except ValueError as error:
        raise ConfigError(f"consumer property 'partition.assignment.strategy': {error}") from None
    return chosen


class ConsumerGroup:
    """Group membership for one consumer: owns `GroupMembership`, drives the fetcher's assignment."""

    def __init__(self, cluster: ClusterClient, fetcher: Fetcher, config: Mapping[str, Any]) -> None:
        self.cluster = cluster
        self.fetcher = fetcher
        self.config = config
        self.assignors = load_assignors(config["partition.assignment.strategy"])
        self.cooperative = (
            assignor_room.rebalance_protocol(self.assignors) == assignor_room.RebalanceProtocol.COOPERATIVE
        )
        self.membership = GroupMembership(cluster, config, self)
        self.subscription: Subscription | None = None
        self.owned: set[TopicPartition] = set()
        self._last_assignment: tuple[TopicPartition, ...] = ()
        """The latest assignment received, kept through eager revocations for the sticky assignor."""
        self.listener_error: Exception | None = None
        self._lost: set[TopicPartition] = set()
        self._auto_commit: bool = config["enable.auto.commit"]
        self._auto_commit_interval_s = config["auto.commit.interval.ms"] / 1000
        self._next_auto_commit = time.monotonic() + self._auto_commit_interval_s
        self._last_committed: dict[TopicPartition, int] = {}
        self._assigned_metadata: dict[str, int] = {}
        """As leader: the partition count of every topic the group subscribes to when it last assigned."""
        self._commits: set[asyncio.Task[None]] = set()
        self._pattern_task: asyncio.Task[None] | None = None
        self._to_look_up: set[TopicPartition] = set()
        self._lookup_task: asyncio.Task[None] | None = None

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        self.membership.start()
        self.cluster.listeners.append(self._metadata_updated)

    async def close(self, timeout_s: float) -> None:
        """Commit (auto-commit), tell the listener the partitions are revoked, and leave the group."""
        background = [t for t in (self._pattern_task, self._lookup_task) if t is not None]
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        if self._commits:
            await asyncio.wait(self._commits, timeout=timeout_s)
        try:
            if self.owned and self.membership.in_group:
                await self._revoke(set(self.owned), timeout_s)
            elif self._auto_commit and self.subscription is None and self.fetcher.assignment:
                await self._commit_positions(timeout_s)  # manually assigned partitions
        except (KafkaClientError, KafkaError) as error:
            log.warning("event=commit_on_close_failed group=%s error=%s", self.membership.group_id, error)
        await self.membership.close()

    # -- subscribing ------------------------------------------------------------------------------

    def subscribe(self, subscription: Subscription) -> None:
        self.subscription = subscription
        if subscription.pattern is None:
            self.cluster.add_topics(subscription.matched)
            if self._pattern_task is not None:
                self._pattern_task.cancel()
                self._pattern_task = None
        elif self._pattern_task is None:
            self._pattern_task = asyncio.ensure_future(self._watch_pattern())
        self.membership.request_rejoin("subscription changed")

    async def unsubscribe(self) -> None:
        """Give up every partition (revoking them: the listener still hears of it) and leave the group."""
        if self._pattern_task is not None:
            self._pattern_task.cancel()
            self._pattern_task = None
        if self.owned:
            await self._revoke(set(self.owned), self.config["default.api.timeout.ms"] / 1000)
        self.subscription = None
        await self.membership.leave("the consumer unsubscribed")

    async def _watch_pattern(self) -> None:
        # Pattern subscriptions need every topic's name; the tracked-topics metadata does not have them.
        interval = max(self.config["metadata.max.age.ms"], self.config["retry.backoff.ms"], 100) / 1000
        while True:
            try:
                metadata = await self.cluster.fetch_metadata(None)
            except (KafkaClientError, KafkaError) as error:
                log.debug("event=pattern_topic_list_failed error=%s", error)
            else:
                self._match_pattern(metadata.topics)
            await asyncio.sleep(interval)

    def _match_pattern(self, topics: Mapping[str, Any]) -> None:
        subscription = self.subscription
        if subscription is None or subscription.pattern is None:
            return
        internal = (
            [name for name, info in topics.items() if info.is_internal] if self._exclude_internal else []
        )
        matched = subscription.topics_in(topics, internal)
        if matched != subscription.matched:
            log.info("event=pattern_matches_changed topics=%s", sorted(matched))
            subscription.matched = matched
            self.cluster.add_topics(matched)
            self.membership.request_rejoin("the subscription pattern matches other topics")

    @property
    def _exclude_internal(self) -> bool:
        return bool(self.config["exclude.internal.topics"])

    def _metadata_updated(self) -> None:
        """After a metadata refresh: the leader rejoins when a subscribed topic's partition count changed."""
        if not self._assigned_metadata or not self.membership.in_group:
            return
        metadata = self.cluster.metadata
        for topic, count in self._assigned_metadata.items():
            partitions = metadata.partitions_for(topic)
            # None is a topic unknown or in error right now: only a count seen differs counts as a change.
            if partitions is not None and len(partitions) != count:
                self.membership.request_rejoin(f"topic {topic} has {len(partitions)} partitions now")
                return

    # -- polling ----------------------------------------------------------------------------------

    @property
    def needs_join(self) -> bool:
        return (
            self.membership.rejoin_needed or not self.membership.in_group or self.membership.fatal is not None
        )

    @property
    def check_interval_s(self) -> float:
        return self.membership.heartbeat_interval_s

    def polling(self) -> None:
        """The application is in poll (waiting counts as polling for max.poll.interval.ms)."""
        self.membership.last_poll = time.monotonic()

    async def before_poll(self, timeout_s: float) -> bool:
        """Called by every poll: auto-commit when due, then (re)join when needed. True when in the group."""
        self.membership.last_poll = time.monotonic()
        self.maybe_auto_commit()
        if self.subscription is None:
            return False
        try:
            active = await self.membership.ensure_active(timeout_s)
        finally:
            self.membership.last_poll = time.monotonic()
        if self.listener_error is not None:
            error, self.listener_error = self.listener_error, None
            raise error
        return active

    def maybe_auto_commit(self) -> None:
        """With enable.auto.commit: commit the positions in the background once auto.commit.interval.ms
        passed (for a subscription only while in a generation: otherwise the commit would be refused)."""
        if not self._auto_commit or time.monotonic() < self._next_auto_commit:
            return
        if self.subscription is not None and not self.membership.in_group:
            return
        self._next_auto_commit = time.monotonic() + self._auto_commit_interval_s
        if self.fetcher.assignment:
            self.commit_async(None, None)

    # -- MembershipHooks --------------------------------------------------------------------------

    def join_protocols(self, generation_id: int) -> list[tuple[str, bytes]]:
        topics = self.subscription.matched if self.subscription is not None else frozenset()
        return [
            (
                assignor.name,
                assignor_room.subscription_metadata(
                    assignor,
                    topics,
                    assigned=self._last_assignment,
                    owned=sorted(self.owned),
                    generation=generation_id,
                ),
            )
            for assignor in self.assignors
        ]

    async def assign(self, protocol_name: str, members: Sequence[MemberMetadata]) -> Mapping[str, bytes]:
        assignor = next((a for a in self.assignors if a.name == protocol_name), None)
        if assignor is None:
            raise IllegalStateError(
                f"the coordinator chose assignor {protocol_name!r}, which this consumer lacks"
            )
        subscriptions = {
            member.member_id: consumer_protocol.decode_subscription(member.metadata, member.group_instance_id)
            for member in members
        }
        wanted = {topic for sub in subscriptions.values() for topic in sub.topics}
        self.cluster.add_topics(wanted)
        if any(self.cluster.metadata.partitions_for(topic) is None for topic in wanted):
            try:  # other members' topics this member did not follow yet
                await self.cluster.refresh_metadata()
            except (KafkaClientError, KafkaError) as error:
                log.warning(
                    "event=assignment_metadata_failed group=%s error=%s", self.membership.group_id, error
                )
        metadata = self.cluster.metadata
        counts = {topic: len(metadata.partitions_for(topic) or ()) for topic in wanted}
        # Topics missing now count 0: when they appear, the leader assigns again (see _metadata_updated).
        self._assigned_metadata = counts
        partitions = {topic: count for topic, count in counts.items() if count}
        result = assignor.assign(partitions, subscriptions)
        log.info(
            "event=group_assigned group=%s protocol=%s members=%d topics=%d",
            self.membership.group_id,
            protocol_name,
            len(members),
            len(partitions),
        )
        return {member_id: consumer_protocol.encode_assignment(a) for member_id, a in result.items()}

    async def on_join_prepare(self) -> None:
        if self._lost:
            lost, self._lost = self._lost, set()
            self._remember_error(await call_listener(self._listener, "on_partitions_lost", lost))
        timeout_s = self.config["default.api.timeout.ms"] / 1000
        if not self.cooperative:
            revoked = set(self.owned)
        else:  # only what the subscription no longer covers
            topics = self.subscription.matched if self.subscription is not None else frozenset()
            revoked = {tp for tp in self.owned if tp.topic not in topics}
        if revoked:
            await self._revoke(revoked, timeout_s)

    async def on_join_complete(self, protocol_name: str, assignment: bytes) -> bool:
        assigned = {TopicPartition(*tp) for tp in consumer_protocol.decode_assignment(assignment).partitions}
        self._last_assignment = tuple(sorted(assigned))
        revoked, added = changes(self.owned, assigned)
        if revoked:
            await self._revoke(revoked, self.config["default.api.timeout.ms"] / 1000)
        await self._add(added)
        try:
            self._remember_error(await call_listener(self._listener, "on_partitions_assigned", added))
        finally:
            self._listener_returned(added)
        # Partitions of topics no longer subscribed (a static member restarted with another subscription
        # gets its old assignment back with no rebalance): rejoin, as the Java client does.
        subscription = self.subscription
        if subscription is not None and not all(subscription.covers(tp.topic) for tp in assigned):
            log.info("event=assignment_not_subscribed group=%s action=rejoin", self.membership.group_id)
            return True
        # Cooperative: what this member gave up goes to its new owner in a follow-up rebalance.
        return self.cooperative and bool(revoked)

    async def on_membership_lost(self) -> None:
        # Others own these partitions already: stop reading them at once; the listener hears in the next poll.
        self._lost |= self.owned
        self._last_assignment = ()
        self._drop(set(self.owned))

    # -- assignment changes -----------------------------------------------------------------------

    @property
    def _listener(self) -> Any:
        return self.subscription.listener if self.subscription is not None else None

    def _remember_error(self, error: Exception | None) -> None:
        if error is not None and self.listener_error is None:
            self.listener_error = error

    async def _revoke(self, revoked: set[TopicPartition], timeout_s: float) -> None:
        if self._auto_commit and self.membership.in_group:
            try:
                await self._commit_positions(timeout_s, only=revoked)
            except (KafkaClientError, KafkaError) as error:
                log.warning(
                    "event=commit_before_revocation_failed group=%s error=%s", self.membership.group_id, error
                )
        self._remember_error(await call_listener(self._listener, "on_partitions_revoked", revoked))
        self._drop(revoked)

    def _drop(self, partitions: set[TopicPartition]) -> None:
        self.owned -= partitions
        for tp in partitions:
            self.fetcher.assignment.pop(tp, None)
            self._last_committed.pop(tp, None)
        self.fetcher.wakeup()

    async def _add(self, added: set[TopicPartition]) -> None:
        """Start reading `added` from the group's committed offsets (auto.offset.reset where none is)."""
        if not added:
            return
        committed = await self.membership.committed(
            sorted(added), self.config["default.api.timeout.ms"] / 1000
        )
        self.cluster.add_topics({tp.topic for tp in added})
        for tp in added:
            # As in Kafka's consumer, nothing of a new partition is fetched before the listener has heard of
            # it: a poll that ends while the listener still runs must not return records it would seek past.
            state = PartitionState(generation=next(_state_generations), awaiting_listener=True)
            self._start_from(tp, state, committed.get(tp))
            self.fetcher.assignment[tp] = state
        self.owned |= added

    def _listener_returned(self, added: set[TopicPartition]) -> None:
        """`on_partitions_assigned` returned: the new partitions are fetched from where it left them."""
        for tp in added:
            state = self.fetcher.assignment.get(tp)
            if state is not None:
                state.awaiting_listener = False
        self.fetcher.wakeup()

    def _start_from(self, tp: TopicPartition, state: PartitionState, found: OffsetAndMetadata | None) -> None:
        if found is not None:
            state.seek(found.offset)
            self._last_committed[tp] = found.offset
        state.awaiting_committed = False

    def start_from_committed(self, partitions: Iterable[TopicPartition]) -> None:
        """Manually assigned partitions start at the group's committed offsets, as in Kafka: they are not
        fetched until the lookup (in the background) answers; auto.offset.reset applies where none is."""
        for tp in partitions:
            self.fetcher.assignment[tp].awaiting_committed = True
            self._to_look_up.add(tp)
        if self._to_look_up and (self._lookup_task is None or self._lookup_task.done()):
            self._lookup_task = asyncio.ensure_future(self._look_up_committed())

    async def _look_up_committed(self) -> None:
        while self._to_look_up:
            batch, self._to_look_up = sorted(self._to_look_up), set()
            failure: KafkaClientError | KafkaError | None
            try:
                found = await self.committed(batch, self.config["default.api.timeout.ms"] / 1000)
            except (KafkaClientError, KafkaError) as error:
                found, failure = {}, error
            else:
                failure = None
            for tp in batch:
                state = self.fetcher.assignment.get(tp)
                if state is None or not state.awaiting_committed:
                    continue  # unassigned or sought meanwhile
                if failure is not None:  # poll raises it
                    state.awaiting_committed, state.error = False, failure
                    self.fetcher.data_ready.set()
                else:
                    self._start_from(tp, state, found.get(tp))
            self.fetcher.wakeup()

    # -- commits ----------------------------------------------------------------------------------

    def positions(
        self, only: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The consumed position of every (or each `only`) assigned partition that has one."""
        wanted = self.fetcher.assignment if only is None else only
        result = {}
        for tp in wanted:
            state = self.fetcher.assignment.get(tp)
            if state is not None and state.position is not None and state.reset_to is None:
                result[tp] = OffsetAndMetadata(state.position)
        return result

    async def _commit_positions(self, timeout_s: float, only: Iterable[TopicPartition] | None = None) -> None:
        changed = {
            tp: meta
            for tp, meta in self.positions(only).items()
            if self._last_committed.get(tp) != meta.offset
        }
        await self.commit(changed, timeout_s)

    async def commit(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None, timeout_s: float
    ) -> None:
        """Commit `offsets` (None: the consumed positions of every assigned partition)."""
        chosen = self._chosen(offsets)
        subscribed = self.subscription is not None
        if subscribed and not self.membership.in_group and chosen:
            # As Kafka's consumer: a subscribed member outside a generation cannot commit; its partitions
            # are being (or were) handed out again.
            raise CommitFailedError(
                f"commit to group {self.membership.group_id!r} failed: this member is not in the group's "
                "current generation (it is rejoining, or left after max.poll.interval.ms); poll() to rejoin"
            )
        await self.membership.commit(chosen, timeout_s, in_group=subscribed)
        for tp, meta in chosen.items():
            self._last_committed[tp] = meta.offset

    def _chosen(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        if offsets is None:
            return self.positions()
        return {TopicPartition(*tp): _as_offset(meta) for tp, meta in offsets.items()}

    def commit_async(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None,
        callback: CommitCallback | None,
    ) -> asyncio.Task[None]:
        """Commit in the background; `callback(offsets, error_or_None)` is called when it is done."""
        chosen = self._chosen(offsets)

        async def run() -> None:
            error: BaseException | None = None
            try:
                await self.commit(chosen, self.config["default.api.timeout.ms"] / 1000)
            except (KafkaClientError, KafkaError) as failure:
                error = failure
                if callback is None:
                    log.warning(
                        "event=async_commit_failed group=%s error=%s", self.membership.group_id, failure
                    )
            if callback is not None:
                try:
                    callback(chosen, error)
                except Exception:
                    log.exception("event=commit_callback_failed group=%s", self.membership.group_id)

        task = asyncio.ensure_future(run())
        self._commits.add(task)
        task.add_done_callback(self._commits.discard)
        return task

    async def committed(
        self, partitions: Iterable[TopicPartition], timeout_s: float
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        return await self.membership.committed([TopicPartition(*tp) for tp in partitions], timeout_s)


def _as_offset(value: OffsetAndMetadata | int | tuple[Any, ...]) -> OffsetAndMetadata:
    """Commit values may be OffsetAndMetadata, a bare offset, or an (offset, metadata) pair."""
    if isinstance(value, OffsetAndMetadata):
        meta = value
    elif isinstance(value, int):
        meta = OffsetAndMetadata(value)
    else:
        meta = OffsetAndMetadata(*value)
    if meta.offset < 0:
        raise ValueError(f"a committed offset must not be negative, got {meta.offset}")
    return meta
