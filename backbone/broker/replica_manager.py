"""The partitions this broker hosts: created when the cluster assigns a replica here, led or followed as
the partition state in ZooKeeper says, deleted with their topic.
"""

from __future__ import annotations

import logging
from typing import Any

from backbone.broker.metadata import MetadataCache, MetadataListener, TopicPartition
from backbone.broker.partition import Partition
from backbone.log import LogConfig, LogManager
from backbone.protocol.errors import (
    NotLeaderOrFollowerError,
    UnknownTopicOrPartitionError,
)

log = logging.getLogger(__name__)


class ReplicaManager(MetadataListener):
    def __init__(
        self,
        broker_id: int,
        log_manager: LogManager,
        cache: MetadataCache,
        *,
        producer_expiration_ms: int,
    ) -> None:
        self.broker_id = broker_id
        self.log_manager = log_manager
        self.cache = cache
        self.producer_expiration_ms = producer_expiration_ms
        self.partitions: dict[TopicPartition, Partition] = {}
        self.topic_configs: dict[str, dict[str, str]] = {}

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

    # -- metadata events ------------------------------------------------------------------------------

    def on_partition_state(self, topic: str, partition: int) -> None:
        replicas = self.cache.replicas(topic, partition)
        state = self.cache.states.get((topic, partition))
        if state is None or self.broker_id not in replicas:
            return
        hosted = self.partitions.get((topic, partition))
        if hosted is None:
            log_ = self.log_manager.get_or_create_log(topic, partition)
            hosted = Partition(log_, self.broker_id, self.producer_expiration_ms)
            self.partitions[(topic, partition)] = hosted
        hosted.apply_state(state.leader, state.leader_epoch, tuple(state.isr), replicas)

    def on_topic_deleted(self, topic: str) -> None:
        for key in [k for k in self.partitions if k[0] == topic]:
            hosted = self.partitions.pop(key)
            hosted.wake_waiters()
            self.log_manager.delete_log(*key)
            log.info("event=partition_deleted partition=%s-%d", *key)
        self.topic_configs.pop(topic, None)
        self.log_manager.set_topic_config(topic, None)

    def apply_topic_config(self, topic: str, overrides: dict[str, str]) -> None:
        """Per-topic log settings (retention, segments, ...) on top of the broker's defaults."""
        self.topic_configs[topic] = dict(overrides)
        config = (
            LogConfig.from_properties(overrides, base=self.log_manager.default_config) if overrides else None
        )
        self.log_manager.set_topic_config(topic, config)

    # -- housekeeping ---------------------------------------------------------------------------------

    def expire_producers(self) -> None:
        for hosted in self.partitions.values():
            hosted.expire_producers()

    def shutdown(self) -> None:
        for hosted in self.partitions.values():
            try:
                hosted.close()
            except OSError as exc:
                log.error(
                    "event=producer_snapshot_failed partition=%s-%d error=%r", hosted.topic, hosted.index, exc
                )
        self.partitions.clear()
