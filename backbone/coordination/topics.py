"""Topics, partitions and their leader/ISR state, deletion, and ISR change notifications."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence

from kazoo.client import TransactionRequest
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

from backbone.coordination import paths
from backbone.coordination.assignment import (
    BrokerPlacement,
    assign_replicas,
    expansion_start_index,
    validate_assignment,
)
from backbone.coordination.brokers import MAX_RACES, BrokerOps
from backbone.coordination.errors import CoordinationError, VersionConflictError
from backbone.coordination.session import Watch, transaction_failure, translate_errors
from backbone.coordination.znodes import (
    PartitionState,
    TopicAssignment,
    decode_partition_list,
    encode_config,
    encode_partition_list,
    new_kafka_uuid,
)
from backbone.protocol.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidRequestError,
    InvalidTopicError,
    NotControllerError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

__all__ = ["TopicOps", "validate_config_values"]

log = logging.getLogger(__name__)


def validate_config_values(config: Mapping[str, object]) -> dict[str, str]:
    """Kafka stores every config value as a string; anything else is a caller's mistake."""
    for key, value in config.items():
        if not isinstance(key, str) or not key:
            raise InvalidConfigError(f"config names must be non-empty strings, got {key!r}")
        if not isinstance(value, str):
            raise InvalidConfigError(
                f"config {key} must be given as a string, got {type(value).__name__} {value!r}"
            )
    return {str(key): str(value) for key, value in config.items()}


def _initial_state(replicas: Sequence[int], live: set[int], controller_epoch: int) -> PartitionState:
    """Leader = first live replica (the preferred one when up), ISR = live replicas, epoch 0."""
    in_sync = tuple(r for r in replicas if r in live)
    return PartitionState(
        leader=in_sync[0] if in_sync else -1, leader_epoch=0, isr=in_sync, controller_epoch=controller_epoch
    )


def _replaced_controller(controller_epoch_version: int) -> NotControllerError:
    return NotControllerError(
        f"{paths.CONTROLLER_EPOCH} is no longer at version {controller_epoch_version}: "
        "another controller was elected"
    )


