"""The sink: rows with value, optional key, topic, partition and headers produced to Backbone topics.

Columns are Spark's Kafka sink's: `value` (binary or string) is required, `key` (binary or string),
`topic` (string; the `topic` option, when given, wins over it), `partition` (int) and `headers`
(array<struct<key string, value binary>>) are optional. Each task produces its rows through one client
Producer with acks=all and idempotence, waits for every acknowledgement, and fails with the first
record's error if any record could not be written.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, DataType, IntegerType, StringType, StructType

from backbone.client import KafkaClientError, KafkaTimeoutError, Producer
from backbone.client.producer.bulk_append import WireRecord
from backbone.client.producer.partitioner import StickyPartitioner, partition_for_key
from backbone.protocol.errors import KafkaError
from backbone_spark.options import OptionError, WriteSettings
from backbone_spark.reading import HEADERS_TYPE

Target = tuple[str, int]  # topic, partition

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


class Routing:
    """Where each row goes, as the client's default partitioner would send it: to the row's `partition`
    when set, else where its key hashes, else (no key) to one partition for a batch's worth of bytes
    and then to another (sticky, KIP-480)."""

    def __init__(self, producer: Producer, batch_size: int) -> None:
        self.producer = producer
        self.batch_size = batch_size
        self.partition_counts: dict[str, int] = {}
        self.sticky = StickyPartitioner()
        self.sticky_bytes: dict[str, int] = {}  # bytes sent to a topic's sticky partition so far

    def partitions(self, topic: str) -> int:
        count = self.partition_counts.get(topic)
        if count is None:
            try:
                count = self.partition_counts[topic] = len(self.producer.partitions_for(topic))
            except KafkaTimeoutError:
                raise RecordWriteError(f"topic {topic!r} does not exist (or has no leader)") from None
        return count

    def sticky_partition(self, topic: str, size: int) -> int:
        """The partition for `size` more bytes of null-key records."""
        count = self.partitions(topic)
        chosen = self.sticky.partition(topic, count)
        filled = self.sticky_bytes.get(topic, 0) + size
        if filled >= self.batch_size:
            self.sticky.batch_completed(topic, chosen, count, None)
            filled = 0
        self.sticky_bytes[topic] = filled
        return chosen

    def runs(
        self, batch: pa.RecordBatch, columns: Columns, topic: str | None
    ) -> dict[Target, list[WireRecord]]:
        """The batch's rows as records grouped by topic and partition, in order within each."""
        n = batch.num_rows
        now = int(time.time() * 1000)
        values = _binary(batch, "value")
        keys = _binary(batch, "key") if columns.key else [None] * n
        if columns.headers:
            headers = [
                [] if h is None else [(x["key"], x["value"]) for x in h]
                for h in batch.column("headers").to_pylist()
            ]
        else:
            headers = [[]] * n  # never changed: the batch builder only reads a record's headers
        records = list(zip(keys, values, headers, itertools.repeat(now, n), strict=True))
        if topic is not None and not columns.key and not columns.partition:
            return self._sticky_runs(topic, records, batch.column("value"))
        topics = [topic] * n if topic is not None else batch.column("topic").to_pylist()
        partitions = batch.column("partition").to_pylist() if columns.partition else [None] * n
        runs: dict[Target, list[WireRecord]] = {}
        for record, row_topic, partition in zip(records, topics, partitions, strict=True):
            if row_topic is None:
                raise RecordWriteError("a row has a null topic; set the 'topic' option or fill the column")
            if partition is None:
                key = record[0]
                if key is None:
                    partition = self.sticky_partition(row_topic, len(record[1] or b""))
                else:
                    partition = partition_for_key(key, self.partitions(row_topic))
            runs.setdefault((row_topic, partition), []).append(record)
        return runs

    def _sticky_runs(
        self, topic: str, records: list[WireRecord], values: pa.Array
    ) -> dict[Target, list[WireRecord]]:
        """Null-key records of one topic: a run of about a batch's bytes to each sticky partition in turn."""
        total = pc.sum(pc.binary_length(values)).as_py() or 0
        per_run = max(1, self.batch_size * len(records) // max(1, total))
        runs: dict[Target, list[WireRecord]] = {}
        for start in range(0, len(records), per_run):
            run = records[start : start + per_run]
            target = (topic, self.sticky_partition(topic, total * len(run) // len(records)))
            runs.setdefault(target, []).extend(run)
        return runs


def produce_rows(settings: WriteSettings, columns: Columns, batches: Iterator[pa.RecordBatch]) -> int:
    """Produce every row; returns how many, once all are acknowledged. Raises RecordWriteError.

    Each Arrow batch's rows are grouped by topic and partition (in order within each) and queued with the
    client's bulk path (`send_many`), a run of records at a time: queueing them one by one (`send`) took
    most of a task's time."""
    try:
        producer = Producer(dict(settings.client))
    except KafkaClientError as error:
        raise OptionError(f"option 'kafka.*': {error}") from None
    written = 0
    outcomes: list[Any] = []  # a future per batch the records went into, in order
    checked = 0  # outcomes before this one completed without an error

    def check_completed() -> None:
        nonlocal checked
        for outcome in outcomes[checked:]:
            try:
                error = outcome.exception()
            except asyncio.InvalidStateError:
                return  # not acknowledged yet: later ones are looked at next time
            if error is not None:
                raise RecordWriteError(f"writing a record failed: {error!r}") from error
            checked += 1

    try:
        routing = Routing(producer, int(producer.config["batch.size"]))
        for batch in batches:
            for (topic, partition), records in routing.runs(batch, columns, settings.topic).items():
                queued = producer.send_many(topic, partition, records)
                if queued and isinstance(queued[-1][1], BaseException):
                    raise RecordWriteError(f"writing a record failed: {queued[-1][1]!r}") from queued[-1][1]
                outcomes += [outcome for _, outcome in queued]
            written += batch.num_rows
            check_completed()  # a refused record stops the task without writing the rest
        producer.flush()
        check_completed()
        if checked < len(outcomes):
            raise RecordWriteError(f"{len(outcomes) - checked} batches were not acknowledged after flush")
    except (KafkaClientError, KafkaError, ValueError) as error:
        raise RecordWriteError(f"writing a record failed: {error}") from error
    finally:
        producer.close()
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
