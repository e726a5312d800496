"""The data source's options, by the names Spark's Kafka source uses, checked and parsed in one place.

Spark hands options over as a case-insensitive dict of strings; `ReadSettings.parse` and
`WriteSettings.parse` turn them into plain values or raise `OptionError` naming the option at fault.
Options starting with `kafka.` go to our client under the rest of their name (`kafka.fetch.max.bytes` ->
`fetch.max.bytes`); `bootstrap.servers` may be given with or without the prefix.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from backbone.client import TopicPartition

__all__ = [
    "EARLIEST",
    "LATEST",
    "OffsetSpec",
    "OptionError",
    "ReadSettings",
    "WriteSettings",
]

# Kafka's JSON offsets use these two numbers for "the earliest" and "the latest" offset of a partition.
EARLIEST = -2
LATEST = -1

_READ_OPTIONS = {
    "subscribe": "subscribe",
    "subscribepattern": "subscribePattern",
    "assign": "assign",
    "startingoffsets": "startingOffsets",
    "endingoffsets": "endingOffsets",
    "startingtimestamp": "startingTimestamp",
    "endingtimestamp": "endingTimestamp",
    "startingoffsetsbytimestamp": "startingOffsetsByTimestamp",
    "endingoffsetsbytimestamp": "endingOffsetsByTimestamp",
    "startingoffsetsbytimestampstrategy": "startingOffsetsByTimestampStrategy",
    "failondataloss": "failOnDataLoss",
    "minpartitions": "minPartitions",
    "maxrecordsperpartition": "maxRecordsPerPartition",
    "maxoffsetspertrigger": "maxOffsetsPerTrigger",
    "minoffsetspertrigger": "minOffsetsPerTrigger",
    "maxtriggerdelay": "maxTriggerDelay",
    "groupidprefix": "groupIdPrefix",
    "includeheaders": "includeHeaders",
    "kafkaconsumer.polltimeoutms": "kafkaConsumer.pollTimeoutMs",
}
_WRITE_OPTIONS = {"topic": "topic", "includeheaders": "includeHeaders"}
# Options Spark itself adds for streaming queries; they are not the source's business.
_SPARK_OWN = {"checkpointlocation"}


class OptionError(ValueError):
    """A data source option is missing, unknown or malformed; the message names it and says what to do."""


@dataclass(frozen=True)
class OffsetSpec:
    """Where a read starts or ends: `earliest`, `latest`, per-partition offsets (EARLIEST and LATEST
    allowed as values), one timestamp for every partition, or per-partition timestamps."""

    kind: str  # "earliest", "latest", "offsets", "timestamp", "timestamps"
    option: str  # the option it came from, for error messages
    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    timestamp: int = -1


def _suggest(name: str, known: Mapping[str, str]) -> str:
    close = difflib.get_close_matches(name, list(known), n=1)
    return f"; did you mean {known[close[0]]!r}?" if close else ""


def _split_client_options(
    options: Mapping[str, str], known: Mapping[str, str], what: str
) -> tuple[dict[str, str], dict[str, Any]]:
    """(our own options by canonical name, client properties) from Spark's lower-cased option dict."""
    own: dict[str, str] = {}
    client: dict[str, Any] = {}
    for raw_name, value in options.items():
        name = raw_name.lower()
        if name.startswith("kafka."):
            client[name[len("kafka.") :]] = value
        elif name == "bootstrap.servers":
            client["bootstrap.servers"] = value
        elif name in known:
            own[known[name]] = value
        elif name in _SPARK_OWN:
            continue
        elif name == "path":
            raise OptionError(f"the {what} takes no path; name topics with the 'subscribe' or 'topic' option")
        else:
            raise OptionError(f"unknown option {raw_name!r} for the backbone {what}{_suggest(name, known)}")
    if "bootstrap.servers" not in client:
        raise OptionError(
            "option 'kafka.bootstrap.servers' (or 'bootstrap.servers') is required: host:port,..."
        )
    return own, client


def _int(own: Mapping[str, str], name: str, default: int | None, low: int = 0) -> int | None:
    text = own.get(name)
    if text is None:
        return default
    try:
        value = int(text.strip())
    except ValueError:
        raise OptionError(f"option {name!r} must be an integer, got {text!r}") from None
    if value < low:
        raise OptionError(f"option {name!r} must be at least {low}, got {value}")
    return value


def _bool(own: Mapping[str, str], name: str, default: bool) -> bool:
    text = own.get(name)
    if text is None:
        return default
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise OptionError(f"option {name!r} must be true or false, got {text!r}")
    return lowered == "true"


