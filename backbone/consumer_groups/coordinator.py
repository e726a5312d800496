"""The group coordinator's home: which groups this broker coordinates, and their committed offsets.

A group belongs to one partition of `__consumer_offsets` (`partition_for`), and the leader of that partition
is its coordinator. Becoming leader loads the partition: its records are read from the log start to the
end, rebuilding the committed offsets and the groups (`Group.restore`); until that is done, requests for its
groups get COORDINATOR_LOAD_IN_PROGRESS. Losing leadership unloads it (`Group.shutdown`) and its groups get
NOT_COORDINATOR, which sends clients to FindCoordinator and the new leader.

Every change is one record batch appended to the group's partition with acks=all (`OffsetsLog.append`);
the in-memory state changes only once the in-sync replicas have the batch, so what a client was told is
committed is what a new coordinator loads after a failover. Each cached offset remembers the log offset of
its record: when two writes for one key complete out of order, the later record wins, as it does on load.

The broker side (`backbone/broker/group_coordination.py`) gives this class the log and tells it about
leadership; nothing here knows about partitions' replicas or ZooKeeper.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from backbone.consumer_groups.group import Group
from backbone.consumer_groups.group_types import GroupConfig, GroupSnapshot
from backbone.consumer_groups.offsets_store import (
    GroupOffsets,
    OffsetsLog,
    StoredOffset,
    TopicPartition,
    keep_later,
    replay_partition,
)
from backbone.consumer_groups.offsets_topic import (
    CommittedOffset,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
    partition_for,
)
from backbone.protocol.errors import ErrorCode, KafkaError, error_class
from backbone.protocol.records import RecordBatchBuilder

log = logging.getLogger(__name__)

# Longer group ids are refused (INVALID_GROUP_ID): a group id is a record key on every commit.
MAX_GROUP_ID_LENGTH = 255
# Pause before reading an offsets partition again after a load failed.
LOAD_RETRY_S = 1.0

# How errors of an offsets-partition append reach clients (Kafka's GroupMetadataManager mapping):
# retriable replication trouble means "coordinator not available", a lost leadership "not coordinator".
_APPEND_ERRORS = {
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.request_timed_out: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
    ErrorCode.message_too_large: ErrorCode.invalid_commit_offset_size,
    ErrorCode.record_list_too_large: ErrorCode.invalid_commit_offset_size,
    ErrorCode.invalid_fetch_size: ErrorCode.invalid_commit_offset_size,
}


class CoordinatorError(KafkaError):
    """This broker cannot serve the group now: NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE or INVALID_GROUP_ID (`code`)."""

    def __init__(self, code: ErrorCode, message: str = "") -> None:
        self.code = code
        self.retriable = error_class(code).retriable
        super().__init__(message)


@dataclass(frozen=True)
class CoordinatorSettings:
    partition_count: int  # offsets.topic.num.partitions
    metadata_max_bytes: int = 4096  # offset.metadata.max.bytes
    retention_ms: int = 10080 * 60_000  # offsets.retention.minutes
    group_config: GroupConfig = field(default_factory=GroupConfig)


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    """One partition's offset in an OffsetCommit request."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None


@dataclass
class _OffsetsPartition:
    """One offsets partition this broker leads: loading, or loaded."""

    index: int
    leader_epoch: int
    loaded: bool = False
    offsets: GroupOffsets = field(default_factory=dict)
    groups: dict[str, Group] = field(default_factory=dict)
    loader: asyncio.Task[None] | None = None


def validate_group_id(group_id: str | None) -> str:
    if not group_id:
        raise CoordinatorError(ErrorCode.invalid_group_id, "the group id must not be empty")
    if len(group_id) > MAX_GROUP_ID_LENGTH:
        raise CoordinatorError(
            ErrorCode.invalid_group_id,
            f"the group id is {len(group_id)} characters long; at most {MAX_GROUP_ID_LENGTH} are allowed",
        )
    return group_id


