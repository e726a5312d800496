"""The asyncio admin client: topics, partitions, configs, records, offsets and the cluster itself.

Every method sends its request to the broker Kafka requires (the controller for topic and partition
changes, the partition leaders for DeleteRecords and ListOffsets, the broker itself for its own configs,
any broker otherwise), retrying retriable failures (lost connections, NOT_CONTROLLER, leaders moving) until
`default.api.timeout.ms` runs out.

Results are dicts keyed by topic (or partition, or config resource). When a key fails, the method raises
that key's error, as the protocol room's class for its Kafka error code (`TopicAlreadyExistsError`,
`UnknownTopicOrPartitionError`, ...), after the whole request was answered; the exception carries
`.errors` (every failed key -> its exception) and `.results` (what succeeded), so a batch call that
partly failed loses nothing.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeVar

from backbone.client.admin.descriptions import (
    ClusterDescription,
    ConfigEntry,
    ConfigResource,
    ConfigResourceType,
    NewTopic,
    OffsetSpec,
    TopicDescription,
)
from backbone.client.admin.groups import GroupAdminMixin
from backbone.client.admin.replicas import ReplicaAdminMixin
from backbone.client.async_client import AsyncClient
from backbone.client.cluster import BrokerInfo, ClusterClient, backoff_ms
from backbone.client.config import ADMIN_OPTIONS, resolve
from backbone.client.structs import OffsetAndTimestamp, TopicPartition
from backbone.protocol.api import ApiKey
from backbone.protocol.errors import ErrorCode, KafkaError, UnsupportedVersionError, error_for
from backbone.wire.connection import decode_kio, encode_kio
from backbone.wire.errors import ClientClosedError, KafkaClientError, KafkaTimeoutError, is_retriable
from backbone.wire.messages import group_by_topic

__all__ = ["AsyncAdmin"]

K = TypeVar("K")
V = TypeVar("V")
T = TypeVar("T")

_SET, _DELETE = 0, 1  # IncrementalAlterConfigs operations
_CONTROLLER_ERRORS = frozenset({ErrorCode.not_controller})
# A topic that does not exist will not appear by retrying: an admin answers that at once (Java does too),
# although the error code is retriable for producers and consumers waiting on metadata.
_FINAL_FOR_ADMIN = frozenset({ErrorCode.unknown_topic_or_partition})


def _worth_retrying(error: BaseException) -> bool:
    code = getattr(error, "code", None)
    if code in _CONTROLLER_ERRORS:
        return True
    return code not in _FINAL_FOR_ADMIN and is_retriable(error)


def _raise_failures(results: dict[K, V], errors: dict[K, KafkaError]) -> dict[K, V]:
    """`results`, or the first failure's exception carrying every failure and every success."""
    if not errors:
        return results
    first = next(iter(errors.values()))
    if len(errors) > 1:
        others = ", ".join(f"{key}: {type(error).__name__}" for key, error in list(errors.items())[1:])
        first = type(first)(f"{first.message} (also failed: {others})")
    first.errors = errors  # type: ignore[attr-defined]
    first.results = results  # type: ignore[attr-defined]
    raise first


