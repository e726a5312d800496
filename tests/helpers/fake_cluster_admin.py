"""The fake cluster's answers to the non-record APIs: producer ids, offsets, topics, configs, cluster.

Split from `testing.py` to keep each module small; `FakeCluster` calls `handle` for every request that is
not ApiVersions, Produce, Fetch or Metadata.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from backbone.protocol.api import ApiKey
from backbone.protocol.errors import ErrorCode, InvalidRequestError
from backbone.wire.messages import build_response

if TYPE_CHECKING:
    from tests.helpers.fake_cluster import FakeCluster

__all__ = ["handle"]

_TOPIC, _BROKER = 2, 4  # DescribeConfigs resource types
_SET, _DELETE = 0, 1  # IncrementalAlterConfigs operations
EARLIEST, LATEST = -2, -1


def handle(cluster: FakeCluster, node_id: int, api_key: int, version: int, request: Any) -> Any:
    handlers = {
        ApiKey.INIT_PRODUCER_ID: _init_producer_id,
        ApiKey.LIST_OFFSETS: _list_offsets,
        ApiKey.CREATE_TOPICS: _create_topics,
        ApiKey.DELETE_TOPICS: _delete_topics,
        ApiKey.CREATE_PARTITIONS: _create_partitions,
        ApiKey.DESCRIBE_CONFIGS: _describe_configs,
        ApiKey.INCREMENTAL_ALTER_CONFIGS: _alter_configs,
        ApiKey.DESCRIBE_CLUSTER: _describe_cluster,
        ApiKey.DELETE_RECORDS: _delete_records,
    }
    handler = handlers.get(api_key)
    if handler is None:
        raise InvalidRequestError(f"the fake cluster does not serve API {api_key}")
    fields = handler(cluster, node_id, request)
    return build_response(api_key, version, **fields)


def _init_producer_id(cluster: FakeCluster, node_id: int, request: Any) -> dict[str, Any]:
    cluster._next_producer_id += 1
    return {"error_code": 0, "producer_id": cluster._next_producer_id, "producer_epoch": 0}


def _offset_for(cluster: FakeCluster, topic: str, partition: int, timestamp: int) -> tuple[int, int, int]:
    """(error code, offset, timestamp) for a ListOffsets query."""
    part = cluster.topics.get(topic, {}).get(partition)
    if part is None:
        return ErrorCode.unknown_topic_or_partition, -1, -1
    if timestamp == EARLIEST:
        return 0, part.log_start_offset, -1
    if timestamp == LATEST:
        return 0, part.next_offset, -1
    for batch in part.decoded():
        for offset, stamp, *_ in batch.records:
            if offset >= part.log_start_offset and stamp >= timestamp:
                return 0, offset, stamp
    return 0, -1, -1


def _list_offsets(cluster: FakeCluster, node_id: int, request: Any) -> dict[str, Any]:
    topics = []
    for topic in request.topics:
        rows = []
        for wanted in topic.partitions:
            part = cluster.topics.get(topic.name, {}).get(wanted.partition_index)
            if part is not None and part.leader != node_id:
                error, offset, stamp = ErrorCode.not_leader_or_follower, -1, -1
            else:
                error, offset, stamp = _offset_for(
                    cluster, topic.name, wanted.partition_index, wanted.timestamp
                )
            rows.append(
                {
                    "partition_index": wanted.partition_index,
                    "error_code": error,
                    "offset": offset,
                    "timestamp": stamp,
                }
            )
        topics.append({"name": topic.name, "partitions": rows})
    return {"topics": topics}


def _create_topics(cluster: FakeCluster, node_id: int, request: Any) -> dict[str, Any]:
    results = []
    for topic in request.topics:
        error, message = 0, None
        if topic.name in cluster.topics:
            error, message = ErrorCode.topic_already_exists, f"Topic '{topic.name}' already exists."
        elif topic.num_partitions == 0 or topic.num_partitions < -1:
            error, message = ErrorCode.invalid_partitions, "Number of partitions must be larger than 0."
        elif topic.replication_factor > len(cluster.node_ids):
            error, message = ErrorCode.invalid_replication_factor, "Replication factor larger than brokers."
        elif not request.validate_only:
            cluster.create_topic(topic.name, max(int(topic.num_partitions), 1))
            cluster.configs[(_TOPIC, topic.name)] = {c.name: c.value for c in topic.configs}
        results.append(
            {
                "name": topic.name,
                "error_code": error,
                "error_message": message,
                "num_partitions": topic.num_partitions,
                "replication_factor": topic.replication_factor,
            }
        )
    return {"topics": results}


def _delete_topics(cluster: FakeCluster, node_id: int, request: Any) -> dict[str, Any]:
    names = list(getattr(request, "topic_names", ())) or [t.name for t in getattr(request, "topics", ())]
    results = []
    for name in names:
        error = 0 if cluster.topics.pop(name, None) is not None else ErrorCode.unknown_topic_or_partition
        results.append({"name": name, "error_code": error})
    return {"responses": results}


def _create_partitions(cluster: FakeCluster, node_id: int, request: Any) -> dict[str, Any]:
    results = []
    for topic in request.topics:
        parts = cluster.topics.get(topic.name)
        error, message = 0, None
        if parts is None:
            error, message = ErrorCode.unknown_topic_or_partition, None
        elif topic.count <= len(parts):
            error, message = ErrorCode.invalid_partitions, f"Topic already has {len(parts)} partitions."
        elif not request.validate_only:
            existing = len(parts)
            cluster.create_topic(topic.name, topic.count)
            cluster.topics[topic.name].update({p: parts[p] for p in range(existing)})
        results.append({"name": topic.name, "error_code": error, "error_message": message})
    return {"results": results}


def _describe_configs(cluster: FakeCluster, node_id: int, request: Any) -> dict[str, Any]:
    results = []
    for resource in request.resources:
        key = (int(resource.resource_type), resource.resource_name)
        if key[0] == _TOPIC and resource.resource_name not in cluster.topics:
            results.append(
                {
                    "error_code": ErrorCode.unknown_topic_or_partition,
                    "error_message": f"topic {resource.resource_name} does not exist",
                    "resource_type": key[0],
                    "resource_name": key[1],
                    "configs": [],
                }
            )
            continue
        values = cluster.configs.get(key, {})
        wanted = resource.configuration_keys
        configs = [
            {"name": name, "value": value, "read_only": False, "config_source": 1, "is_sensitive": False}
            for name, value in sorted(values.items())
            if not wanted or name in wanted
        ]
        results.append(
            {
                "error_code": 0,
                "error_message": None,
                "resource_type": key[0],
                "resource_name": key[1],
                "configs": configs,
            }
        )
    return {"results": results}


def _alter_configs(cluster: FakeCluster, node_id: int, request: Any) -> dict[str, Any]:
    responses = []
    for resource in request.resources:
        key = (int(resource.resource_type), resource.resource_name)
        error = 0
        if key[0] == _TOPIC and resource.resource_name not in cluster.topics:
            error = ErrorCode.unknown_topic_or_partition
        elif not request.validate_only:
            values = cluster.configs.setdefault(key, {})
            for config in resource.configs:
                if config.config_operation == _DELETE:
                    values.pop(config.name, None)
                else:
                    values[config.name] = config.value
        responses.append(
            {"error_code": error, "error_message": None, "resource_type": key[0], "resource_name": key[1]}
        )
    return {"responses": responses}


def _describe_cluster(cluster: FakeCluster, node_id: int, request: Any) -> dict[str, Any]:
    brokers = [{"broker_id": n, "host": "127.0.0.1", "port": port} for n, port in cluster.ports.items()]
    return {
        "error_code": 0,
        "cluster_id": cluster.cluster_id,
        "controller_id": cluster.node_ids[0],
        "brokers": brokers,
    }


def _delete_records(cluster: FakeCluster, node_id: int, request: Any) -> dict[str, Any]:
    topics = []
    for topic in request.topics:
        rows = []
        for wanted in topic.partitions:
            part = cluster.topics.get(topic.name, {}).get(wanted.partition_index)
            if part is None:
                rows.append({"partition_index": wanted.partition_index, "low_watermark": -1, "error_code": 3})
                continue
            target = part.next_offset if wanted.offset == -1 else wanted.offset
            if target > part.next_offset:
                rows.append(
                    {
                        "partition_index": wanted.partition_index,
                        "low_watermark": -1,
                        "error_code": ErrorCode.offset_out_of_range,
                    }
                )
                continue
            part.log_start_offset = max(part.log_start_offset, target)
            rows.append(
                {
                    "partition_index": wanted.partition_index,
                    "low_watermark": part.log_start_offset,
                    "error_code": 0,
                }
            )
        topics.append({"name": topic.name, "partitions": rows})
    return {"topics": topics}