class TopicOps(BrokerOps):
    """Topic assignments, partition states and topic deletion."""

    # -- reading ---------------------------------------------------------------------------------

    @translate_errors("list topics")
    def list_topics(self) -> list[str]:
        return self._children(paths.TOPICS)

    @translate_errors("look up a topic")
    def topic_exists(self, topic: str) -> bool:
        return self._exists(paths.topic_path(topic)) is not None

    @translate_errors("read a topic")
    def get_topic(self, topic: str) -> TopicAssignment:
        """The topic's replica assignment; UnknownTopicOrPartitionError when there is no such topic."""
        return self._read_topic(topic)[0]

    def _read_topic(self, topic: str) -> tuple[TopicAssignment, int]:
        try:
            data, stat = self._get(paths.topic_path(topic))
        except NoNodeError as error:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist") from error
        return TopicAssignment.decode(topic, data), stat.version

    @translate_errors("read topics")
    def get_topics(self, topics: Iterable[str] | None = None) -> dict[str, TopicAssignment]:
        """Assignments of the named topics (all when None); names that do not exist are left out."""
        found = {}
        for topic in sorted(self.list_topics() if topics is None else set(topics)):
            try:
                found[topic] = self.get_topic(topic)
            except UnknownTopicOrPartitionError:
                log.debug("event=topic_vanished_while_listing topic=%s", topic)
        return found

    def watch_topics(self, callback: Callable[[list[str]], None]) -> Watch:
        """Call `callback(sorted topic names)` now and whenever a topic is created or deleted."""
        return self._watch_children(paths.TOPICS, callback, "topic list")

    def watch_topic(self, topic: str, callback: Callable[[TopicAssignment | None], None]) -> Watch:
        """Call `callback(assignment or None when absent)` now and on every change of the topic."""

        def on_change(data: bytes | None, stat: object) -> None:
            callback(TopicAssignment.decode(topic, data) if stat is not None else None)

        return self._watch_data(paths.topic_path(topic), on_change, f"topic {topic}")

    @translate_errors("update a topic's assignment")
    def update_topic_assignment(
        self,
        topic: str,
        change: Callable[[TopicAssignment], TopicAssignment],
        *,
        controller_epoch_version: int | None = None,
    ) -> TopicAssignment:
        """Read the assignment, apply `change`, write it back if nobody wrote meanwhile (else again).

        A change that returns the assignment as it was writes nothing. With `controller_epoch_version` the
        write also requires /controller_epoch at that version, so a replaced controller cannot change
        assignments (NotControllerError).
        """
        path = paths.topic_path(topic)
        for _ in range(MAX_RACES):
            assignment, version = self._read_topic(topic)
            updated = change(assignment)
            if updated == assignment:
                return assignment
            transaction = self._client.transaction()
            if controller_epoch_version is not None:
                transaction.check(paths.CONTROLLER_EPOCH, controller_epoch_version)
            transaction.set_data(path, updated.encode(), version=version)
            failure = transaction_failure(transaction.commit())
            if failure is None:
                return updated
            index, error = failure
            if controller_epoch_version is not None and index == 0:
                raise _replaced_controller(controller_epoch_version) from error
            if isinstance(error, BadVersionError):
                continue
            if isinstance(error, NoNodeError):
                raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist") from error
            raise error
        raise CoordinationError(f"the assignment of {topic!r} kept changing under us; retry later")

    # -- creating --------------------------------------------------------------------------------

    def _placements(self) -> list[BrokerPlacement]:
        return [BrokerPlacement(b.broker_id, b.rack) for b in self.list_brokers()]

    def _check_name_is_free(self, topic: str) -> None:
        paths.validate_topic_name(topic)
        existing = self.list_topics()
        if topic in existing:
            raise TopicAlreadyExistsError(f"Topic '{topic}' already exists.")
        if self._deletion_pending(topic):
            # As Kafka's AdminZkClient: the name is free only once every replica has deleted its data.
            raise TopicAlreadyExistsError(f"Topic '{topic}' is marked for deletion.")
        # '.' and '_' collide in metric names, so Kafka refuses topics differing only in them.
        flattened = topic.replace(".", "_")
        clash = next((t for t in existing if t.replace(".", "_") == flattened), None)
        if clash is not None:
            raise InvalidTopicError(f"Topic '{topic}' collides with existing topic: {clash}")

    @translate_errors("create a topic")
    def create_topic(
        self,
        topic: str,
        partitions: int | None = None,
        replication_factor: int | None = None,
        *,
        assignment: Mapping[int, Sequence[int]] | None = None,
        configs: Mapping[str, str] | None = None,
        validate_only: bool = False,
        start_index: int | None = None,
    ) -> TopicAssignment:
        """Create a topic in one ZooKeeper transaction: assignment, config, and partition states.

        Give `partitions` and `replication_factor` (replicas are spread over live brokers as Kafka does)
        or an explicit `assignment` {partition: [brokers]}. The initial state of each partition names the
        first live replica as leader and the live replicas as ISR; the controller takes it from there.
        """
        config = validate_config_values(configs or {})
        if partitions is not None:  # refused at once when even the smallest nodes could not fit
            check_partition_count(partitions, f"creating topic '{topic}' with {partitions} partitions")
        self._check_name_is_free(topic)
        placements = self._placements()
        live = {p.broker_id for p in placements}
        if assignment is None:
            if partitions is None or replication_factor is None:
                raise InvalidRequestError("give partitions and replication_factor, or an explicit assignment")
            replicas = assign_replicas(placements, partitions, replication_factor, start_index=start_index)
        else:
            if partitions is not None or replication_factor is not None:
                raise InvalidRequestError(
                    "Both numPartitions or replicationFactor and replicasAssignments were set. "
                    "Both cannot be used at the same time."
                )
            validate_assignment(assignment, live)
            replicas = {p: list(r) for p, r in assignment.items()}
        if validate_only:
            return TopicAssignment(topic, {p: tuple(r) for p, r in replicas.items()})
        created = TopicAssignment(topic, {p: tuple(r) for p, r in sorted(replicas.items())}, new_kafka_uuid())
        epoch = self.get_controller_epoch()
        self._commit_topic_creation(created, config, live, epoch.epoch if epoch else 0)
        log.info(
            "event=topic_created topic=%s topic_id=%s partitions=%d replication_factor=%d",
            topic,
            created.topic_id,
            created.partition_count,
            created.replication_factor,
        )
        return created

    def _commit_topic_creation(
        self, created: TopicAssignment, config: dict[str, str], live: set[int], controller_epoch: int
    ) -> None:
        topic = created.topic
        transaction = self._client.transaction()
        transaction.create(paths.topic_path(topic), created.encode())
        transaction.create(paths.topic_partitions_path(topic))
        self._add_partition_nodes(transaction, topic, created.partitions, live, controller_epoch)
        # A config left behind by an earlier topic of this name is overwritten, not an error.
        config_path = paths.topic_config_path(topic)
        if self._exists(config_path) is not None:
            transaction.set_data(config_path, encode_config(config))
        else:
            transaction.create(config_path, encode_config(config))
        check_request_size(transaction, f"creating topic '{topic}' with {created.partition_count} partitions")
        failure = transaction_failure(transaction.commit())
        if failure is None:
            return
        index, error = failure
        if index == 0 and isinstance(error, NodeExistsError):
            raise TopicAlreadyExistsError(f"Topic '{topic}' already exists.") from error
        raise error

    def _add_partition_nodes(
        self,
        transaction: TransactionRequest,
        topic: str,
        partitions: Mapping[int, Sequence[int]],
        live: set[int],
        controller_epoch: int,
    ) -> None:
        for partition, replicas in sorted(partitions.items()):
            state = _initial_state(replicas, live, controller_epoch)
            transaction.create(paths.partition_path(topic, partition))
            transaction.create(paths.partition_state_path(topic, partition), state.encode())

    @translate_errors("add partitions")
    def add_partitions(
        self,
        topic: str,
        total: int,
        *,
        assignment: Sequence[Sequence[int]] | None = None,
        validate_only: bool = False,
    ) -> TopicAssignment:
        """Grow `topic` to `total` partitions (CreatePartitions); `assignment` lists the new ones' replicas.

        Without an assignment the new partitions continue Kafka's round-robin from partition 0's leader.
        The assignment is updated with a versioned write, so concurrent changes are never lost.
        """
        for _ in range(MAX_RACES):
            current, version = self._read_topic(topic)
            if self._exists(paths.delete_topic_path(topic)) is not None:
                raise InvalidTopicError(f"Topic '{topic}' is queued for deletion.")
            check_partition_count(
                total - current.partition_count, f"growing topic '{topic}' to {total} partitions"
            )
            new = self._plan_new_partitions(current, total, assignment)
            merged = TopicAssignment(
                topic,
                {**current.partitions, **{p: tuple(r) for p, r in new.items()}},
                current.topic_id,
                current.adding_replicas,
                current.removing_replicas,
            )
            if validate_only:
                return merged
            epoch = self.get_controller_epoch()
            transaction = self._client.transaction()
            transaction.set_data(paths.topic_path(topic), merged.encode(), version=version)
            live = set(self.broker_ids())
            self._add_partition_nodes(transaction, topic, new, live, epoch.epoch if epoch else 0)
            check_request_size(transaction, f"growing topic '{topic}' to {total} partitions")
            failure = transaction_failure(transaction.commit())
            if failure is None:
                log.info(
                    "event=partitions_added topic=%s from=%d to=%d", topic, current.partition_count, total
                )
                return merged
            index, error = failure
            if index == 0 and isinstance(error, BadVersionError | NoNodeError):
                continue  # changed or deleted meanwhile: read again (a deleted topic raises Unknown)
            raise error
        raise CoordinationError(f"topic {topic!r} kept changing while adding partitions; retry")

    def _plan_new_partitions(
        self, current: TopicAssignment, total: int, assignment: Sequence[Sequence[int]] | None
    ) -> dict[int, list[int]]:
        existing = current.partition_count
        if total == existing:
            raise InvalidPartitionsError(f"Topic already has {existing} partitions.")
        if total < existing:
            raise InvalidPartitionsError(
                f"Topic currently has {existing} partitions, which is higher than the requested {total}."
            )
        placements = self._placements()
        if assignment is not None:
            if len(assignment) != total - existing:
                raise InvalidPartitionsError(
                    f"Increasing the number of partitions by {total - existing} "
                    f"but {len(assignment)} assignments provided."
                )
            new = {existing + i: list(replicas) for i, replicas in enumerate(assignment)}
            validate_assignment(
                new,
                (p.broker_id for p in placements),
                first_partition=existing,
                replication_factor=current.replication_factor,
            )
            return new
        start = expansion_start_index([p.broker_id for p in placements], current.partitions[0])
        return assign_replicas(
            placements,
            total - existing,
            current.replication_factor,
            start_index=start,
            start_partition=existing,
        )

    # -- deleting --------------------------------------------------------------------------------

    @translate_errors("mark a topic for deletion")
    def mark_topic_for_deletion(self, topic: str) -> None:
        """Queue the topic for deletion (/admin/delete_topics/<topic>); the controller deletes it."""
        if not self.topic_exists(topic):
            raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
        try:
            self._client.create(paths.delete_topic_path(topic))
        except NodeExistsError:
            log.debug("event=topic_already_marked_for_deletion topic=%s", topic)
            return
        log.info("event=topic_marked_for_deletion topic=%s", topic)

    @translate_errors("list topics marked for deletion")
    def topics_marked_for_deletion(self) -> list[str]:
        return self._children(paths.DELETE_TOPICS)

    def watch_topic_deletions(self, callback: Callable[[list[str]], None]) -> Watch:
        """Call `callback(topics queued for deletion)` now and whenever the queue changes."""
        return self._watch_children(paths.DELETE_TOPICS, callback, "topic deletions")

    @translate_errors("delete a topic")
    def delete_topic(self, topic: str) -> None:
        """Remove the topic's assignment, partition states and config atomically, leaving its deletion
        marker (/admin/delete_topics/<topic>) naming the live brokers that still hold its replicas: the
        name cannot be used again until each has deleted its data (`replica_data_deleted`), as in Kafka."""
        for _ in range(MAX_RACES):
            doomed = self._subtree(paths.topic_path(topic))
            if not doomed:
                raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
            holders = sorted(self._replica_holders(topic) & set(self.broker_ids()))
            if self._exists(paths.topic_config_path(topic)):
                doomed.append(paths.topic_config_path(topic))
            marker = paths.delete_topic_path(topic)
            transaction = self._client.transaction()
            for path in doomed:
                transaction.delete(path)
            queued = self._exists(marker)
            if queued is not None:
                transaction.delete(marker, version=queued.version)
            if holders:
                transaction.create(marker, json.dumps({"version": 1, "brokers": holders}).encode())
            failure = transaction_failure(transaction.commit())
            if failure is None:
                waiting = ",".join(map(str, holders)) or "none"
                log.info("event=topic_deleted topic=%s nodes=%d awaiting=%s", topic, len(doomed), waiting)
                return
            if isinstance(failure[1], NotEmptyError | NoNodeError | BadVersionError | NodeExistsError):
                continue  # a node appeared or vanished meanwhile: collect the tree again
            raise failure[1]
        raise CoordinationError(f"topic {topic!r} kept changing while being deleted; retry")

    def _replica_holders(self, topic: str) -> set[int]:
        try:
            assignment = self.get_topic(topic)
        except UnknownTopicOrPartitionError:
            return set()
        return {broker for replicas in assignment.partitions.values() for broker in replicas}

    @translate_errors("finish a topic deletion")
    def replica_data_deleted(self, topic: str, broker_id: int) -> None:
        """`broker_id` has deleted its data of the deleted `topic`: take it off the deletion marker, and
        remove the marker with the last such broker (the topic's name is then free)."""
        marker = paths.delete_topic_path(topic)
        for _ in range(MAX_RACES):
            found = self._get_or_none(marker)
            if found is None:
                return
            data, stat = found
            waiting = [b for b in _marker_brokers(data) if b != broker_id]
            try:
                if waiting:
                    payload = json.dumps({"version": 1, "brokers": waiting}).encode()
                    self._client.set(marker, payload, version=stat.version)
                else:
                    self._client.delete(marker, version=stat.version)
                    log.info("event=topic_deletion_completed topic=%s", topic)
                return
            except BadVersionError:
                continue
            except NoNodeError:
                return
        raise CoordinationError(f"the deletion marker of {topic!r} kept changing; retry")

    def _deletion_pending(self, topic: str) -> bool:
        """Whether a deleted topic still waits for a live broker to delete its data. A marker whose
        remaining brokers are all gone is removed: a broker that is not registered serves no replica."""
        marker = paths.delete_topic_path(topic)
        found = self._get_or_none(marker)
        if found is None:
            return False
        data, stat = found
        if set(_marker_brokers(data)) & set(self.broker_ids()):
            return True
        with contextlib.suppress(NoNodeError, BadVersionError):
            self._client.delete(marker, version=stat.version)
            log.info("event=stale_deletion_marker_removed topic=%s", topic)
        return False

    def _subtree(self, root: str) -> list[str]:
        """`root` and everything below it, children before parents ([] when root does not exist)."""
        ordered: list[str] = []
        pending = [root]
        while pending:
            path = pending.pop()
            try:
                children = self._children(path)
            except NoNodeError:
                continue
            ordered.append(path)
            pending.extend(f"{path}/{child}" for child in children)
        return sorted(ordered, key=lambda p: p.count("/"), reverse=True)

    # -- partition state -------------------------------------------------------------------------

    @translate_errors("read a partition state")
    def get_partition_state(self, topic: str, partition: int) -> PartitionState:
        """Leader, epoch and ISR, with `zk_version` for a later conditional update."""
        try:
            data, stat = self._get(paths.partition_state_path(topic, partition))
        except NoNodeError as error:
            raise UnknownTopicOrPartitionError(f"partition {topic}-{partition} has no state") from error
        return PartitionState.decode(data, stat.version)

    def watch_partition_state(
        self, topic: str, partition: int, callback: Callable[[PartitionState | None], None]
    ) -> Watch:
        """Call `callback(state or None when absent)` now and on every change of the partition's state."""

        def on_change(data: bytes | None, stat: object) -> None:
            callback(PartitionState.decode(data, stat.version) if stat is not None and data else None)  # type: ignore[attr-defined]

        return self._watch_data(
            paths.partition_state_path(topic, partition), on_change, f"state {topic}-{partition}"
        )

    @translate_errors("read partition states")
    def get_partition_states(self, topic: str) -> dict[int, PartitionState]:
        return {p: self.get_partition_state(topic, p) for p in sorted(self.get_topic(topic).partitions)}

    @translate_errors("update a partition state")
    def set_partition_state(
        self,
        topic: str,
        partition: int,
        state: PartitionState,
        expected_version: int,
        *,
        controller_epoch_version: int | None = None,
    ) -> int:
        """Write the state if its znode is still at `expected_version`; returns the new version.

        A stale version raises VersionConflictError (INVALID_UPDATE_VERSION): re-read and decide again.
        With `controller_epoch_version`, the write also requires /controller_epoch at that version, which
        fences a controller that has been replaced (NotControllerError).
        """
        path = paths.partition_state_path(topic, partition)
        transaction = self._client.transaction()
        if controller_epoch_version is not None:
            transaction.check(paths.CONTROLLER_EPOCH, controller_epoch_version)
        transaction.set_data(path, state.encode(), version=expected_version)
        results = transaction.commit()
        failure = transaction_failure(results)
        if failure is None:
            return int(results[-1].version)
        index, error = failure
        if controller_epoch_version is not None and index == 0:
            raise _replaced_controller(controller_epoch_version) from error
        if isinstance(error, BadVersionError):
            raise VersionConflictError(path, expected_version) from error
        if isinstance(error, NoNodeError):
            raise UnknownTopicOrPartitionError(f"partition {topic}-{partition} has no state") from error
        raise error

    # -- ISR change notifications ----------------------------------------------------------------

    @translate_errors("notify an ISR change")
    def notify_isr_change(self, partitions: Iterable[tuple[str, int]]) -> str:
        """Tell the controller these partitions' ISR changed; returns the notification's node name."""
        created: str = self._client.create(
            paths.isr_change_prefix_path(), encode_partition_list(partitions), sequence=True
        )
        return created.rsplit("/", 1)[1]

    @translate_errors("read ISR change notifications")
    def pop_isr_change_notifications(self) -> set[tuple[str, int]]:
        """All partitions named by pending notifications; the notifications read are deleted."""
        changed: set[tuple[str, int]] = set()
        for name in self._children(paths.ISR_CHANGE_NOTIFICATION):
            path = paths.isr_change_path(name)
            found = self._get_or_none(path)
            if found is None:
                continue  # another reader took it
            changed |= decode_partition_list(found[0], path)
            try:
                self._client.delete(path)
            except NoNodeError:
                log.debug("event=isr_change_notification_already_deleted path=%s", path)
        return changed

    def watch_isr_change_notifications(self, callback: Callable[[list[str]], None]) -> Watch:
        """Call `callback(pending notification names)` now and whenever one is added or removed."""
        return self._watch_children(paths.ISR_CHANGE_NOTIFICATION, callback, "ISR change notifications")