def append_error(exc: BaseException) -> ErrorCode:
    """The error a client sees when an offsets-partition append failed with `exc`."""
    if isinstance(exc, KafkaError):
        return _APPEND_ERRORS.get(exc.code, exc.code)
    log.error("event=offsets_append_failed error=%r", exc, exc_info=exc)
    return ErrorCode.unknown_server_error


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class GroupCoordinator:
    def __init__(self, broker_id: int, offsets_log: OffsetsLog, settings: CoordinatorSettings) -> None:
        self.broker_id = broker_id
        self.log = offsets_log
        self.settings = settings
        # The offsets topic's real partition count once it exists (Kafka too prefers it to the setting).
        self.partition_count = settings.partition_count
        self._partitions: dict[int, _OffsetsPartition] = {}

    # -- the interface of the membership handlers ---------------------------------------------------------

    def partition_of(self, group_id: str) -> int:
        return partition_for(group_id, self.partition_count)

    def _loaded_partition(self, group_id: str) -> _OffsetsPartition:
        validate_group_id(group_id)
        index = self.partition_of(group_id)
        partition = self._partitions.get(index)
        if partition is None:
            raise CoordinatorError(
                ErrorCode.not_coordinator,
                f"broker {self.broker_id} is not the coordinator of group {group_id!r} "
                f"(it does not lead __consumer_offsets-{index})",
            )
        if not partition.loaded:
            raise CoordinatorError(
                ErrorCode.coordinator_load_in_progress,
                f"__consumer_offsets-{index} is still being loaded on broker {self.broker_id}",
            )
        return partition

    def group(self, group_id: str) -> Group | None:
        return self._loaded_partition(group_id).groups.get(group_id)

    def get_or_create_group(self, group_id: str) -> Group:
        partition = self._loaded_partition(group_id)
        group = partition.groups.get(group_id)
        if group is None:
            group = Group(group_id, self.settings.group_config, self._persister(group_id))
            partition.groups[group_id] = group
        return group

    def groups(self) -> list[Group]:
        return [g for p in self._partitions.values() if p.loaded for g in p.groups.values()]

    def _persister(self, group_id: str) -> Callable[[GroupSnapshot], Awaitable[ErrorCode]]:
        async def persist(snapshot: GroupSnapshot) -> ErrorCode:
            return await self._persist_group(group_id, snapshot)

        return persist

    async def _persist_group(self, group_id: str, snapshot: GroupSnapshot) -> ErrorCode:
        """Write a group's membership after a rebalance or when it empties (acks=all)."""
        index = self.partition_of(group_id)
        try:
            builder = RecordBatchBuilder()
            builder.append(encode_group_key(group_id), encode_group_value(snapshot))
            await self._append(index, builder.build())
        except Exception as exc:
            code = append_error(exc)
            # A group record too large is the server's problem, not an offset commit's (Kafka's mapping). The
            # group logs the failure.
            return ErrorCode.unknown_server_error if code is ErrorCode.invalid_commit_offset_size else code
        return ErrorCode.none

    async def _append(self, index: int, records: bytes) -> int:
        partition = self._partitions.get(index)
        if partition is None or not partition.loaded:
            raise CoordinatorError(ErrorCode.not_coordinator, f"lost __consumer_offsets-{index}")
        return await self.log.append(index, records)

    # -- offsets ------------------------------------------------------------------------------------------

    async def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        generation_id: int,
        commits: list[OffsetCommit],
    ) -> dict[TopicPartition, ErrorCode]:
        """Commit a request's offsets as one batch; the error of each partition.

        Raises CoordinatorError when this broker cannot serve the group at all.
        """
        partition = self._loaded_partition(group_id)
        group = partition.groups.get(group_id)
        if group is None and generation_id >= 0:
            # Only a consumer that manages its own partitions (generation -1) commits without a group.
            group_error = ErrorCode.illegal_generation
        elif group is None:
            group_error = ErrorCode.none
        else:
            group_error = group.validate_offset_commit(member_id, instance_id, generation_id)
        results: dict[TopicPartition, ErrorCode] = {}
        accepted: list[tuple[TopicPartition, CommittedOffset]] = []
        timestamp = now_ms()
        for commit in commits:
            key = (commit.topic, commit.partition)
            metadata = commit.metadata or ""
            if group_error is not ErrorCode.none:
                results[key] = group_error
            elif not self.log.partition_exists(commit.topic, commit.partition):
                results[key] = ErrorCode.unknown_topic_or_partition
            elif len(metadata.encode("utf-8")) > self.settings.metadata_max_bytes:
                results[key] = ErrorCode.offset_metadata_too_large
            else:
                accepted.append(
                    (key, CommittedOffset(commit.offset, commit.leader_epoch, metadata, timestamp))
                )
        if not accepted:
            return results
        builder = RecordBatchBuilder()
        for (topic, index), committed in accepted:
            builder.append(
                encode_offset_key(group_id, topic, index), encode_offset_value(committed), timestamp=timestamp
            )
        try:
            base_offset = await self._append(partition.index, builder.build())
        except Exception as exc:
            code = append_error(exc)
            log.info(
                "event=offset_commit_failed group=%s partitions=%d error=%s",
                group_id,
                len(accepted),
                code.name,
            )
            results.update((key, code) for key, _ in accepted)
            return results
        results.update((key, ErrorCode.none) for key, _ in accepted)  # the in-sync replicas have them
        if self._partitions.get(partition.index) is not partition:
            return results  # unloaded meanwhile: the next coordinator loads them from the log
        if group is None:
            # Kafka's rule: a group that commits without membership exists from now on (Empty), so that
            # ListGroups, DescribeGroups and DeleteGroups see it.
            self.get_or_create_group(group_id)
        stored = partition.offsets.setdefault(group_id, {})
        for delta, (key, committed) in enumerate(accepted):
            keep_later(stored, key, StoredOffset(committed, base_offset + delta))
        return results

    def fetch_offsets(
        self, group_id: str, wanted: Iterable[TopicPartition] | None
    ) -> dict[TopicPartition, CommittedOffset | None]:
        """Committed offsets of `wanted` (None: every partition the group has one for); None where none."""
        partition = self._loaded_partition(group_id)
        stored = partition.offsets.get(group_id, {})
        if wanted is None:
            return {key: entry.committed for key, entry in stored.items()}
        found = {}
        for key in wanted:
            entry = stored.get(key)
            found[key] = None if entry is None else entry.committed
        return found

    async def delete_offsets(
        self, group_id: str, wanted: list[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """OffsetDelete: (group error, each partition's error); tombstones for the offsets removed."""
        partition = self._loaded_partition(group_id)
        group = partition.groups.get(group_id)
        stored = partition.offsets.get(group_id, {})
        if group is None and not stored:
            return ErrorCode.group_id_not_found, {}
        subscribed: set[str] = set()
        if group is not None and not group.is_empty():
            topics = group.subscribed_topics()
            if topics is None:
                # Members whose subscriptions are not the consumer protocol's: nothing can be deleted safely.
                return ErrorCode.non_empty_group, {}
            subscribed = topics
        results: dict[TopicPartition, ErrorCode] = {}
        removable: list[TopicPartition] = []
        for key in wanted:
            if key[0] in subscribed:
                results[key] = ErrorCode.group_subscribed_to_topic
            elif not self.log.partition_exists(*key):
                results[key] = ErrorCode.unknown_topic_or_partition
            else:
                results[key] = ErrorCode.none
                if key in stored:
                    removable.append(key)
        if removable:
            code = await self._remove_offsets(partition, {group_id: removable})
            if code is not ErrorCode.none:
                results.update((key, code) for key in removable)
        return ErrorCode.none, results

    async def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        """DeleteGroups: each group's error; a deleted group's offsets and membership get tombstones."""
        results: dict[str, ErrorCode] = {}
        for group_id in group_ids:
            try:
                partition = self._loaded_partition(group_id)
            except CoordinatorError as exc:
                results[group_id] = exc.code
                continue
            group = partition.groups.get(group_id)
            stored = partition.offsets.get(group_id, {})
            if group is None and not stored:
                results[group_id] = ErrorCode.group_id_not_found
            elif group is not None and not group.is_empty():
                results[group_id] = ErrorCode.non_empty_group
            else:
                results[group_id] = await self._delete_group(partition, group_id)
        return results

    async def _delete_group(self, partition: _OffsetsPartition, group_id: str) -> ErrorCode:
        group = partition.groups.pop(group_id, None)
        if group is not None:
            group.mark_dead()  # no joins meanwhile: the group is gone whatever the append does
        code = await self._remove_offsets(
            partition, {group_id: list(partition.offsets.get(group_id, {}))}, delete_groups={group_id}
        )
        if code is ErrorCode.none:
            log.info("event=group_deleted group=%s partition=%d", group_id, partition.index)
        return code

    async def _remove_offsets(
        self,
        partition: _OffsetsPartition,
        keys: dict[str, list[TopicPartition]],
        delete_groups: Iterable[str] = (),
    ) -> ErrorCode:
        """Append tombstones for offsets (and groups); drop them from the cache once the ISR has them."""
        builder = RecordBatchBuilder()
        for group_id, partitions in keys.items():
            for topic, index in partitions:
                builder.append(encode_offset_key(group_id, topic, index), None)
        for group_id in delete_groups:
            builder.append(encode_group_key(group_id), None)
        if builder.record_count == 0:
            return ErrorCode.none
        try:
            tombstone_offset = await self._append(partition.index, builder.build())
        except Exception as exc:
            return append_error(exc)
        for group_id, partitions in keys.items():
            stored = partition.offsets.get(group_id, {})
            for key in partitions:
                entry = stored.get(key)
                if entry is not None and entry.log_offset < tombstone_offset:  # not re-committed since
                    del stored[key]
            if not stored:
                partition.offsets.pop(group_id, None)
        return ErrorCode.none

    # -- retention ----------------------------------------------------------------------------------------

    async def expire_offsets(self, current_ms: int | None = None) -> int:
        """Remove expired offsets (Kafka 2.1+ rules, see `_expired`) and offsets of deleted topics; delete
        empty groups left with no offsets. Returns how many offsets were removed."""
        current_ms = now_ms() if current_ms is None else current_ms
        removed = 0
        for partition in [p for p in self._partitions.values() if p.loaded]:
            gone_topics = await self._deleted_topics(partition)
            if self._partitions.get(partition.index) is not partition:
                continue  # unloaded while asking: the next coordinator expires them
            keys: dict[str, list[TopicPartition]] = {}
            for group_id, stored in partition.offsets.items():
                expired = self._expired(partition.groups.get(group_id), stored, current_ms, gone_topics)
                if expired:
                    keys[group_id] = expired
            # Kafka's rule: an empty group left without offsets is deleted.
            dead_groups = [
                group_id
                for group_id, group in partition.groups.items()
                if group.is_empty()
                and len(keys.get(group_id, ())) == len(partition.offsets.get(group_id, {}))
            ]
            if not keys and not dead_groups:
                continue
            for group_id in dead_groups:
                partition.groups.pop(group_id).mark_dead()
            code = await self._remove_offsets(partition, keys, delete_groups=dead_groups)
            count = sum(len(v) for v in keys.values())
            if code is ErrorCode.none:
                removed += count
                log.info(
                    "event=offsets_expired partition=%d offsets=%d groups_deleted=%d",
                    partition.index,
                    count,
                    len(dead_groups),
                )
            else:
                log.warning("event=offsets_expiry_failed partition=%d error=%s", partition.index, code.name)
        return removed

    def _expired(
        self, group: Group | None, stored: dict[TopicPartition, StoredOffset], current_ms: int, gone: set[str]
    ) -> list[TopicPartition]:
        """Kafka's rule: an empty group's offsets expire `retention` after it became empty; a consumer group
        with members only loses offsets of topics it no longer subscribes to, `retention` after their
        commit; a group that only stores offsets (no membership protocol) loses each `retention` after its
        commit. Offsets of deleted topics go at once."""
        retention = self.settings.retention_ms
        expired = [key for key in stored if key[0] in gone]
        if group is None or _is_simple(group):
            since = None
            kept_topics: set[str] = set()
        elif group.is_empty():
            stamp = group.snapshot().state_timestamp_ms
            since = stamp if stamp >= 0 else None
            kept_topics = set()
        else:
            topics = group.subscribed_topics()
            if topics is None:
                return expired
            since, kept_topics = None, topics
        for key, entry in stored.items():
            if key[0] in gone or key[0] in kept_topics:
                continue
            base = entry.committed.commit_timestamp_ms if since is None else since
            if base + retention <= current_ms:
                expired.append(key)
        return expired

    async def _deleted_topics(self, partition: _OffsetsPartition) -> set[str]:
        """Topics this partition holds offsets for that no longer exist (confirmed with the cluster)."""
        candidates = {
            key[0]
            for stored in partition.offsets.values()
            for key in stored
            if not self.log.partition_exists(*key)
        }
        gone = set()
        for topic in candidates:
            if not await self.log.topic_exists(topic):
                gone.add(topic)
        return gone

    async def topic_deleted(self, topic: str) -> None:
        """A topic was deleted: its committed offsets go too (tombstones)."""
        for partition in [p for p in self._partitions.values() if p.loaded]:
            keys = {
                group_id: [key for key in stored if key[0] == topic]
                for group_id, stored in partition.offsets.items()
            }
            keys = {group_id: found for group_id, found in keys.items() if found}
            if keys:
                code = await self._remove_offsets(partition, keys)
                log.info(
                    "event=offsets_of_deleted_topic topic=%s partition=%d groups=%d error=%s",
                    topic,
                    partition.index,
                    len(keys),
                    code.name,
                )

    # -- leadership ---------------------------------------------------------------------------------------

    def became_leader(self, index: int, leader_epoch: int) -> None:
        """This broker leads offsets partition `index` now: load it (once per leadership)."""
        partition = self._partitions.get(index)
        if partition is not None:
            if partition.leader_epoch == leader_epoch:
                return
            # Leader again in a later epoch: another leader may have written in between; load afresh.
            self.resigned(index)
        partition = _OffsetsPartition(index, leader_epoch)
        self._partitions[index] = partition
        partition.loader = asyncio.get_running_loop().create_task(self._load(partition))

    def resigned(self, index: int) -> None:
        """This broker no longer leads offsets partition `index`: its groups go elsewhere."""
        partition = self._partitions.pop(index, None)
        if partition is None:
            return
        if partition.loader is not None:
            partition.loader.cancel()
        for group in partition.groups.values():
            group.shutdown()
        log.info(
            "event=offsets_partition_unloaded partition=%d groups=%d broker_id=%d",
            index,
            len(partition.groups),
            self.broker_id,
        )

    def shutdown(self) -> None:
        for index in list(self._partitions):
            self.resigned(index)

    async def _load(self, partition: _OffsetsPartition) -> None:
        started = time.monotonic()
        while True:
            try:
                loaded = await asyncio.to_thread(replay_partition, self.log, partition.index)
                break
            except Exception as exc:
                # Clients get COORDINATOR_LOAD_IN_PROGRESS meanwhile; retention or compaction moving the log
                # start during the read is one cause, and the next attempt reads the log as it is then.
                log.error(
                    "event=offsets_load_failed partition=%d error=%r", partition.index, exc, exc_info=exc
                )
                await asyncio.sleep(LOAD_RETRY_S)
        if self._partitions.get(partition.index) is not partition:
            return  # unloaded while reading
        partition.offsets = loaded.offsets
        config = self.settings.group_config
        for group_id, snapshot in loaded.snapshots.items():
            partition.groups[group_id] = Group.restore(
                snapshot, config, self._persister(group_id), group_id=group_id
            )
        for group_id in loaded.offsets:
            if group_id not in partition.groups:
                partition.groups[group_id] = Group(group_id, config, self._persister(group_id))
        partition.loaded = True
        log.info(
            "event=offsets_partition_loaded partition=%d records=%d groups=%d offsets=%d seconds=%.3f",
            partition.index,
            loaded.records,
            len(partition.groups),
            sum(len(v) for v in loaded.offsets.values()),
            time.monotonic() - started,
        )


def _is_simple(group: Group) -> bool:
    """A group that only stores offsets: it never had members with a protocol."""
    return not group.snapshot().protocol_type
