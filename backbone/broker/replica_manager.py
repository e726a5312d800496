"""The partitions this broker hosts: created when the cluster assigns a replica here, led or followed as
the partition state in ZooKeeper says, deleted with their topic or when reassigned away.

Leading a partition means serving its produces and fetches and deciding its ISR; following one means a
replica fetcher copies it from the leader. ISR changes a leader decides are written here, with a
conditional update on the state version this broker last saw: when the controller changed the state
meanwhile (a new leader), the write fails and the newer state, arriving through the watch, wins.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from backbone.broker.metadata_cache import MetadataCache, MetadataListener, TopicPartition
from backbone.broker.partition import Partition
from backbone.broker.replica_fetcher import FetcherSettings, ReplicaFetchers
from backbone.coordination import CoordinationError, PartitionState, VersionConflictError
from backbone.log import LogConfig, LogManager
from backbone.protocol.errors import (
    KafkaError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    UnknownTopicOrPartitionError,
)

# Writes a partition state if its znode is still at the expected version; returns the new version.
StateWriter = Callable[[str, int, PartitionState, int], Awaitable[int]]

log = logging.getLogger(__name__)


class ReplicaManager(MetadataListener):
    def __init__(
        self,
        broker_id: int,
        log_manager: LogManager,
        cache: MetadataCache,
        *,
        producer_expiration_ms: int,
        replica_lag_time_max_ms: int = 30000,
        fetcher_settings: FetcherSettings | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.log_manager = log_manager
        self.cache = cache
        self.producer_expiration_ms = producer_expiration_ms
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.partitions: dict[TopicPartition, Partition] = {}
        self.topic_configs: dict[str, dict[str, str]] = {}
        settings = fetcher_settings or FetcherSettings(broker_id, "PLAINTEXT")
        self.fetchers = ReplicaFetchers(settings, lambda node: cache.endpoint(node, settings.listener))
        self.write_state: StateWriter | None = None  # set by the broker once ZooKeeper is connected
        self.apply_written_state: Callable[[str, int, PartitionState], None] | None = None
        # Whether a broker may be added to an ISR; the broker sets it from its liveness and shutdown views.
        self.may_join_isr: Callable[[int], bool] = lambda replica: replica in cache.brokers
        self._isr_writes: set[asyncio.Task[None]] = set()
        self.isr_shrinks = 0  # ISR changes of partitions this broker leads (read by the metrics)
        self.isr_expands = 0

    # -- lookups --------------------------------------------------------------------------------------

    def get(self, topic: str, partition: int) -> Partition:
        """A hosted partition, or the error a client should see for it."""
        hosted = self.partitions.get((topic, partition))
        if hosted is not None:
            return hosted
        if topic in self.cache.topics and partition in self.cache.topics[topic].partitions:
            raise NotLeaderOrFollowerError(f"broker {self.broker_id} hosts no replica of {topic}-{partition}")
        raise UnknownTopicOrPartitionError(f"{topic}-{partition} does not exist")

    def leader_partition(self, topic: str, partition: int) -> Partition:
        hosted = self.get(topic, partition)
        if not hosted.is_leader:
            raise NotLeaderOrFollowerError(
                f"broker {self.broker_id} is not the leader of {topic}-{partition} "
                f"(leader: {hosted.leader_id})"
            )
        return hosted

    def topic_config(self, topic: str, key: str, broker_config: Any) -> Any:
        """A topic's override of a broker setting (such as min.insync.replicas), else the broker's value."""
        override = self.topic_configs.get(topic, {}).get(key)
        return broker_config[key] if override is None else override

    def check_min_insync(self, partition: Partition, broker_config: Any) -> int:
        """The partition's min.insync.replicas, before an acks=all append (a client's or the group
        coordinator's); NOT_ENOUGH_REPLICAS, with nothing written, when the ISR is smaller."""
        required = int(self.topic_config(partition.topic, "min.insync.replicas", broker_config))
        if len(partition.isr) < required:
            raise NotEnoughReplicasError(
                f"{partition.topic}-{partition.index} has {len(partition.isr)} in-sync replicas, "
                f"min.insync.replicas={required}"
            )
        return required

    # -- metadata events ------------------------------------------------------------------------------

    def on_partition_state(self, topic: str, partition: int) -> None:
        key = (topic, partition)
        replicas = self.cache.replicas(topic, partition)
        state = self.cache.states.get(key)
        if state is None or self.broker_id not in replicas:
            return
        hosted = self.partitions.get(key)
        if hosted is None:
            log_ = self.log_manager.get_or_create_log(topic, partition)
            hosted = Partition(
                log_,
                self.broker_id,
                self.producer_expiration_ms,
                replica_lag_time_max_ms=self.replica_lag_time_max_ms,
                request_isr_change=self._request_isr_change,
                may_join_isr=lambda replica: self.may_join_isr(replica) and not self._leaving(key, replica),
            )
            self.partitions[key] = hosted
        before = hosted.isr if hosted.is_leader else None
        hosted.apply_state(state.leader, state.leader_epoch, tuple(state.isr), replicas)
        if before is not None and hosted.is_leader:  # a led partition's ISR changed (for the metrics)
            self.isr_shrinks += len(hosted.isr) < len(before)
            self.isr_expands += len(hosted.isr) > len(before)
        if hosted.is_leader or state.leader < 0:
            self.fetchers.unfollow(key)
        else:
            self.fetchers.follow(hosted, state.leader, state.leader_epoch)

    def _leaving(self, key: TopicPartition, replica: int) -> bool:
        """Whether a reassignment is taking `replica` off the partition. Such a replica must not rejoin the
        ISR: when the move ends, the controller cuts the ISR to the target before it drops the leaving
        replicas from the assignment, and a leader re-adding one in between would undo the cut."""
        assignment = self.cache.topics.get(key[0])
        return assignment is not None and replica in assignment.removing_replicas.get(key[1], ())

    def on_topic_changed(self, topic: str) -> None:
        """Replicas reassigned away from this broker stop and are deleted; new ones start from their state."""
        assignment = self.cache.topics.get(topic)
        if assignment is None:
            return
        for key in [k for k in self.partitions if k[0] == topic]:
            if self.broker_id not in assignment.partitions.get(key[1], ()):
                self._remove_partition(key, topic_deleted=False)
                log.info("event=replica_removed partition=%s-%d reason=reassigned", *key)
        for index in assignment.partitions:
            # New replicas start following; hosted ones learn their new replica list (a reassignment).
            if (topic, index) in self.cache.states:
                self.on_partition_state(topic, index)

    def _remove_partition(self, key: TopicPartition, *, topic_deleted: bool) -> None:
        self.fetchers.unfollow(key)
        hosted = self.partitions.pop(key)
        hosted.remove(topic_deleted=topic_deleted)
        self.log_manager.delete_log(*key)

    # -- ISR changes (leader) ---------------------------------------------------------------------------

    def _request_isr_change(self, partition: Partition, isr: tuple[int, ...]) -> None:
        task = asyncio.get_running_loop().create_task(self._write_isr(partition, isr))
        self._isr_writes.add(task)
        task.add_done_callback(self._isr_writes.discard)

    async def _write_isr(self, partition: Partition, isr: tuple[int, ...]) -> None:
        key = (partition.topic, partition.index)
        state = self.cache.states.get(key)
        if (
            self.write_state is None
            or state is None
            or state.leader != self.broker_id
            or state.leader_epoch != partition.leader_epoch
        ):
            partition.isr_change_ended()
            return
        new = dataclasses.replace(state, isr=isr)
        try:
            version = await self.write_state(partition.topic, partition.index, new, state.zk_version)
        except VersionConflictError:
            log.info("event=isr_change_conflict partition=%s-%d isr=%s", *key, list(isr))
            partition.isr_change_ended()
            return
        except (KafkaError, CoordinationError) as exc:
            # ZooKeeper unreachable or the session expired (CoordinationError), among others: the change must
            # be marked failed, or the partition would wait for this write forever and never change its ISR.
            log.warning("event=isr_change_failed partition=%s-%d isr=%s error=%r", *key, list(isr), str(exc))
            partition.isr_change_ended()
            return
        log.info(
            "event=isr_changed partition=%s-%d leader_epoch=%d isr=%s previous=%s",
            *key,
            state.leader_epoch,
            list(isr),
            list(state.isr),
        )
        if self.apply_written_state is not None:
            self.apply_written_state(
                partition.topic, partition.index, dataclasses.replace(new, zk_version=version)
            )
        # Not applied when a newer state came first (the controller rewrote the ISR in this leader epoch,
        # as when a restarted follower registers again): that state stands, and without this the change
        # would stay pending and keep the leader from ever asking to expand the ISR again.
        partition.isr_change_ended()

    def check_isr_lag(self) -> None:
        """Shrink the ISR of every led partition whose followers stopped keeping up."""
        for hosted in self.partitions.values():
            hosted.shrink_isr_if_lagging()

    def on_topic_deleted(self, topic: str) -> None:
        for key in [k for k in self.partitions if k[0] == topic]:
            self._remove_partition(key, topic_deleted=True)
            log.info("event=partition_deleted partition=%s-%d", *key)
        self.topic_configs.pop(topic, None)
        self.log_manager.set_topic_config(topic, None)

    def on_topic_config(self, topic: str, overrides: dict[str, str]) -> None:
        self.apply_topic_config(topic, overrides)

    def apply_topic_config(self, topic: str, overrides: dict[str, str]) -> None:
        """Per-topic log settings (retention, segments, ...) on top of the broker's defaults."""
        self.topic_configs[topic] = dict(overrides)
        config = (
            LogConfig.from_properties(overrides, base=self.log_manager.default_config) if overrides else None
        )
        self.log_manager.set_topic_config(topic, config)

    def apply_log_defaults(self, defaults: LogConfig) -> None:
        """New broker log defaults (dynamic broker configs) under every topic's own overrides."""
        topics = {t: LogConfig.from_properties(o, base=defaults) for t, o in self.topic_configs.items() if o}
        self.log_manager.set_default_config(defaults, topics)

    # -- housekeeping ---------------------------------------------------------------------------------

    def expire_producers(self) -> None:
        for hosted in self.partitions.values():
            hosted.expire_producers()

    async def stop_replication(self) -> None:
        """Stop fetching and writing ISR changes (before storage closes)."""
        await self.fetchers.stop()
        for task in list(self._isr_writes):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def shutdown(self) -> None:
        for hosted in self.partitions.values():
            try:
                hosted.close()
            except OSError as exc:
                log.error(
                    "event=producer_snapshot_failed partition=%s-%d error=%r", hosted.topic, hosted.index, exc
                )
        self.partitions.clear()
