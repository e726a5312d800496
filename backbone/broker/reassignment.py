"""Partition reassignment (KIP-455), driven by the controller through ZooKeeper.

A reassignment of a partition from replicas O to a target T is recorded in the topic's znode:
replicas = T followed by what of O is not in T, adding = T - O, removing = O - T. The brokers in `adding`
see themselves assigned and start following the leader (replica_manager.py); the leader adds each to the
ISR once it has caught up. When every replica of T is in sync, the controller finishes: a new leader from T
if the current one is leaving, the ISR cut down to T, then replicas = T with no adding/removing, at which
point the brokers no longer assigned delete their copy. Cancelling finishes the same way towards O (the
replicas minus `adding`), at once, since O was in sync before. Everything lives in ZooKeeper, so a new
controller carries on where a dead one stopped; every write is fenced by the controller epoch.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence, Set
from typing import TYPE_CHECKING, TypeVar

from backbone.coordination import CoordinationError, PartitionState, TopicAssignment
from backbone.protocol.errors import ErrorCode, KafkaError, NotControllerError
from backbone.wire.reassignment import PartitionReassignment as Ongoing

if TYPE_CHECKING:
    from backbone.broker.controller import Controller

log = logging.getLogger(__name__)

T = TypeVar("T")
TopicPartition = tuple[str, int]
Outcome = tuple[ErrorCode, str | None]
DONE: Outcome = (ErrorCode.none, None)
_STATE_ATTEMPTS = 3  # a leader may change the ISR between our read and our write: read and decide again


def begin(current: Sequence[int], target: Sequence[int]) -> Ongoing:
    """The recorded state of a reassignment from `current` to `target`."""
    replicas = (*target, *(r for r in current if r not in target))
    adding = tuple(r for r in target if r not in current)
    removing = tuple(r for r in current if r not in target)
    return Ongoing(replicas, adding, removing)


def check_target(target: Sequence[int], current: Sequence[int], live: Set[int]) -> str | None:
    """Why moving replicas `current` to `target` is invalid (INVALID_REPLICA_ASSIGNMENT), or None.

    Only the brokers that would start copying must be live, as in Kafka: a move away from a dead broker is
    how an operator replaces it.
    """
    if not target:
        return "the replica list is empty: name at least one broker"
    if len(set(target)) != len(target):
        return f"replicas {list(target)} name a broker twice"
    if any(r < 0 for r in target):
        return f"replicas {list(target)} include a negative broker id"
    down = sorted(r for r in set(target) - set(current) if r not in live)
    if down:
        return (
            f"brokers {down} are not live (not registered, unreachable or shutting down; live: "
            f"{sorted(live)}): start them first or choose live brokers"
        )
    return None


def settle(keep: Sequence[int], state: PartitionState, live: Set[int]) -> tuple[int, tuple[int, ...]] | None:
    """Leader and ISR once the replicas are cut down to `keep`; None when no kept replica could lead.

    The leader stays when it is kept and live; otherwise the first kept replica that is live and in sync
    takes over (assignment order, so the preferred one wins when it can).
    """
    isr = tuple(r for r in state.isr if r in keep)
    if state.leader in keep and state.leader in live:
        return state.leader, isr
    candidates = [r for r in keep if r in isr and r in live]
    if not candidates:
        return None
    return candidates[0], isr


def ongoing(assignment: TopicAssignment, partition: int) -> Ongoing | None:
    adding = tuple(assignment.adding_replicas.get(partition, ()))
    removing = tuple(assignment.removing_replicas.get(partition, ()))
    if not adding and not removing:
        return None
    return Ongoing(tuple(assignment.partitions[partition]), adding, removing)


def with_partition(
    assignment: TopicAssignment, partition: int, state: Ongoing | None, replicas: Sequence[int]
) -> TopicAssignment:
    """The assignment with one partition's replicas and reassignment state replaced."""
    partitions = dict(assignment.partitions)
    adding = dict(assignment.adding_replicas)
    removing = dict(assignment.removing_replicas)
    partitions[partition] = tuple(replicas)
    adding.pop(partition, None)
    removing.pop(partition, None)
    if state is not None:
        if state.adding:
            adding[partition] = state.adding
        if state.removing:
            removing[partition] = state.removing
    return TopicAssignment(assignment.topic, partitions, assignment.topic_id, adding, removing)


