"""Admin operations on replicas and leadership: leader elections and reassignments (answered by the
controller), and replica sizes per broker (DescribeLogDirs, to follow a reassignment's progress)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from backbone.client.admin.host import AdminHost
from backbone.client.structs import TopicPartition
from backbone.protocol.api import ApiKey
from backbone.protocol.errors import ErrorCode, KafkaError, error_for
from backbone.wire.connection import encode_kio
from backbone.wire.messages import group_by_topic, indexes_by_topic
from backbone.wire.reassignment import PartitionReassignment

PREFERRED = 0
UNCLEAN = 1
ELECTION_TYPES = {"preferred": PREFERRED, "unclean": UNCLEAN}


class ReplicaAdminMixin(AdminHost):
    """Mixed into AsyncAdmin."""

    async def elect_leaders(
        self,
        election_type: int | str = PREFERRED,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, KafkaError | None]:
        """Run a preferred (0) or unclean (1) leader election on `partitions` (all when None).

        Returns {partition: None when a new leader was elected, else the error saying why not}, e.g.
        ElectionNotNeededError when the preferred replica already leads, PreferredLeaderNotAvailableError
        when it is down or out of sync.
        """
        kind = ELECTION_TYPES[election_type] if isinstance(election_type, str) else int(election_type)
        asked = None if partitions is None else sorted(set(partitions))
        topic_partitions = None if asked is None else indexes_by_topic(asked, "topic", "partitions")

        async def attempt() -> dict[TopicPartition, KafkaError | None]:
            response = await self._controller_request(
                ApiKey.ELECT_LEADERS,
                encode_kio(
                    ApiKey.ELECT_LEADERS,
                    election_type=kind,
                    topic_partitions=topic_partitions,
                    timeout=self._timeout_ms,
                ),
            )
            if getattr(response, "error_code", 0):
                raise error_for(response.error_code, "ElectLeaders")
            results: dict[TopicPartition, KafkaError | None] = {}
            for topic in response.replica_election_results:
                for row in topic.partition_result:
                    tp = TopicPartition(topic.topic, int(row.partition_id))
                    code = ErrorCode(row.error_code)
                    if code == ErrorCode.not_controller:
                        raise error_for(code, "ElectLeaders")
                    results[tp] = None if code == ErrorCode.none else error_for(code, row.error_message or "")
            return results

        return await self._retrying(attempt, "ElectLeaders", timeout_ms)

    async def alter_partition_reassignments(
        self,
        reassignments: Mapping[TopicPartition, Sequence[int] | None],
        *,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, KafkaError | None]:
        """Move partitions to new replica lists (the first is the preferred leader); None cancels a move.

        Returns {partition: None when started or cancelled, else the error}: InvalidReplicaAssignmentError
        (empty, duplicate or negative ids, new replicas on brokers that are not live),
        NoReassignmentInProgressError, UnknownTopicOrPartitionError, or EligibleLeadersNotAvailableError for a
        cancellation none of whose original replicas is live and in sync. Data is copied in the background;
        watch it with `list_partition_reassignments` and `describe_log_dirs`.
        """
        topics = group_by_topic(
            (tp, {"partition_index": tp.partition, "replicas": None if replicas is None else list(replicas)})
            for tp, replicas in sorted(reassignments.items())
        )

        async def attempt() -> dict[TopicPartition, KafkaError | None]:
            response = await self._controller_request(
                ApiKey.ALTER_PARTITION_REASSIGNMENTS,
                encode_kio(ApiKey.ALTER_PARTITION_REASSIGNMENTS, timeout=self._timeout_ms, topics=topics),
            )
            if response.error_code:
                raise error_for(response.error_code, response.error_message or "AlterPartitionReassignments")
            results: dict[TopicPartition, KafkaError | None] = {}
            for topic in response.responses:
                for row in topic.partitions:
                    tp = TopicPartition(topic.name, int(row.partition_index))
                    code = ErrorCode(row.error_code)
                    results[tp] = None if code == ErrorCode.none else error_for(code, row.error_message or "")
            return results

        return await self._retrying(attempt, "AlterPartitionReassignments", timeout_ms)

    async def list_partition_reassignments(
        self, partitions: Iterable[TopicPartition] | None = None, *, timeout_ms: int | None = None
    ) -> dict[TopicPartition, PartitionReassignment]:
        """Reassignments in progress: {partition: (replicas, adding, removing)}."""
        topics = None if partitions is None else indexes_by_topic(partitions)

        async def attempt() -> dict[TopicPartition, PartitionReassignment]:
            response = await self._controller_request(
                ApiKey.LIST_PARTITION_REASSIGNMENTS,
                encode_kio(ApiKey.LIST_PARTITION_REASSIGNMENTS, timeout=self._timeout_ms, topics=topics),
            )
            if response.error_code:
                raise error_for(response.error_code, response.error_message or "ListPartitionReassignments")
            return {
                TopicPartition(topic.name, int(p.partition_index)): PartitionReassignment(
                    tuple(int(r) for r in p.replicas),
                    tuple(int(r) for r in p.adding_replicas),
                    tuple(int(r) for r in p.removing_replicas),
                )
                for topic in response.topics
                for p in topic.partitions
            }

        return await self._retrying(attempt, "ListPartitionReassignments", timeout_ms)

    async def describe_log_dirs(
        self, brokers: Iterable[int] | None = None, *, timeout_ms: int | None = None
    ) -> dict[int, dict[TopicPartition, ReplicaInfo]]:
        """{broker id: {partition: ReplicaInfo(size, offset_lag, is_future, log_dir)}} for every replica
        the brokers hold (all brokers in the cluster's metadata when None).

        Each broker is asked on its own; one that does not answer within the timeout fails the call, so to
        watch a reassignment while a broker is down, name the brokers that matter.
        """
        if brokers is None:
            brokers = sorted((await self.cluster.refresh_metadata()).brokers)

        async def ask(node: int) -> dict[TopicPartition, ReplicaInfo]:
            async def attempt() -> dict[TopicPartition, ReplicaInfo]:
                response = await self.cluster.request_kio(node, ApiKey.DESCRIBE_LOG_DIRS, topics=None)
                if getattr(response, "error_code", 0):  # v3+
                    raise error_for(response.error_code, f"DescribeLogDirs on broker {node}")
                found = {}
                for result in response.results:
                    if result.error_code:
                        raise error_for(result.error_code, f"log directory {result.log_dir} on broker {node}")
                    for topic in result.topics:
                        for p in topic.partitions:
                            found[TopicPartition(topic.name, int(p.partition_index))] = ReplicaInfo(
                                int(p.partition_size),
                                int(p.offset_lag),
                                bool(p.is_future_key),
                                result.log_dir,
                            )
                return found

            return await self._retrying(attempt, f"DescribeLogDirs on broker {node}", timeout_ms)

        nodes = sorted(set(brokers))
        return dict(zip(nodes, await asyncio.gather(*(ask(node) for node in nodes)), strict=True))


class ReplicaInfo(NamedTuple):
    """One replica on one broker (DescribeLogDirs)."""

    size: int
    """bytes of its log segments"""
    offset_lag: int
    """how far its log end is behind the high watermark it knows (0 on the leader)"""
    is_future: bool
    log_dir: str
