"""The sink: rows with value, optional key, topic, partition and headers produced to Backbone topics.

Columns are Spark's Kafka sink's: `value` (binary or string) is required, `key` (binary or string),
`topic` (string; the `topic` option, when given, wins over it), `partition` (int) and `headers`
(array<struct<key string, value binary>>) are optional. Each task produces its rows through one client
Producer with acks=all and idempotence, waits for every acknowledgement, and fails with the first
record's error if any record could not be written.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, DataType, IntegerType, StringType, StructType

from backbone.client import KafkaClientError, Producer
from backbone.protocol.errors import KafkaError
from backbone_spark.options import OptionError, WriteSettings
from backbone_spark.reading import HEADERS_TYPE

__all__ = ["BackboneStreamWriter", "BackboneWriter", "RecordWriteError", "produce_rows"]

log = logging.getLogger(__name__)


class RecordWriteError(RuntimeError):
    """A record could not be written; the task fails with it."""


@dataclass
class WrittenCount(WriterCommitMessage):
    records: int


def _check_column(schema: StructType, name: str, allowed: tuple[DataType, ...], required: bool) -> bool:
    if name not in schema.fieldNames():
        if required:
            raise OptionError(f"the sink needs a {name!r} column (binary or string)")
        return False
    kind = schema[name].dataType
    if kind not in allowed:
        names = " or ".join(t.simpleString() for t in allowed)
        raise OptionError(f"column {name!r} must be {names}, got {kind.simpleString()}")
    return True


@dataclass(frozen=True)
class Columns:
    """Which of the sink's columns the rows have."""

    key: bool
    topic: bool
    partition: bool
    headers: bool

    @classmethod
    def check(cls, settings: WriteSettings, schema: StructType) -> Columns:
        _check_column(schema, "value", (BinaryType(), StringType()), required=True)
        columns = cls(
            key=_check_column(schema, "key", (BinaryType(), StringType()), required=False),
            topic=_check_column(schema, "topic", (StringType(),), required=False),
            partition=_check_column(schema, "partition", (IntegerType(),), required=False),
            headers=_check_column(schema, "headers", (HEADERS_TYPE,), required=False),
        )
        if settings.topic is None and not columns.topic:
            raise OptionError("the sink needs a 'topic' column or the 'topic' option naming where to write")
        return columns


def _binary(batch: pa.RecordBatch, name: str) -> list[Any]:
    column = batch.column(name)
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        column = column.cast(pa.binary())
    return column.to_pylist()


def produce_rows(settings: WriteSettings, columns: Columns, batches: Iterator[pa.RecordBatch]) -> int:
    """Produce every row; returns how many, once all are acknowledged. Raises RecordWriteError."""
    failures: list[BaseException] = []

    def on_done(_metadata: object, error: BaseException | None) -> None:
        if error is not None and not failures:
            failures.append(error)

    try:
        producer = Producer(dict(settings.client))
    except KafkaClientError as error:
        raise OptionError(f"option 'kafka.*': {error}") from None
    written = 0
    try:
        send = producer.send
        for batch in batches:
            n = batch.num_rows
            values = _binary(batch, "value")
            keys = _binary(batch, "key") if columns.key else [None] * n
            topics = [settings.topic] * n if settings.topic else batch.column("topic").to_pylist()
            partitions = batch.column("partition").to_pylist() if columns.partition else [None] * n
            if columns.headers:
                headers = [
                    None if h is None else [(x["key"], x["value"]) for x in h]
                    for h in batch.column("headers").to_pylist()
                ]
            else:
                headers = [None] * n
            for topic, value, key, header, partition in zip(
                topics, values, keys, headers, partitions, strict=True
            ):
                if topic is None:
                    raise RecordWriteError(
                        "a row has a null topic; set the 'topic' option or fill the column"
                    )
                send(topic, value, key, header, partition, None, on_done)
            written += n
            if failures:
                break
        producer.flush()
    except (KafkaClientError, KafkaError) as error:
        raise RecordWriteError(f"writing a record failed: {error}") from error
    finally:
        producer.close()
    if failures:
        raise RecordWriteError(f"writing a record failed: {failures[0]!r}") from failures[0]
    return written


class BackboneWriter(DataSourceArrowWriter):
    def __init__(self, settings: WriteSettings, schema: StructType) -> None:
        self.settings = settings
        self.columns = Columns.check(settings, schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenCount:
        return WrittenCount(produce_rows(self.settings, self.columns, iterator))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        total = sum(m.records for m in messages if isinstance(m, WrittenCount))
        log.info("event=write_committed records=%d tasks=%d", total, len(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        # Records already acknowledged stay in their topics (as with Spark's Kafka sink: at least once).
        log.warning("event=write_aborted tasks=%d", len(messages))


class BackboneStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, settings: WriteSettings, schema: StructType) -> None:
        self.settings = settings
        self.columns = Columns.check(settings, schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenCount:
        return WrittenCount(produce_rows(self.settings, self.columns, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        total = sum(m.records for m in messages if isinstance(m, WrittenCount))
        log.info("event=write_committed batch=%d records=%d", batchId, total)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("event=write_aborted batch=%d tasks=%d", batchId, len(messages))