# ZooKeeper refuses (and drops the session of) any request over jute.maxbuffer, 1 MiB unless the server was
# configured otherwise; a topic's creation is one transaction holding every partition's nodes.
JUTE_MAX_BUFFER = 0xFFFFF
_OPERATION_OVERHEAD = 64  # bytes per operation besides its path and data: header, ACL, flags


def _marker_brokers(data: bytes) -> list[int]:
    """The brokers a deletion marker waits for (a marker queued by `mark_topic_for_deletion` has none)."""
    try:
        return [int(b) for b in json.loads(data or b"{}").get("brokers", [])]
    except (ValueError, TypeError, AttributeError):
        return []


def check_partition_count(partitions: int, what: str) -> None:
    """Refuse, before any work, a partition count whose nodes (two each) cannot fit in one request."""
    least = partitions * 2 * _OPERATION_OVERHEAD
    if least > JUTE_MAX_BUFFER:
        raise InvalidPartitionsError(
            f"{what} needs a ZooKeeper request of more than {least / 1_048_576:.1f} MiB, over ZooKeeper's "
            f"jute.maxbuffer limit ({JUTE_MAX_BUFFER} bytes); use fewer partitions (at most a few thousand "
            "per topic), or several topics"
        )


def check_request_size(transaction: TransactionRequest, what: str) -> None:
    """Refuse a transaction ZooKeeper would refuse, before sending it (InvalidPartitionsError)."""
    operations = transaction.operations
    size = sum(
        len(op.path) + len(getattr(op, "data", None) or b"") + _OPERATION_OVERHEAD for op in operations
    )
    if size <= JUTE_MAX_BUFFER:
        return
    raise InvalidPartitionsError(
        f"{what} needs a ZooKeeper request of about {size / 1_048_576:.1f} MiB, over ZooKeeper's "
        f"jute.maxbuffer limit ({JUTE_MAX_BUFFER} bytes); use fewer partitions (each costs about "
        f"{size // max(1, len(operations) // 2)} bytes), or several topics"
    )
