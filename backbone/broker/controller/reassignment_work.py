"""The controller's reassignment work (KIP-455): starting, cancelling and finishing, written to ZooKeeper.

What to write is decided in reassignment_decisions.py; here it is read from and written to ZooKeeper (every
write fenced by the controller epoch through fenced_writes.py), so a new controller carries on where a
dead one stopped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence, Set
from typing import TypeVar

from backbone.broker.controller.fenced_writes import FencedWriter
from backbone.broker.controller.reassignment_decisions import (
    Ongoing,
    begin,
    check_target,
    concluded,
    ongoing,
    settle,
    started,
)
from backbone.broker.metadata_cache import MetadataCache
from backbone.coordination import CoordinationError, TopicAssignment
from backbone.protocol import TopicPartition
from backbone.protocol.errors import ErrorCode, KafkaError, NotControllerError

log = logging.getLogger(__name__)

T = TypeVar("T")
Outcome = tuple[ErrorCode, str | None]
DONE: Outcome = (ErrorCode.none, None)
_STATE_ATTEMPTS = 3  # a leader may change the ISR between our read and our write: read and decide again


class Reassignments:
    """The controller's reassignment work: starting, cancelling and finishing."""

    def __init__(
        self,
        cache: MetadataCache,
        writer: FencedWriter,
        live_brokers: Callable[[], set[int]],
        mark_dirty: Callable[[], None],
    ) -> None:
        self.cache = cache
        self.writer = writer
        self.live_brokers = live_brokers
        self._mark_dirty = mark_dirty  # asks the control loop to look again
        # Requests and the control loop take turns, as Kafka's single controller thread makes them: a move
        # must not be finished from a view taken before a cancellation, nor cancelled halfway through.
        self._lock = asyncio.Lock()

    def require_controller(self) -> None:
        """NotControllerError unless this broker is the controller: other brokers send clients to it."""
        self.writer.require_active()

    async def in_progress(self, partitions: Iterable[TopicPartition] | None) -> dict[TopicPartition, Ongoing]:
        """Reassignments in progress, read from ZooKeeper: one started or ended a moment ago shows at once,
        whether or not this broker's watches have delivered it yet."""
        wanted = None if partitions is None else set(partitions)
        topics = None if wanted is None else {topic for topic, _ in wanted}
        assignments = await self.writer.zk(self.writer.store.get_topics, topics)
        found = {}
        for topic, assignment in assignments.items():
            for partition in assignment.partitions:
                state = ongoing(assignment, partition)
                if state is not None and (wanted is None or (topic, partition) in wanted):
                    found[(topic, partition)] = state
        return found

    async def alter(
        self, requests: Mapping[TopicPartition, Sequence[int] | None]
    ) -> dict[TopicPartition, Outcome]:
        """Start (a replica list) or cancel (None) reassignments; an outcome per partition.

        NotControllerError leaves when this broker stopped being the controller: the client asks the new one.
        """
        if not requests:  # nothing to start or cancel: no turn to wait for behind other work, nothing to read
            return {}
        async with self._lock:
            outcomes: dict[TopicPartition, Outcome] = {}
            live = self.live_brokers()
            assignments = await self.writer.zk(self.writer.store.get_topics, {t for t, _ in requests})
            starts: dict[str, dict[int, tuple[int, ...]]] = {}
            cancels: list[tuple[TopicPartition, Ongoing]] = []
            for (topic, partition), target in sorted(requests.items()):
                assignment = assignments.get(topic)
                if assignment is None or partition not in assignment.partitions:
                    outcomes[(topic, partition)] = (
                        ErrorCode.unknown_topic_or_partition,
                        f"{topic}-{partition} does not exist",
                    )
                    continue
                state = ongoing(assignment, partition)
                if target is None:
                    if state is None:
                        outcomes[(topic, partition)] = (
                            ErrorCode.no_reassignment_in_progress,
                            f"{topic}-{partition} is not being reassigned: nothing to cancel",
                        )
                    else:
                        cancels.append(((topic, partition), state))
                    continue
                current = state.original if state is not None else assignment.partitions[partition]
                if problem := check_target(target, current, live):
                    outcomes[(topic, partition)] = (ErrorCode.invalid_replica_assignment, problem)
                    continue
                replicas = begin(current, target).replicas
                if state is not None and not set(state.replicas) <= set(replicas):
                    # A new target leaves out replicas the previous one was adding: they leave the
                    # assignment now, so first they must not lead nor count as in sync (as in Kafka).
                    settled = await self._guarded(self._settle_state((topic, partition), replicas, live))
                    if settled != DONE:
                        outcomes[(topic, partition)] = settled
                        continue
                starts.setdefault(topic, {})[partition] = tuple(target)
            written = []
            for topic, changes in starts.items():
                updated = await self._guarded(self.writer.update_topic_assignment(topic, started(changes)))
                if isinstance(updated, tuple):  # reported per partition; the other topics go on
                    outcomes.update(dict.fromkeys(((topic, p) for p in changes), updated))
                    continue
                written.append(updated)
                for partition, target in changes.items():
                    outcomes[(topic, partition)] = DONE
                    log.info(
                        "event=reassignment_started partition=%s-%d target=%s", topic, partition, list(target)
                    )
            for key, state in cancels:
                outcomes[key] = await self._conclude(key, state, state.original, live, "cancelled")
            # A target already in sync (fewer replicas, another order) finishes now, as in Kafka.
            await self._advance(written, live)
        self._mark_dirty()
        return outcomes

    async def advance(self) -> None:
        """Finish every reassignment whose target replicas are all in sync (called by the control loop)."""
        moving = [t for t, a in self.cache.topics.items() if a.adding_replicas or a.removing_replicas]
        if not moving:
            return
        async with self._lock:
            # ZooKeeper's word, not the cache's: a move finished a moment ago may not have reached the cache.
            assignments = await self.writer.zk(self.writer.store.get_topics, moving)
            await self._advance(list(assignments.values()), self.live_brokers())

    async def _advance(self, assignments: Iterable[TopicAssignment], live: Set[int]) -> None:
        for assignment in assignments:
            for partition in sorted(assignment.partitions):
                state = ongoing(assignment, partition)
                current = self.cache.states.get((assignment.topic, partition))
                if state is None or current is None or not all(r in current.isr for r in state.target):
                    continue
                error, message = await self._conclude(
                    (assignment.topic, partition), state, state.target, live, "completed"
                )
                if error != ErrorCode.none:
                    log.info(
                        "event=reassignment_not_finished partition=%s-%d error=%s reason=%r",
                        assignment.topic,
                        partition,
                        error.name,
                        message,
                    )

    async def _conclude(
        self, key: TopicPartition, seen: Ongoing, keep: Sequence[int], live: Set[int], event: str
    ) -> Outcome:
        """End a reassignment with replicas `keep`: leader and ISR first, so that no leader is ever left
        outside its replicas, then the assignment (whose watchers then delete the replicas left out)."""
        topic, partition = key
        outcome = await self._guarded(self._settle_state(key, keep, live))
        if outcome != DONE:
            return outcome
        updated = await self._guarded(
            self.writer.update_topic_assignment(topic, concluded(partition, seen, keep))
        )
        if isinstance(updated, tuple):
            return updated
        if tuple(updated.partitions[partition]) != tuple(keep) or ongoing(updated, partition) is not None:
            return (
                ErrorCode.unknown_server_error,
                f"{topic}-{partition} was reassigned meanwhile; look again",
            )
        log.info("event=reassignment_%s partition=%s-%d replicas=%s", event, topic, partition, list(keep))
        return DONE

    async def _settle_state(self, key: TopicPartition, keep: Sequence[int], live: Set[int]) -> Outcome:
        """Write the leader and ISR `settle` gives for replicas `keep`, if they differ from ZooKeeper's."""
        topic, partition = key
        for _ in range(_STATE_ATTEMPTS):
            state = await self.writer.zk(self.writer.store.get_partition_state, topic, partition)
            settled = settle(keep, state, live)
            if settled is None:
                return (
                    ErrorCode.eligible_leaders_not_available,
                    f"none of the replicas {list(keep)} of {topic}-{partition} is live and in sync, so none "
                    "can lead; wait for one to catch up, or reassign the partition to replicas that are",
                )
            leader, isr = settled
            if (leader, isr) == (state.leader, tuple(state.isr)) or await self.writer.write_partition_state(
                topic, partition, state, leader, isr, bump_epoch=leader != state.leader
            ):
                return DONE
        return (ErrorCode.unknown_server_error, f"the state of {topic}-{partition} kept changing; retry")

    @staticmethod
    async def _guarded(work: Awaitable[T]) -> T | Outcome:
        """The work's result, or the error it met as an outcome; losing the controllership is raised."""
        try:
            return await work
        except NotControllerError:
            raise
        except (KafkaError, CoordinationError) as exc:
            return (exc.code if isinstance(exc, KafkaError) else ErrorCode.unknown_server_error, str(exc))