class AsyncAdmin(ReplicaAdminMixin, GroupAdminMixin, AsyncClient):
    """Administers a cluster from asyncio code. Configure with Kafka admin property names."""

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        self.config = resolve(ADMIN_OPTIONS, "admin", config, kwargs)
        self.cluster = ClusterClient(self.config)
        self._timeout_ms: int = self.config["default.api.timeout.ms"]
        self._closed = False

    async def start(self) -> None:
        if self._closed:
            raise ClientClosedError("the admin client is closed; create a new one")

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self.cluster.close()

    # -- retrying -----------------------------------------------------------------------------------

    async def _retrying(self, attempt: Callable[[], Awaitable[T]], what: str, timeout_ms: int | None) -> T:
        """Run `attempt` until it succeeds, fails for good, or the API timeout passes."""
        if self._closed:
            raise ClientClosedError("the admin client is closed; create a new one")
        timeout_ms = timeout_ms or self._timeout_ms
        deadline = time.monotonic() + timeout_ms / 1000
        failures = 0
        while True:
            try:
                async with asyncio.timeout(max(deadline - time.monotonic(), 0.001)):
                    return await attempt()
            except (KafkaClientError, KafkaError) as error:
                # First: a request one broker did not answer in time (KafkaTimeoutError is a TimeoutError
                # too) is retried, possibly elsewhere; only the whole operation's deadline ends it.
                if not _worth_retrying(error):
                    raise
                failures += 1
                self.cluster.request_update()
                delay = backoff_ms(
                    self.config["retry.backoff.ms"], self.config["retry.backoff.max.ms"], failures
                )
                if time.monotonic() + delay / 1000 >= deadline:
                    raise
                await asyncio.sleep(delay / 1000)
            except TimeoutError:
                raise KafkaTimeoutError(
                    f"{what} did not finish within {timeout_ms} ms (default.api.timeout.ms); the cluster may "
                    "be overloaded or a broker unreachable"
                ) from None

    async def _controller_request(self, api_key: int, encode: Any) -> Any:
        metadata = await self.cluster.refresh_metadata()
        if metadata.controller_id < 0:
            raise error_for(ErrorCode.not_controller, "the cluster has no controller right now")
        return await self.cluster.request(metadata.controller_id, api_key, encode, decode_kio(api_key))

    # -- topics -------------------------------------------------------------------------------------

    async def _topic_operation(
        self,
        api_key: int,
        names: list[str],
        fields_for: Callable[[list[str]], dict[str, Any]],
        answers: str,
        what: str,
        timeout_ms: int | None,
    ) -> dict[str, None]:
        """A per-topic request to the controller; topics answered NOT_CONTROLLER are sent again."""
        results: dict[str, None] = {}
        errors: dict[str, KafkaError] = {}

        async def attempt() -> None:
            pending = [name for name in names if name not in results and name not in errors]
            response = await self._controller_request(api_key, encode_kio(api_key, **fields_for(pending)))
            retry = self._collect(getattr(response, answers), results, errors)
            if retry:
                raise retry

        await self._retrying(attempt, what, timeout_ms)
        return _raise_failures(results, errors)

    @staticmethod
    def _collect(
        rows: Iterable[Any], results: dict[str, None], errors: dict[str, KafkaError]
    ) -> KafkaError | None:
        """Sort per-topic answers into results and errors; return an error worth a retry, if any."""
        retry = None
        for row in rows:
            code = int(row.error_code)
            if code == 0:
                results[row.name] = None
                continue
            error = error_for(code, getattr(row, "error_message", None) or f"topic {row.name!r}")
            if code in _CONTROLLER_ERRORS:
                retry = error
            else:
                errors[row.name] = error
        return retry

    async def create_topics(
        self, topics: Iterable[NewTopic | str], *, validate_only: bool = False, timeout_ms: int | None = None
    ) -> dict[str, None]:
        """Create topics (`NewTopic`, or a bare name for the broker's defaults).

        Returns {name: None}; raises the first failure (e.g. TopicAlreadyExistsError) with `.errors`.
        """
        wanted = {t.name: t for t in (t if isinstance(t, NewTopic) else NewTopic(t) for t in topics)}

        def row(t: NewTopic) -> dict[str, Any]:
            return {
                "name": t.name,
                "num_partitions": t.num_partitions,
                "replication_factor": t.replication_factor,
                "assignments": [
                    {"partition_index": p, "broker_ids": list(replicas)}
                    for p, replicas in (t.replica_assignment or {}).items()
                ],
                "configs": [{"name": k, "value": v} for k, v in (t.configs or {}).items()],
            }

        return await self._topic_operation(
            ApiKey.CREATE_TOPICS,
            list(wanted),
            lambda pending: {
                "topics": [row(wanted[name]) for name in pending],
                "timeout": timeout_ms or self.config["request.timeout.ms"],
                "validate_only": validate_only,
            },
            "topics",
            "create_topics",
            timeout_ms,
        )

    async def delete_topics(self, names: Iterable[str], *, timeout_ms: int | None = None) -> dict[str, None]:
        """Delete topics; returns {name: None}, raises the first failure with `.errors`."""
        return await self._topic_operation(
            ApiKey.DELETE_TOPICS,
            list(names),
            lambda pending: {
                "topic_names": pending,  # v1-5
                "topics": [{"name": name} for name in pending],  # v6+
                "timeout": timeout_ms or self.config["request.timeout.ms"],
            },
            "responses",
            "delete_topics",
            timeout_ms,
        )

    async def create_partitions(
        self,
        new_totals: Mapping[str, int],
        *,
        assignments: Mapping[str, list[list[int]]] | None = None,
        validate_only: bool = False,
        timeout_ms: int | None = None,
    ) -> dict[str, None]:
        """Grow topics to `new_totals[topic]` partitions (optionally placing the new ones' replicas)."""
        placed = assignments or {}
        return await self._topic_operation(
            ApiKey.CREATE_PARTITIONS,
            list(new_totals),
            lambda pending: {
                "topics": [
                    {
                        "name": name,
                        "count": new_totals[name],
                        "assignments": [{"broker_ids": ids} for ids in placed.get(name, [])] or None,
                    }
                    for name in pending
                ],
                "timeout": timeout_ms or self.config["request.timeout.ms"],
                "validate_only": validate_only,
            },
            "results",
            "create_partitions",
            timeout_ms,
        )

    async def list_topics(self, *, include_internal: bool = False, timeout_ms: int | None = None) -> set[str]:
        """Every topic's name (internal ones such as __consumer_offsets only if asked)."""

        async def attempt() -> set[str]:
            metadata = await self.cluster.fetch_metadata(None)
            return {name for name, t in metadata.topics.items() if include_internal or not t.is_internal}

        return await self._retrying(attempt, "list_topics", timeout_ms)

    async def describe_topics(
        self, names: Iterable[str] | None = None, *, timeout_ms: int | None = None
    ) -> dict[str, TopicDescription]:
        """Partitions, leaders, replicas and ISR of the named topics (all topics if None)."""
        wanted = None if names is None else list(names)

        async def attempt() -> dict[str, TopicDescription]:
            metadata = await self.cluster.fetch_metadata(wanted)
            results: dict[str, TopicDescription] = {}
            errors: dict[str, KafkaError] = {}
            for name, topic in metadata.topics.items():
                if topic.error_code:
                    error = error_for(topic.error_code, f"topic {name!r}")
                    if _worth_retrying(error):
                        raise error
                    errors[name] = error
                    continue
                partitions = sorted(topic.partitions.values(), key=lambda p: p.partition)
                results[name] = TopicDescription(name, topic.is_internal, partitions, topic.topic_id)
            return _raise_failures(results, errors)

        return await self._retrying(attempt, "describe_topics", timeout_ms)

    # -- configs ------------------------------------------------------------------------------------

    async def _config_operation(
        self,
        api_key: int,
        resources: Iterable[ConfigResource],
        row: Callable[[ConfigResource], dict[str, Any]],
        answers: str,
        value: Callable[[Any], V],
        what: str,
        timeout_ms: int | None,
        **fields: Any,
    ) -> dict[ConfigResource, V]:
        """Broker resources go to that broker, topic resources to any broker; answers merged."""
        groups: dict[int | None, list[ConfigResource]] = collections.defaultdict(list)
        for resource in resources:
            broker = resource.type == ConfigResourceType.BROKER and resource.name
            groups[int(resource.name) if broker else None].append(resource)

        async def send(node: int | None, group: list[ConfigResource]) -> Any:
            encode = encode_kio(api_key, resources=[row(r) for r in group], **fields)
            return await self.cluster.request(node, api_key, encode, decode_kio(api_key))

        async def attempt() -> dict[ConfigResource, V]:
            results: dict[ConfigResource, V] = {}
            errors: dict[ConfigResource, KafkaError] = {}
            for response in await asyncio.gather(*(send(node, group) for node, group in groups.items())):
                for answer in getattr(response, answers):
                    resource = ConfigResource(
                        ConfigResourceType(int(answer.resource_type)), answer.resource_name
                    )
                    if answer.error_code:
                        errors[resource] = error_for(answer.error_code, answer.error_message or f"{resource}")
                    else:
                        results[resource] = value(answer)
            return _raise_failures(results, errors)

        return await self._retrying(attempt, what, timeout_ms)

    async def describe_configs(
        self, resources: Iterable[ConfigResource], *, timeout_ms: int | None = None
    ) -> dict[ConfigResource, dict[str, ConfigEntry]]:
        """Every config of each resource: {resource: {name: ConfigEntry}}."""
        return await self._config_operation(
            ApiKey.DESCRIBE_CONFIGS,
            [ConfigResource(ConfigResourceType(r[0]), str(r[1])) for r in resources],
            lambda r: {"resource_type": int(r.type), "resource_name": r.name, "configuration_keys": None},
            "results",
            lambda answer: {
                c.name: ConfigEntry(
                    c.name, c.value, bool(c.read_only), int(c.config_source), bool(c.is_sensitive)
                )
                for c in answer.configs
            },
            "describe_configs",
            timeout_ms,
        )

    async def alter_configs(
        self,
        changes: Mapping[ConfigResource, Mapping[str, str | None]],
        *,
        validate_only: bool = False,
        timeout_ms: int | None = None,
    ) -> dict[ConfigResource, None]:
        """Change configs incrementally: each name is set to its value, or reset to default when None."""
        wanted = {ConfigResource(ConfigResourceType(r[0]), str(r[1])): dict(c) for r, c in changes.items()}
        return await self._config_operation(
            ApiKey.INCREMENTAL_ALTER_CONFIGS,
            wanted,
            lambda r: {
                "resource_type": int(r.type),
                "resource_name": r.name,
                "configs": [
                    {"name": name, "config_operation": _DELETE if value is None else _SET, "value": value}
                    for name, value in wanted[r].items()
                ],
            },
            "responses",
            lambda answer: None,
            "alter_configs",
            timeout_ms,
            validate_only=validate_only,
        )

    # -- cluster --------------------------------------------------------------------------------------

    async def describe_cluster(self, *, timeout_ms: int | None = None) -> ClusterDescription:
        """Cluster id, controller and brokers (DescribeCluster, or Metadata on brokers without it)."""

        async def attempt() -> ClusterDescription:
            conn = await self.cluster.any_connection()
            try:
                conn.version(ApiKey.DESCRIBE_CLUSTER)
            except UnsupportedVersionError:
                metadata = await self.cluster.fetch_metadata([])
                return ClusterDescription(
                    metadata.cluster_id,
                    metadata.controller_id,
                    sorted(metadata.brokers.values(), key=lambda b: b.node_id),
                )
            response = await conn.request_kio(
                ApiKey.DESCRIBE_CLUSTER, include_cluster_authorized_operations=False
            )
            if response.error_code:
                raise error_for(response.error_code, response.error_message or "DescribeCluster")
            brokers = [BrokerInfo(int(b.broker_id), b.host, int(b.port), b.rack) for b in response.brokers]
            return ClusterDescription(
                response.cluster_id, int(response.controller_id), sorted(brokers, key=lambda b: b.node_id)
            )

        return await self._retrying(attempt, "describe_cluster", timeout_ms)

    # -- records and offsets ------------------------------------------------------------------------

    async def _by_leader(self, partitions: Iterable[TopicPartition]) -> dict[int, list[TopicPartition]]:
        wanted = [TopicPartition(*tp) for tp in partitions]
        self.cluster.add_topics({tp.topic for tp in wanted})
        metadata = await self.cluster.refresh_metadata()
        groups: dict[int, list[TopicPartition]] = collections.defaultdict(list)
        for tp in wanted:
            topic = metadata.topics.get(tp.topic)
            if topic is not None and topic.error_code:
                raise error_for(topic.error_code, f"topic {tp.topic!r}")
            if topic is None or tp.partition not in topic.partitions:
                raise error_for(ErrorCode.unknown_topic_or_partition, f"{tp} does not exist")
            leader = metadata.leader_for(tp)
            if leader < 0:
                raise error_for(ErrorCode.leader_not_available, f"{tp} has no leader")
            groups[leader].append(tp)
        return groups

    async def _per_partition(
        self,
        api_key: int,
        targets: Mapping[TopicPartition, int],
        row: Callable[[TopicPartition, int], dict[str, Any]],
        value: Callable[[Any], V],
        what: str,
        timeout_ms: int | None,
        **fields: Any,
    ) -> dict[TopicPartition, V]:
        """One request per partition leader (`row` builds each partition's entry), answers merged."""

        async def send(node: int, group: list[TopicPartition]) -> Any:
            topics = group_by_topic((tp, row(tp, targets[tp])) for tp in group)
            encode = encode_kio(api_key, topics=topics, **fields)
            return await self.cluster.request(node, api_key, encode, decode_kio(api_key))

        async def attempt() -> dict[TopicPartition, V]:
            groups = await self._by_leader(targets)
            results: dict[TopicPartition, V] = {}
            errors: dict[TopicPartition, KafkaError] = {}
            for response in await asyncio.gather(*(send(n, g) for n, g in groups.items())):
                for topic in response.topics:
                    for part in topic.partitions:
                        tp = TopicPartition(topic.name, int(part.partition_index))
                        if not part.error_code:
                            results[tp] = value(part)
                            continue
                        error = error_for(part.error_code, f"{what} of {tp}")
                        if _worth_retrying(error):
                            raise error
                        errors[tp] = error
            return _raise_failures(results, errors)

        return await self._retrying(attempt, what, timeout_ms)

    async def delete_records(
        self, before: Mapping[TopicPartition, int], *, timeout_ms: int | None = None
    ) -> dict[TopicPartition, int]:
        """Delete every record below `before[tp]` (-1: all of them); returns each new low watermark."""
        return await self._per_partition(
            ApiKey.DELETE_RECORDS,
            {TopicPartition(*tp): offset for tp, offset in before.items()},
            lambda tp, offset: {"partition_index": tp.partition, "offset": offset},
            lambda part: int(part.low_watermark),
            "delete_records",
            timeout_ms,
            timeout=timeout_ms or self.config["request.timeout.ms"],
        )

    async def list_offsets(
        self,
        specs: Mapping[TopicPartition, int | str],  # OffsetSpec's constants are ints
        *,
        read_committed: bool = False,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, OffsetAndTimestamp]:
        """Offsets by spec: "earliest", "latest", "max_timestamp" or a timestamp in ms (first at or after).

        A timestamp after every record gives offset -1.
        """
        return await self._per_partition(
            ApiKey.LIST_OFFSETS,
            {TopicPartition(*tp): OffsetSpec.parse(spec) for tp, spec in specs.items()},
            lambda tp, stamp: {"partition_index": tp.partition, "timestamp": stamp},
            lambda part: OffsetAndTimestamp(int(part.offset), int(part.timestamp)),
            "list_offsets",
            timeout_ms,
            replica_id=-1,
            isolation_level=1 if read_committed else 0,
        )