_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|min|h|d)?\s*$")
_UNIT_MS = {None: 1, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def _duration_ms(own: Mapping[str, str], name: str, default: int) -> int:
    text = own.get(name)
    if text is None:
        return default
    match = _DURATION.match(text.lower())
    if not match:
        raise OptionError(f"option {name!r} must be a duration such as 500ms, 30s, 15m or 1h, got {text!r}")
    return int(match.group(1)) * _UNIT_MS[match.group(2)]


def _json_object(name: str, text: str, example: str) -> dict[str, Any]:
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as error:
        raise OptionError(
            f"option {name!r} is not valid JSON ({error.msg}); expected e.g. {example}"
        ) from None
    if not isinstance(parsed, dict):
        raise OptionError(f"option {name!r} must be a JSON object such as {example}, got {text!r}")
    return parsed


def _per_partition(name: str, text: str, example: str) -> dict[TopicPartition, int]:
    """{"topic": {"0": 23, "1": -1}} as {TopicPartition: number}."""
    result: dict[TopicPartition, int] = {}
    for topic, partitions in _json_object(name, text, example).items():
        if not isinstance(partitions, dict):
            raise OptionError(
                f"option {name!r}: topic {topic!r} must map partitions to numbers, e.g. {example}"
            )
        for partition, number in partitions.items():
            if (
                not str(partition).lstrip("-").isdigit()
                or isinstance(number, bool)
                or not isinstance(number, int)
            ):
                raise OptionError(
                    f"option {name!r}: {topic!r} partition {partition!r} must map to an integer, "
                    f"e.g. {example}"
                )
            result[TopicPartition(topic, int(partition))] = number
    return result


_OFFSETS_EXAMPLE = '{"topic":{"0":23,"1":-2}}'


def _offset_spec(own: Mapping[str, str], edge: str, default: str) -> OffsetSpec:
    """The start or end (`edge` is "starting" or "ending"); timestamps win over offsets, as in Spark."""
    stamp_name, by_stamp_name, offsets_name = (
        f"{edge}Timestamp",
        f"{edge}OffsetsByTimestamp",
        f"{edge}Offsets",
    )
    if stamp_name in own:
        return OffsetSpec("timestamp", stamp_name, timestamp=_int(own, stamp_name, None) or 0)
    if by_stamp_name in own:
        stamps = _per_partition(by_stamp_name, own[by_stamp_name], '{"topic":{"0":1700000000000}}')
        if any(stamp < 0 for stamp in stamps.values()):
            raise OptionError(f"option {by_stamp_name!r}: timestamps must not be negative")
        return OffsetSpec("timestamps", by_stamp_name, offsets=stamps)
    text = own.get(offsets_name, default).strip()
    if text.lower() in ("earliest", "latest"):
        if edge == "ending" and text.lower() == "earliest":
            raise OptionError("option 'endingOffsets' cannot be 'earliest'; use 'latest' or JSON offsets")
        return OffsetSpec(text.lower(), offsets_name)
    offsets = _per_partition(offsets_name, text, _OFFSETS_EXAMPLE)
    for tp, offset in offsets.items():
        if offset < EARLIEST or (edge == "ending" and offset == EARLIEST):
            allowed = "-1 (latest)" if edge == "ending" else "-2 (earliest), -1 (latest)"
            raise OptionError(
                f"option {offsets_name!r}: {tp} has offset {offset}; use an offset >= 0 or {allowed}"
            )
    return OffsetSpec("offsets", offsets_name, offsets=offsets)


@dataclass(frozen=True)
class ReadSettings:
    """Everything a reader needs, parsed; pickled to Spark's executors with the reader."""

    client: dict[str, Any]
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[TopicPartition, ...] = ()
    starting: OffsetSpec = OffsetSpec("earliest", "startingOffsets")
    ending: OffsetSpec = OffsetSpec("latest", "endingOffsets")
    starting_by_timestamp_strategy: str = "error"
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60_000
    group_id: str | None = None
    group_id_prefix: str = "spark-backbone-source"
    include_headers: bool = False
    poll_timeout_ms: int = 120_000

    @property
    def subscription(self) -> str:
        """How the topics were named, for messages: the option and its value."""
        if self.pattern is not None:
            return f"subscribePattern {self.pattern!r}"
        if self.assigned:
            return "assign"
        return f"subscribe {','.join(self.topics)!r}"

    @classmethod
    def parse(cls, options: Mapping[str, str], streaming: bool) -> ReadSettings:
        own, client = _split_client_options(options, _READ_OPTIONS, "source")
        group_id = client.pop("group.id", None)
        for reserved in ("auto.offset.reset", "enable.auto.commit", "key.deserializer", "value.deserializer"):
            if reserved in client:
                raise OptionError(
                    f"option 'kafka.{reserved}' is not supported: the source manages it "
                    "(use startingOffsets for where to start)"
                )
        ways = [name for name in ("subscribe", "subscribePattern", "assign") if name in own]
        if len(ways) != 1:
            given = " and ".join(repr(w) for w in ways) if ways else "none of them"
            raise OptionError(
                f"give exactly one of the options 'subscribe', 'subscribePattern' or 'assign' (got {given})"
            )
        topics: tuple[str, ...] = ()
        pattern = None
        assigned: tuple[TopicPartition, ...] = ()
        if "subscribe" in own:
            topics = tuple(t.strip() for t in own["subscribe"].split(",") if t.strip())
            if not topics:
                raise OptionError("option 'subscribe' must name at least one topic: topic1,topic2")
        elif "subscribePattern" in own:
            pattern = own["subscribePattern"]
            try:
                re.compile(pattern)
            except re.error as error:
                raise OptionError(
                    f"option 'subscribePattern' is not a valid regular expression: {error}"
                ) from None
        else:
            assigned = _parse_assign(own["assign"])
        if streaming and "endingOffsets" in own:
            raise OptionError("option 'endingOffsets' is for batch reads only; a stream has no end")
        strategy = own.get("startingOffsetsByTimestampStrategy", "error").strip().lower()
        if strategy not in ("error", "latest"):
            raise OptionError("option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest'")
        max_per_trigger = _int(own, "maxOffsetsPerTrigger", None, low=1)
        min_per_trigger = _int(own, "minOffsetsPerTrigger", None, low=1)
        if max_per_trigger and min_per_trigger and min_per_trigger > max_per_trigger:
            raise OptionError("option 'minOffsetsPerTrigger' must not be above 'maxOffsetsPerTrigger'")
        settings = cls(
            client=client,
            topics=topics,
            pattern=pattern,
            assigned=assigned,
            starting=_offset_spec(own, "starting", "latest" if streaming else "earliest"),
            ending=_offset_spec(own, "ending", "latest"),
            starting_by_timestamp_strategy=strategy,
            fail_on_data_loss=_bool(own, "failOnDataLoss", True),
            min_partitions=_int(own, "minPartitions", None, low=1),
            max_records_per_partition=_int(own, "maxRecordsPerPartition", None, low=1),
            max_offsets_per_trigger=max_per_trigger,
            min_offsets_per_trigger=min_per_trigger,
            max_trigger_delay_ms=_duration_ms(own, "maxTriggerDelay", 15 * 60_000),
            group_id=group_id,
            group_id_prefix=own.get("groupIdPrefix", "spark-backbone-source"),
            include_headers=_bool(own, "includeHeaders", False),
            poll_timeout_ms=_int(own, "kafkaConsumer.pollTimeoutMs", 120_000, low=1) or 120_000,
        )
        if settings.assigned:
            _check_named_partitions(settings)
        return settings


def _parse_assign(text: str) -> tuple[TopicPartition, ...]:
    example = '{"topicA":[0,1],"topicB":[2]}'
    parsed = _json_object("assign", text, example)
    result = []
    for topic, partitions in parsed.items():
        if not isinstance(partitions, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in partitions
        ):
            raise OptionError(
                f"option 'assign': topic {topic!r} must map to a list of partitions, e.g. {example}"
            )
        result.extend(TopicPartition(topic, p) for p in partitions)
    if not result:
        raise OptionError(f"option 'assign' names no partition; expected e.g. {example}")
    return tuple(result)


def _check_named_partitions(settings: ReadSettings) -> None:
    """With `assign`, JSON offsets may only name assigned partitions (as in Spark)."""
    assigned = set(settings.assigned)
    for spec in (settings.starting, settings.ending):
        stray = [str(tp) for tp in spec.offsets if tp not in assigned]
        if stray:
            raise OptionError(f"option {spec.option!r} names partitions not in 'assign': {', '.join(stray)}")


SINK_BATCH_SIZE = 262_144
"""The sink's `batch.size` unless `kafka.batch.size` says otherwise. A bulk writer's records wait for their
acknowledgements anyway, and the broker's cost is mostly per batch: with 200-byte records it spent 2.2 µs a
record in 16 KiB batches (the client's default) and 0.6 µs in 256 KiB ones (librdkafka's default is 1 MB).
A topic whose `max.message.bytes` is smaller needs a smaller `kafka.batch.size`."""


@dataclass(frozen=True)
class WriteSettings:
    client: dict[str, Any]
    topic: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriteSettings:
        own, client = _split_client_options(options, _WRITE_OPTIONS, "sink")
        for reserved in ("key.serializer", "value.serializer"):
            if reserved in client:
                raise OptionError(
                    f"option 'kafka.{reserved}' is not supported: write binary or string columns"
                )
        if str(client.get("acks", "all")).strip().lower() not in ("all", "-1"):
            raise OptionError("option 'kafka.acks' must be 'all': the sink writes with acks=all")
        client["acks"] = "all"
        client["enable.idempotence"] = "true"
        if "batch.size" not in client and "batch_size" not in client:
            client["batch.size"] = SINK_BATCH_SIZE
        topic = own.get("topic")
        if topic is not None and not topic.strip():
            raise OptionError("option 'topic' must not be empty")
        return cls(client=client, topic=topic.strip() if topic else None)
