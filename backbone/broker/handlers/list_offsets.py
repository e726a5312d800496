"""ListOffsets: the earliest (-2) or latest (-1) offset, the one with the largest timestamp (-3), or the
first offset whose timestamp is at or after a given time."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from backbone.broker.handlers.fetch import check_leader_epoch
from backbone.broker.handlers.leader_partitions import Shape, leader_partitions_handler
from backbone.broker.network import Handler
from backbone.protocol.api import ApiKey
from backbone.protocol.records import OFFSET, TIMESTAMP, decode_batch

if TYPE_CHECKING:
    from backbone.broker.partition import Partition
    from backbone.broker.replica_manager import ReplicaManager

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3


def list_offsets_handler(replicas: ReplicaManager) -> Handler:
    async def list_offset(request: Any, topic: str, index: int, asked: Any) -> dict[str, Any]:
        partition = replicas.leader_partition(topic, index)
        check_leader_epoch(partition, getattr(asked, "current_leader_epoch", -1))
        timestamp, offset, epoch = _lookup(partition, asked.timestamp, request.replica_id >= 0)
        return {"timestamp": timestamp, "offset": offset, "leader_epoch": epoch}

    return leader_partitions_handler(
        ApiKey.LIST_OFFSETS,
        Shape("ListOffsetsResponse", "ListOffsetsTopicResponse", "ListOffsetsPartitionResponse"),
        list_offset,
        failed={"timestamp": -1, "offset": -1, "leader_epoch": -1},
    )


def _lookup(partition: Partition, timestamp: int, for_replica: bool = False) -> tuple[int, int, int]:
    """(timestamp, offset, leader epoch) for one asked timestamp; a follower's latest is the log end."""
    log = partition.log
    if timestamp == LATEST:
        return -1, log.log_end_offset if for_replica else partition.high_watermark, partition.leader_epoch
    if timestamp == EARLIEST:
        return -1, log.log_start_offset, _epoch_at(partition, log.log_start_offset)
    if timestamp == MAX_TIMESTAMP:
        best = log.max_timestamp_below(partition.high_watermark)
        if best is None:
            return -1, -1, -1
        # The record holding the largest timestamp, not its batch's last (KAFKA-16310): the first of the
        # batch at that time (with LogAppendTime every record carries it, so the batch's first).
        offset, _ = _first_record_at_or_after(partition, best[1], best[0]) or (best[1], best[0])
        return best[0], offset, _epoch_at(partition, offset)
    found = log.offset_for_timestamp(timestamp)
    if found is None or found[0] >= partition.high_watermark:
        return -1, -1, -1
    offset, found_timestamp = _first_record_at_or_after(partition, found[0], timestamp) or found
    return found_timestamp, offset, _epoch_at(partition, offset)


def _first_record_at_or_after(
    partition: Partition, batch_offset: int, timestamp: int
) -> tuple[int, int] | None:
    """The exact record the time index's batch holds: the first at or after `timestamp`, as Kafka answers.

    The index finds the batch (its max timestamp is at or after the time); only this one batch is read and
    decoded, on this admin path, never on the produce or fetch path.
    """
    read = partition.log.read(batch_offset, 1, max_offset=partition.high_watermark)
    if not read.regions:
        return None
    data = read.regions[0].read()
    batch = decode_batch(data, 0)
    if batch.header.has_log_append_time:
        return None  # every record carries the batch's time: the batch answer is exact
    for record in batch.records:
        if record[OFFSET] >= batch_offset and record[TIMESTAMP] >= timestamp:
            return record[OFFSET], record[TIMESTAMP]
    return None


def _epoch_at(partition: Partition, offset: int) -> int:
    epoch = partition.log.leader_epoch_cache.epoch_for_offset(offset)
    return -1 if epoch is None else epoch
