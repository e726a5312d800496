"""The streaming reader: micro-batches of offset ranges, with the offsets in Spark's checkpoint.

An offset, as Spark stores it in the checkpoint, is `{"group": ..., "offsets": {"topic": {"0": 42}}}`: the
next offset to read of every partition, and the consumer group the query commits its progress to. The
group is `kafka.group.id` when given, else `<groupIdPrefix>-<random>` chosen when the query first starts;
it travels in the checkpoint, so a restarted query keeps its group.

Spark asks `latestOffset(start, limit)` for the next batch's end only once the batch ending at `start`
is in the checkpoint's commit log, so that is where `start` is committed to the group: the group's lag in
`backbone groups describe` is the query's. (Spark calls a Python reader's `commit` one micro-batch late,
and not at all for the last batch of a run; `latestOffset` is also called after the last batch of an
AvailableNow run, to learn there is nothing more.) The checkpoint stays the truth on restart.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator, Mapping

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from backbone.client import Admin, KafkaClientError, OffsetAndMetadata, TopicPartition
from backbone.protocol.errors import KafkaError
from backbone_spark.options import EARLIEST, LATEST, ReadSettings
from backbone_spark.planning import OffsetRange, Planner, split_ranges
from backbone_spark.reading import DataLossError, read_range
from backbone_spark.source import RangePartition

__all__ = ["BackboneStreamReader", "prorate"]

log = logging.getLogger(__name__)

Offsets = dict[TopicPartition, int]


def _encode(group: str, offsets: Mapping[TopicPartition, int]) -> dict:
    by_topic: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        by_topic.setdefault(tp.topic, {})[str(tp.partition)] = offsets[tp]
    return {"group": group, "offsets": by_topic}


def _decode(offset: Mapping) -> tuple[str, Offsets]:
    offsets = {
        TopicPartition(topic, int(partition)): int(value)
        for topic, partitions in offset["offsets"].items()
        for partition, value in partitions.items()
    }
    return str(offset["group"]), offsets


def prorate(available: Mapping[TopicPartition, int], limit: int) -> dict[TopicPartition, int]:
    """How many of each partition's available records a batch of at most `limit` takes: shares in
    proportion to what each has waiting (as Spark's Kafka source does), never more than available."""
    total = sum(available.values())
    if total <= limit:
        return dict(available)
    shares = {tp: min(n, limit * n // total) for tp, n in available.items()}
    spare = limit - sum(shares.values())
    for tp in sorted(available, key=lambda t: available[t] - shares[t], reverse=True):
        if spare <= 0:
            break
        extra = min(spare, available[tp] - shares[tp])
        shares[tp] += extra
        spare -= extra
    return shares


class BackboneStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, settings: ReadSettings) -> None:
        self.settings = settings
        self._planner: Planner | None = None
        self._admin: Admin | None = None
        self._available_now_target: Offsets | None = None
        self._last_batch_at = time.monotonic()
        self._committed: dict | None = None
        # Fail now, on the driver, for a cluster that cannot be reached or a topic that does not exist.
        with Planner(settings) as planner:
            planner.topic_partitions()

    def __getstate__(self) -> dict:
        # Spark pickles the reader to its tasks, which need only the settings; clients stay here.
        return {**self.__dict__, "_planner": None, "_admin": None}

    @property
    def planner(self) -> Planner:
        if self._planner is None:
            self._planner = Planner(self.settings)
        return self._planner

    # -- offsets ----------------------------------------------------------------------------------

    def initialOffset(self) -> dict:
        partitions = self.planner.topic_partitions()
        starts = self.planner.resolve(self.settings.starting, partitions, LATEST)
        group = self.settings.group_id or f"{self.settings.group_id_prefix}-{uuid.uuid4()}"
        log.info("event=stream_start group=%s partitions=%d", group, len(starts))
        return _encode(group, starts)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.settings.max_offsets_per_trigger:
            return ReadMaxRows(self.settings.max_offsets_per_trigger)
        if self.settings.min_offsets_per_trigger:
            return ReadMinRows(self.settings.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        partitions = self.planner.topic_partitions()
        self._available_now_target = self.planner.latest(partitions)
        log.info("event=available_now_target partitions=%d", len(partitions))

    def _current(self, start: Offsets) -> tuple[Offsets, Offsets]:
        """(where each partition starts, how far it can go): new partitions start at their earliest."""
        if self._available_now_target is not None:
            partitions = list(self._available_now_target)
            latest = dict(self._available_now_target)
        else:
            partitions = self.planner.topic_partitions()
            latest = self.planner.latest(partitions)
        gone = [tp for tp in start if tp not in latest]
        if gone and self._available_now_target is None:
            message = (
                f"partitions {', '.join(map(str, gone))} of {self.settings.subscription} no longer exist"
            )
            if self.settings.fail_on_data_loss:
                raise DataLossError(message + "; set failOnDataLoss=false to go on without them")
            log.warning("event=partitions_gone partitions=%s", ",".join(map(str, gone)))
        new = [tp for tp in latest if tp not in start]
        starts = {tp: start[tp] for tp in latest if tp in start}
        starts.update(self.planner.earliest(new))
        if new:
            log.info("event=partitions_found partitions=%s", ",".join(map(str, new)))
        return starts, latest

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        group, begun = _decode(start)
        self._commit_to_group(start)
        starts, latest = self._current(begun)
        available = {tp: max(0, latest[tp] - starts[tp]) for tp in latest}
        if isinstance(limit, ReadAllAvailable):
            take = available
        else:
            total = sum(available.values())
            settings = self.settings
            waited_ms = (time.monotonic() - self._last_batch_at) * 1000
            if (
                settings.min_offsets_per_trigger
                and self._available_now_target is None
                and total < settings.min_offsets_per_trigger
                and waited_ms < settings.max_trigger_delay_ms
            ):
                return start
            take = prorate(available, settings.max_offsets_per_trigger or total)
        ends = {tp: starts[tp] + take[tp] for tp in latest}
        # Partitions Spark did not see before go into the end offset even with nothing to take, so they
        # are part of the next start; those that vanished stay out.
        if any(take.values()) or set(ends) != set(begun):
            self._last_batch_at = time.monotonic()
            return _encode(group, ends)
        return start

    def reportLatestOffset(self) -> dict | None:
        return None

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        _, begun = _decode(start)
        _, ends = _decode(end)
        ranges = [
            OffsetRange(tp.topic, tp.partition, begun.get(tp, EARLIEST), until) for tp, until in ends.items()
        ]
        ranges = [r for r in ranges if r.start == EARLIEST or r.until > r.start]
        # A partition first seen in this batch is read from its log start at the time (begun lacks it).
        return [RangePartition(r) for r in split_ranges(ranges, self.settings.min_partitions, None)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)
        yield from read_range(self.settings, partition.offsets)

    # -- the consumer group -----------------------------------------------------------------------

    def _commit_to_group(self, offset: dict) -> None:
        """Commit a batch's end (every offset before it is processed) to the query's consumer group."""
        if offset == self._committed:
            return
        group, offsets = _decode(offset)
        if not offsets:
            return
        try:
            if self._admin is None:
                self._admin = Admin(dict(self.settings.client))
            self._admin.alter_consumer_group_offsets(
                group, {tp: OffsetAndMetadata(o, "spark") for tp, o in offsets.items() if o >= 0}
            )
            self._committed = offset
        except (KafkaClientError, KafkaError) as error:
            # The checkpoint is the truth: a failed commit only delays what the group shows.
            log.warning("event=group_commit_failed group=%s error=%s", group, error)

    def commit(self, end: dict) -> None:
        """Spark's late notice that a batch is done; `latestOffset` has committed it already."""

    def stop(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None
        if self._planner is not None:
            self._planner.close()
            self._planner = None
