"""Planning a read on the driver: which partitions, which offsets, and how they split into Spark tasks.

A `Planner` holds one client Consumer (no group) for metadata and offset lookups. Whatever it cannot
resolve (a topic that does not exist, offsets JSON naming a missing partition, an unreachable cluster)
raises `OptionError` naming the option, so a bad read fails before any task starts.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from backbone.client import Consumer, KafkaClientError, TopicPartition
from backbone.protocol.errors import KafkaError
from backbone_spark.options import EARLIEST, LATEST, OffsetSpec, OptionError, ReadSettings

__all__ = ["OffsetRange", "Planner", "split_ranges"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OffsetRange:
    """Offsets [start, until) of one topic partition; start EARLIEST means "from the log start, whatever
    it is when read" (a partition that appeared during a stream)."""

    topic: str
    partition: int
    start: int
    until: int

    @property
    def size(self) -> int:
        return self.until - max(self.start, 0)


def client_config(settings_client: Mapping[str, Any], **overrides: Any) -> dict[str, Any]:
    config = dict(settings_client)
    config.update(overrides)
    return config


class Planner:
    """Metadata and offsets of the cluster a read names, through the public client API."""

    def __init__(self, settings: ReadSettings) -> None:
        self.settings = settings
        try:
            self.consumer = Consumer(client_config(settings.client, **{"enable.auto.commit": False}))
        except KafkaClientError as error:  # a bad kafka.* property: ConfigError names it
            raise OptionError(f"option 'kafka.*': {error}") from None

    def close(self) -> None:
        self.consumer.close()

    def __enter__(self) -> Planner:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _ask(self, what: str, call: Any, *args: Any) -> Any:
        try:
            return call(*args)
        except (KafkaClientError, KafkaError) as error:
            servers = ",".join(self.settings.client.get("bootstrap.servers", "").split(","))
            raise OptionError(
                f"cannot {what} from the cluster at option 'kafka.bootstrap.servers' ({servers}): {error}; "
                "check that the brokers run and the address is right"
            ) from None

    # -- which partitions -------------------------------------------------------------------------

    def topic_partitions(self) -> list[TopicPartition]:
        """Every partition the read's subscribe, subscribePattern or assign names, as of now."""
        settings = self.settings
        existing = self._ask("list topics", self.consumer.topics)
        if settings.pattern is not None:
            pattern = re.compile(settings.pattern)
            topics = sorted(t for t in existing if pattern.fullmatch(t) and not t.startswith("__"))
        else:
            named = settings.topics or tuple(dict.fromkeys(tp.topic for tp in settings.assigned))
            missing = [t for t in named if t not in existing]
            option = "assign" if settings.assigned else "subscribe"
            if missing and settings.fail_on_data_loss:
                raise OptionError(
                    f"option {option!r}: topic {', '.join(repr(t) for t in missing)} does not exist; "
                    "create it or set failOnDataLoss=false to read nothing from it"
                )
            topics = [t for t in named if t in existing]
        partitions = []
        for topic in topics:
            numbers = self._ask(f"describe topic {topic!r}", self.consumer.partitions_for_topic, topic)
            partitions.extend(TopicPartition(topic, p) for p in sorted(numbers))
        if settings.assigned:
            have = set(partitions)
            absent = [str(tp) for tp in settings.assigned if tp not in have and tp.topic in set(topics)]
            if absent:
                raise OptionError(f"option 'assign': partition {', '.join(absent)} does not exist")
            partitions = [tp for tp in settings.assigned if tp in have]
        for spec in (settings.starting, settings.ending):
            known = set(partitions)
            stray = [str(tp) for tp in spec.offsets if tp not in known and tp.topic in set(topics)]
            if stray:
                raise OptionError(
                    f"option {spec.option!r} names partitions that do not exist: {', '.join(stray)}"
                )
        return partitions

    # -- which offsets ----------------------------------------------------------------------------

    def earliest(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        partitions = list(partitions)
        return (
            self._ask("look up earliest offsets", self.consumer.beginning_offsets, partitions)
            if partitions
            else {}
        )

    def latest(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        partitions = list(partitions)
        return (
            self._ask("look up latest offsets", self.consumer.end_offsets, partitions) if partitions else {}
        )

    def resolve(
        self, spec: OffsetSpec, partitions: list[TopicPartition], missing: int
    ) -> dict[TopicPartition, int]:
        """Concrete offsets for `partitions` per `spec`; partitions JSON leaves out get `missing`
        (EARLIEST or LATEST). Timestamps with no record at or after them resolve to the latest offset,
        or fail for a start with startingOffsetsByTimestampStrategy=error."""
        wanted: dict[TopicPartition, int] = {}
        stamps: dict[TopicPartition, int] = {}
        for tp in partitions:
            if spec.kind == "earliest":
                wanted[tp] = EARLIEST
            elif spec.kind == "latest":
                wanted[tp] = LATEST
            elif spec.kind == "offsets":
                wanted[tp] = spec.offsets.get(tp, missing)
            elif spec.kind == "timestamp":
                stamps[tp] = spec.timestamp
            elif tp in spec.offsets:
                stamps[tp] = spec.offsets[tp]
            else:
                wanted[tp] = missing
        if stamps:
            found = self._ask("look up offsets for timestamps", self.consumer.offsets_for_times, stamps)
            for tp, hit in found.items():
                if hit is not None:
                    wanted[tp] = hit.offset
                elif (
                    spec.option.startswith("starting")
                    and self.settings.starting_by_timestamp_strategy == "error"
                ):
                    raise OptionError(
                        f"option {spec.option!r}: {tp} has no record at or after {stamps[tp]} ms; set "
                        "startingOffsetsByTimestampStrategy=latest to start at the end instead"
                    )
                else:
                    wanted[tp] = LATEST
        earliest = self.earliest(tp for tp, o in wanted.items() if o == EARLIEST)
        latest = self.latest(tp for tp, o in wanted.items() if o == LATEST)
        return {tp: earliest.get(tp, latest.get(tp, offset)) for tp, offset in wanted.items()}

    def batch_ranges(self) -> list[OffsetRange]:
        """The offset ranges of a batch read, split for minPartitions and maxRecordsPerPartition."""
        partitions = self.topic_partitions()
        starts = self.resolve(self.settings.starting, partitions, EARLIEST)
        ends = self.resolve(self.settings.ending, partitions, LATEST)
        ranges = []
        for tp in partitions:
            start, until = starts[tp], ends[tp]
            if start > until:
                raise OptionError(
                    f"options {self.settings.starting.option!r} and {self.settings.ending.option!r}: "
                    f"{tp} would start at {start}, after its end {until}"
                )
            ranges.append(OffsetRange(tp.topic, tp.partition, start, until))
        return split_ranges(ranges, self.settings.min_partitions, self.settings.max_records_per_partition)


def split_ranges(
    ranges: Iterable[OffsetRange], min_partitions: int | None, max_records: int | None
) -> list[OffsetRange]:
    """Non-empty ranges, big ones cut into parts: at least `min_partitions` in all (each range gets parts
    in proportion to its size, as Spark's Kafka source does) and none above `max_records` records."""
    ranges = [r for r in ranges if r.size > 0 or r.start == EARLIEST]
    total = sum(r.size for r in ranges)
    result = []
    for r in ranges:
        parts = 1
        if r.start != EARLIEST and r.size > 0:
            if min_partitions and len(ranges) < min_partitions and total:
                parts = max(parts, round(r.size / total * min_partitions))
            if max_records:
                parts = max(parts, math.ceil(r.size / max_records))
        if parts <= 1:
            result.append(r)
            continue
        for i in range(parts):
            start = r.start + r.size * i // parts
            until = r.start + r.size * (i + 1) // parts
            if until > start:
                result.append(OffsetRange(r.topic, r.partition, start, until))
    return result
