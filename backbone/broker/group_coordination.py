"""The broker's side of the group coordinator: the internal topic `__consumer_offsets`, its log, and
leadership.

Committed offsets and group membership live in the compacted topic `__consumer_offsets`, as in Kafka since
0.8.2 (docs/architecture.md, "Consumer groups"): a commit is one acks=all append to a replicated partition,
and a coordinator failover is that partition's leadership failover. This module creates the topic on the
first FindCoordinator (as Metadata auto-creates topics: straight through the cluster store), appends and
reads its partitions for the `GroupCoordinator`, and tells it which partitions this broker leads, from the
same metadata events the replica manager hears (it is listed after it, so partitions are up to date).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator, Set
from typing import TYPE_CHECKING, Any

from backbone.broker.metadata_cache import MetadataCache, MetadataListener
from backbone.consumer_groups.coordinator import CoordinatorSettings, GroupCoordinator
from backbone.consumer_groups.group_types import GroupConfig
from backbone.consumer_groups.offsets_topic import OFFSETS_TOPIC
from backbone.protocol.errors import KafkaError, TopicAlreadyExistsError
from backbone.protocol.records import DecodedBatch, decode_batches

if TYPE_CHECKING:
    from backbone.broker.config import BrokerConfig
    from backbone.broker.replica_manager import ReplicaManager
    from backbone.coordination import ClusterStore

log = logging.getLogger(__name__)

# Bytes read per step while loading an offsets partition.
LOAD_READ_BYTES = 1 << 20


class GroupCoordination(MetadataListener):
    def __init__(
        self,
        broker_id: int,
        config: BrokerConfig,
        cache: MetadataCache,
        store: ClusterStore,
        zk: Callable[..., Awaitable[Any]],
        replicas: ReplicaManager,
        unreachable: Callable[[], Set[int]],
    ) -> None:
        self.config = config
        self.cache = cache
        self.store = store
        self.zk = zk
        self.replicas = replicas
        self._unreachable = unreachable  # the liveness probes' verdict
        self.partition_count: int = config["offsets.topic.num.partitions"]
        self.coordinator = GroupCoordinator(
            broker_id,
            self,
            CoordinatorSettings(
                partition_count=self.partition_count,
                metadata_max_bytes=config["offset.metadata.max.bytes"],
                retention_ms=config["offsets.retention.minutes"] * 60_000,
                group_config=GroupConfig.from_broker_config(config),
            ),
        )
        self._creating = asyncio.Lock()
        self._cleanups: set[asyncio.Task[None]] = set()

    # -- the offsets topic --------------------------------------------------------------------------------

    async def ensure_offsets_topic(self) -> None:
        """Create `__consumer_offsets` unless it exists (the first FindCoordinator of the cluster does)."""
        async with self._creating:
            if OFFSETS_TOPIC in self.cache.topics:
                return
            wanted = self.config["offsets.topic.replication.factor"]
            live = max(len(self.cache.brokers), 1)
            factor = min(wanted, live)
            if factor < wanted:
                log.warning(
                    "event=offsets_topic_replication_capped wanted=%d live_brokers=%d replication_factor=%d "
                    "reason='fewer brokers than offsets.topic.replication.factor; add brokers and reassign "
                    "__consumer_offsets to get the full factor'",
                    wanted,
                    live,
                    factor,
                )
            configs = {
                "cleanup.policy": "compact",
                "segment.bytes": str(self.config["offsets.topic.segment.bytes"]),
                "compression.type": "producer",
            }
            try:
                await self.zk(
                    self.store.create_topic, OFFSETS_TOPIC, self.partition_count, factor, configs=configs
                )
            except TopicAlreadyExistsError:
                return
            log.info(
                "event=offsets_topic_created partitions=%d replication_factor=%d",
                self.partition_count,
                factor,
            )

    def coordinator_of(self, group_id: str) -> int:
        """The broker leading the group's offsets partition, or -1 while it has no live leader."""
        cache = self.cache
        leader = cache.leader(OFFSETS_TOPIC, self.coordinator.partition_of(group_id))
        if leader not in cache.brokers or leader in self._unreachable():
            return -1
        return leader

    # -- OffsetsLog ---------------------------------------------------------------------------------------

    async def append(self, partition: int, records: bytes) -> int:
        hosted = self.replicas.leader_partition(OFFSETS_TOPIC, partition)
        required = self.replicas.check_min_insync(hosted, self.config)
        result = hosted.append_as_leader(memoryview(records))
        await hosted.wait_committed(result.base_offset, self.config["offsets.commit.timeout.ms"], required)
        return result.base_offset

    def read(self, partition: int) -> Iterator[DecodedBatch]:
        hosted = self.replicas.get(OFFSETS_TOPIC, partition)
        log_ = hosted.log
        offset, end = log_.log_start_offset, log_.log_end_offset
        while offset < end:
            data = log_.read(offset, LOAD_READ_BYTES, max_offset=end).to_bytes()
            before = offset
            for batch in decode_batches(data):
                yield batch
                offset = batch.next_offset
            if offset == before:
                break  # nothing whole below the end (cannot happen: a read returns its first batch whole)

    def partition_exists(self, topic: str, partition: int) -> bool:
        assignment = self.cache.topics.get(topic)
        return assignment is not None and partition in assignment.partitions

    async def topic_exists(self, topic: str) -> bool:
        return await self.zk(self.store.topic_exists, topic)

    # -- metadata events ----------------------------------------------------------------------------------

    def on_partition_state(self, topic: str, partition: int) -> None:
        if topic == OFFSETS_TOPIC:
            self._follow_leadership(partition)

    def on_topic_changed(self, topic: str) -> None:
        if topic != OFFSETS_TOPIC:
            return
        # A topic created elsewhere (or by an older setting) keeps its own partition count: groups hash on it.
        count = self.cache.partition_count(OFFSETS_TOPIC)
        if count and count != self.coordinator.partition_count:
            log.warning(
                "event=offsets_topic_partition_count partitions=%d configured=%d", count, self.partition_count
            )
            self.coordinator.shutdown()  # groups map to other partitions now
            self.coordinator.partition_count = count
        for partition in range(self.coordinator.partition_count):  # a reassignment may have moved one away
            self._follow_leadership(partition)

    def _follow_leadership(self, partition: int) -> None:
        hosted = self.replicas.partitions.get((OFFSETS_TOPIC, partition))
        if hosted is not None and hosted.is_leader:
            self.coordinator.became_leader(partition, hosted.leader_epoch)
        else:
            self.coordinator.resigned(partition)

    def on_topic_deleted(self, topic: str) -> None:
        if topic == OFFSETS_TOPIC:
            self.coordinator.shutdown()
            return
        task = asyncio.get_running_loop().create_task(self._drop_offsets_of(topic))
        self._cleanups.add(task)
        task.add_done_callback(self._cleanups.discard)

    async def _drop_offsets_of(self, topic: str) -> None:
        try:
            await self.coordinator.topic_deleted(topic)
        except KafkaError as exc:
            log.warning("event=offsets_cleanup_failed topic=%s error=%r", topic, str(exc))

    # -- housekeeping -------------------------------------------------------------------------------------

    async def expire_offsets(self) -> None:
        await self.coordinator.expire_offsets()

    async def stop(self) -> None:
        for task in list(self._cleanups):
            task.cancel()
        self.coordinator.shutdown()
