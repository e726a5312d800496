"""DescribeLogDirs: the partitions in each of this broker's log directories, with their sizes.

A reassignment's progress is the size of a new replica next to the leader's; `offset_lag` is how far this
replica's log end is behind the high watermark it knows (0 on a leader).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from backbone.broker.handlers.common import build, response_module, throttle
from backbone.broker.network import Handler, RequestContext
from backbone.protocol.api import ApiKey
from backbone.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from backbone.broker.replica_manager import ReplicaManager


def describe_log_dirs_handler(replicas: ReplicaManager, log_dirs: list[str]) -> Handler:
    async def handle(context: RequestContext) -> Any:
        request = context.decode()
        module = response_module(ApiKey.DESCRIBE_LOG_DIRS, context.api_version)
        wanted = (
            None
            if request.topics is None
            else {(t.topic, int(p)) for t in request.topics for p in t.partitions}
        )
        by_dir: dict[str, dict[str, list[Any]]] = {str(d): {} for d in log_dirs}
        for key, partition in sorted(replicas.partitions.items()):
            if wanted is not None and key not in wanted:
                continue
            hosted = partition.log
            directory = str(hosted.directory.parent)
            lag = 0 if partition.is_leader else max(0, hosted.high_watermark - hosted.log_end_offset)
            by_dir.setdefault(directory, {}).setdefault(key[0], []).append(
                build(
                    module.DescribeLogDirsPartition,
                    partition_index=key[1],
                    partition_size=hosted.size_in_bytes,
                    offset_lag=lag,
                    is_future_key=False,
                )
            )
        results = []
        for directory, topics in by_dir.items():
            usage = os.statvfs(directory) if os.path.isdir(directory) else None
            results.append(
                build(
                    module.DescribeLogDirsResult,
                    error_code=ErrorCode.none,
                    log_dir=directory,
                    topics=tuple(
                        build(module.DescribeLogDirsTopic, name=name, partitions=tuple(rows))
                        for name, rows in topics.items()
                    ),
                    total_bytes=-1 if usage is None else usage.f_blocks * usage.f_frsize,
                    usable_bytes=-1 if usage is None else usage.f_bavail * usage.f_frsize,
                )
            )
        return build(
            module.DescribeLogDirsResponse,
            throttle_time=throttle(),
            error_code=ErrorCode.none,
            results=tuple(results),
        )

    return handle
