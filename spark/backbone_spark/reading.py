"""Reading one offset range in a Spark task: the client's fetched records turned into Arrow record batches.

Each poll's records become one Arrow record batch (`columns.ColumnBuilder`): the decoder's uniform runs are
cut into columns straight from the fetched bytes, other records are transposed, so no Python object is made
per record beyond what the decoder made. Columns and types are those of Spark's Kafka source.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from backbone.client import Consumer, TopicPartition
from backbone.protocol.errors import OffsetOutOfRangeError
from backbone_spark.columns import HEADERS_ARROW, ColumnBuilder
from backbone_spark.options import EARLIEST, ReadSettings
from backbone_spark.planning import OffsetRange, client_config

__all__ = ["HEADERS_TYPE", "DataLossError", "arrow_schema", "read_range", "spark_schema"]

log = logging.getLogger(__name__)

HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))
# Records per poll, and so per Arrow batch: large enough that the per-batch costs vanish.
_RECORDS_PER_BATCH = 20_000
_FETCH_BYTES = 8 * 1024 * 1024


class DataLossError(RuntimeError):
    """Records the read should return were deleted (retention) before it got to them."""


def spark_schema(include_headers: bool) -> StructType:
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema PySpark expects for `spark_schema` (timestamps in microseconds, UTC)."""
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADERS_ARROW))
    return pa.schema(fields)


def _lost(settings: ReadSettings, tp: TopicPartition, start: int, earliest: int, until: int) -> int:
    """Where to go on when [start, earliest) was deleted before it was read: fail, or skip and count."""
    lost_until = min(earliest, until)
    if settings.fail_on_data_loss:
        raise DataLossError(
            f"records of {tp} at offsets {start} to {lost_until - 1} were deleted (retention) before they "
            f"were read (the log now starts at {earliest}); set failOnDataLoss=false to skip them"
        )
    log.warning(
        "event=data_loss_skipped topic=%s partition=%d from=%d until=%d records=%d",
        tp.topic,
        tp.partition,
        start,
        lost_until,
        lost_until - start,
    )
    return lost_until


def read_range(settings: ReadSettings, part: OffsetRange) -> Iterator[pa.RecordBatch]:
    """Arrow batches of every record of `part`, in offset order."""
    schema = arrow_schema(settings.include_headers)
    tp = TopicPartition(part.topic, part.partition)
    # Bigger fetches than a consumer's default: a task reads a known range as fast as it can.
    config = {"max.partition.fetch.bytes": _FETCH_BYTES, **settings.client}
    consumer = Consumer(
        client_config(
            config,
            **{
                "enable.auto.commit": False,
                "auto.offset.reset": "none",
                "max.poll.records": _RECORDS_PER_BATCH,
                "record.regions": True,  # unlike records decoded a column at a time (columns.py)
            },
        )
    )
    try:
        consumer.assign([tp])
        if part.start == EARLIEST:
            consumer.seek_to_beginning(tp)
        else:
            consumer.seek(tp, part.start)
        position = part.start if part.start != EARLIEST else consumer.position(tp)
        skipped = 0
        idle_since = time.monotonic()
        while position < part.until:
            try:
                polled = consumer.poll(timeout_ms=500)
            except OffsetOutOfRangeError:
                earliest = consumer.beginning_offsets([tp])[tp]
                if earliest <= position:
                    raise
                resume = _lost(settings, tp, position, earliest, part.until)
                skipped += resume - position
                position = resume
                consumer.seek(tp, position)
                continue
            records = polled.get(tp)
            if not records:
                if time.monotonic() - idle_since > settings.poll_timeout_ms / 1000:
                    raise TimeoutError(
                        f"no records of {tp} arrived for {settings.poll_timeout_ms} ms at offset {position} "
                        f"(reading up to {part.until}); is the partition's leader up? "
                        "(kafkaConsumer.pollTimeoutMs)"
                    )
                continue
            idle_since = time.monotonic()
            columns = ColumnBuilder(settings.include_headers)
            done = False
            for kind, run in records.runs():
                done = columns.add(int(kind), run, part.until)
                if done:  # the range ends inside this run
                    break
            if columns.rows:
                yield columns.finish(tp.topic, tp.partition, schema)
            position = part.until if done else consumer.position(tp)
        if skipped:
            log.info("event=range_read topic=%s partition=%d skipped=%d", tp.topic, tp.partition, skipped)
    finally:
        consumer.close()