def started(changes: Mapping[int, Sequence[int]]) -> Callable[[TopicAssignment], TopicAssignment]:
    """The change recording new targets; a partition already moving keeps its original replicas (O)."""

    def change(assignment: TopicAssignment) -> TopicAssignment:
        for partition, target in changes.items():
            state = ongoing(assignment, partition)
            new = begin(state.original if state is not None else assignment.partitions[partition], target)
            moving = new if new.adding or new.removing else None
            assignment = with_partition(assignment, partition, moving, new.replicas)
        return assignment

    return change


def concluded(
    partition: int, seen: Ongoing, keep: Sequence[int]
) -> Callable[[TopicAssignment], TopicAssignment]:
    """The change ending a reassignment with replicas `keep`, unless it is no longer the one `seen`."""

    def change(assignment: TopicAssignment) -> TopicAssignment:
        if ongoing(assignment, partition) != seen:
            return assignment
        return with_partition(assignment, partition, None, keep)

    return change


class Reassignments:
    """The controller's reassignment work: starting, cancelling and finishing."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller
        # Requests and the control loop take turns, as Kafka's single controller thread makes them: a move
        # must not be finished from a view taken before a cancellation, nor cancelled halfway through.
        self._lock = asyncio.Lock()

    @property
    def _broker(self):
        return self.controller.broker

    def _fence(self) -> int:
        if self.controller.epoch is None:
            raise NotControllerError("this broker is no longer the controller")
        return self.controller.epoch.zk_version

    async def in_progress(self, partitions: Iterable[TopicPartition] | None) -> dict[TopicPartition, Ongoing]:
        """Reassignments in progress, read from ZooKeeper: one started or ended a moment ago shows at once,
        whether or not this broker's watches have delivered it yet."""
        wanted = None if partitions is None else set(partitions)
        topics = None if wanted is None else {topic for topic, _ in wanted}
        assignments = await self._broker.zk(self._broker.store.get_topics, topics)
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
        async with self._lock:
            outcomes: dict[TopicPartition, Outcome] = {}
            live = self.controller.live_brokers()
            assignments = await self._broker.zk(self._broker.store.get_topics, {t for t, _ in requests})
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
                updated = await self._guarded(
                    self._broker.zk(
                        self._broker.store.update_topic_assignment,
                        topic,
                        started(changes),
                        controller_epoch_version=self._fence(),
                    )
                )
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
        self.controller.mark_dirty()
        return outcomes

    async def advance(self) -> None:
        """Finish every reassignment whose target replicas are all in sync (called by the control loop)."""
        moving = [t for t, a in self._broker.cache.topics.items() if a.adding_replicas or a.removing_replicas]
        if not moving:
            return
        async with self._lock:
            # ZooKeeper's word, not the cache's: a move finished a moment ago may not have reached the cache.
            assignments = await self._broker.zk(self._broker.store.get_topics, moving)
            await self._advance(list(assignments.values()), self.controller.live_brokers())

    async def _advance(self, assignments: Iterable[TopicAssignment], live: Set[int]) -> None:
        for assignment in assignments:
            for partition in sorted(assignment.partitions):
                state = ongoing(assignment, partition)
                current = self._broker.cache.states.get((assignment.topic, partition))
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
            self._broker.zk(
                self._broker.store.update_topic_assignment,
                topic,
                concluded(partition, seen, keep),
                controller_epoch_version=self._fence(),
            )
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
            state = await self._broker.zk(self._broker.store.get_partition_state, topic, partition)
            settled = settle(keep, state, live)
            if settled is None:
                return (
                    ErrorCode.eligible_leaders_not_available,
                    f"none of the replicas {list(keep)} of {topic}-{partition} is live and in sync, so none "
                    "can lead; wait for one to catch up, or reassign the partition to replicas that are",
                )
            leader, isr = settled
            if (leader, isr) == (state.leader, tuple(state.isr)) or await self.controller._write(
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
