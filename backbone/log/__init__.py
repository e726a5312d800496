"""The storage engine: a partition's log of segments, its recovery, retention and the log manager.

Typical use by the broker:

    manager = LogManager(["/var/lib/backbone/data"], LogConfig.from_properties(server_properties))
    manager.startup()                                   # opens and recovers every partition log
    log = manager.get_or_create_log("events", 0)
    info = log.append(records, leader_epoch=3)          # AppendInfo(first_offset=..., ...)
    result = log.read(offset, max_bytes, max_offset=log.high_watermark)
    for region in result.regions:                       # FileRegion(file, position, length)
        os.sendfile(sock.fileno(), region.fileno(), region.position, region.length)
    manager.run_retention(); manager.run_flush()        # from the broker's scheduler
    manager.run_cleaner()                               # compaction (backbone.log.cleaner)
    manager.shutdown()
"""

from backbone.log.append import AppendInfo, UnexpectedAppendOffsetError
from backbone.log.cleaner import LogCleaner
from backbone.log.config import (
    CREATE_TIME,
    LOG_APPEND_TIME,
    LogConfig,
    broker_property_names,
    topic_property_names,
)
from backbone.log.epoch_cache import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, EpochEntry, LeaderEpochCache
from backbone.log.files import FileRegion, ReadResult, SegmentFile
from backbone.log.index import DEFAULT_INDEX_CACHE, IndexCache
from backbone.log.log import Log, parse_partition_dir, partition_dir_name
from backbone.log.manager import LogManager

__all__ = [
    "CREATE_TIME",
    "DEFAULT_INDEX_CACHE",
    "LOG_APPEND_TIME",
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "AppendInfo",
    "EpochEntry",
    "FileRegion",
    "IndexCache",
    "LeaderEpochCache",
    "Log",
    "LogCleaner",
    "LogConfig",
    "LogManager",
    "ReadResult",
    "SegmentFile",
    "UnexpectedAppendOffsetError",
    "broker_property_names",
    "parse_partition_dir",
    "partition_dir_name",
    "topic_property_names",
]
