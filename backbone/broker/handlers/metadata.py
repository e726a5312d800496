"""Metadata: brokers, controller and every partition's leader, replicas, ISR and offline replicas.

Encoding Metadata with kio is slow and clients ask often, so answers are cached per (version, listener,
topics asked) and dropped whenever the cluster's metadata changes. Unknown topics are created on first
use when both `auto.create.topics.enable` and the request allow it (answered LEADER_NOT_AVAILABLE until
the new partitions have leaders, as Kafka does).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Set
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from backbone.broker.handlers.admin_common import ZooKeeperCall
from backbone.broker.handlers.cluster import NOT_REQUESTED
from backbone.broker.handlers.common import build, response_module, throttle
from backbone.broker.network import Handler, RequestContext
from backbone.broker.security.authorizer import CLUSTER_NAME
from backbone.consumer_groups.offsets_topic import OFFSETS_TOPIC
from backbone.coordination import paths
from backbone.coordination.znodes import kafka_uuid_bytes
from backbone.protocol import codec
from backbone.protocol.api import ApiKey
from backbone.protocol.errors import InvalidTopicError, KafkaError, TopicAlreadyExistsError

if TYPE_CHECKING:
    from backbone.broker.config import BrokerConfig
    from backbone.broker.metadata_cache import MetadataCache
    from backbone.broker.security.authorizer import Authorizer
    from backbone.coordination import ClusterStore

log = logging.getLogger(__name__)


def metadata_handler(
    cache: MetadataCache,
    config: BrokerConfig,
    authorizer: Authorizer,
    *,
    unreachable: Callable[[], Set[int]],
    generation: Callable[[], int],
    auto_create: Callable[[list[str]], Awaitable[set[str]]],
) -> Handler:
    """`unreachable` is the liveness probes' verdict (offline replicas); `generation` changes whenever an
    answer may (cached answers are dropped then); `auto_create` creates missing topics and returns those
    that exist now but the cache has not seen yet."""
    # (version, listener, topic names asked for or None, (cluster, topic) operations asked for) -> the body.
    answers: dict[tuple[int, str, tuple[str, ...] | None, tuple[bool, bool]], bytes] = {}
    seen_generation = -1

    async def handle(context: RequestContext) -> list[bytes]:
        nonlocal seen_generation
        request = context.decode()
        version = context.api_version
        if request.topics is None or (version == 0 and not request.topics):
            names: tuple[str, ...] | None = None
        else:
            if any(t.name is None for t in request.topics):
                return [codec.encode(_unknown_topic_ids(cache, version, request))]
            names = tuple(sorted({t.name for t in request.topics}))
        allow_create = (
            getattr(request, "allow_auto_topic_creation", True) and config["auto.create.topics.enable"]
        )
        denied: tuple[str, ...] = ()
        if authorizer.enabled:  # topics the principal may not describe are hidden, or refused by name
            described = sorted(cache.topics) if names is None else names
            refused = tuple(n for n in described if not authorizer.check(context, "DESCRIBE", "TOPIC", n))
            denied = () if names is None else refused
            names = tuple(n for n in described if n not in refused)
        pending: set[str] = set()
        if names and allow_create:
            missing = [n for n in names if n not in cache.topics]
            if authorizer.enabled:
                may_create = authorizer.check_cluster(context, "CREATE")
                missing = [
                    n for n in missing if may_create or authorizer.check(context, "CREATE", "TOPIC", n)
                ]
            if missing:
                pending = await auto_create(missing)
        listener = context.connection.listener.name
        offline = unreachable()
        asked = _operations_asked(request)
        operations = Operations.of(authorizer, context, *asked)
        if authorizer.enabled:  # an answer for this principal alone
            answer = _response(cache, offline, version, listener, names, pending, operations, denied)
            return [codec.encode(answer)]
        if seen_generation != generation():
            answers.clear()
            seen_generation = generation()
        key = (version, listener, names, asked)
        body = answers.get(key)
        if body is None:
            body = codec.encode(_response(cache, offline, version, listener, names, pending, operations))
            if not pending and len(answers) < 1024:
                answers[key] = body
        return [body]

    return handle


@dataclass(frozen=True)
class TopicAutoCreation:
    """Creates topics a Metadata request names and the cluster lacks, with the broker's defaults; the
    offsets topic through the group coordination (its own partition count, replication and compaction)."""

    config: BrokerConfig
    cache: MetadataCache
    store: ClusterStore
    zk: ZooKeeperCall
    ensure_offsets_topic: Callable[[], Awaitable[None]]

    async def create(self, topics: list[str]) -> set[str]:
        """Create missing topics; return those that exist now but this broker has not seen yet."""
        created: set[str] = set()
        partitions = self.config["num.partitions"]
        live = len(self.cache.brokers)
        factor = min(self.config["default.replication.factor"], max(live, 1))
        for topic in topics:
            try:
                if topic == OFFSETS_TOPIC:
                    await self.ensure_offsets_topic()
                    created.add(topic)
                    continue
                await self.zk(self.store.create_topic, topic, partitions, factor)
                created.add(topic)
                log.info(
                    "event=topic_auto_created topic=%s partitions=%d replication_factor=%d",
                    topic,
                    partitions,
                    factor,
                )
            except TopicAlreadyExistsError:
                created.add(topic)
            except InvalidTopicError:
                pass  # answered INVALID_TOPIC_EXCEPTION
            except KafkaError as exc:
                log.warning("event=topic_auto_create_failed topic=%s error=%r", topic, str(exc))
        return created


def _operations_asked(request: Any) -> tuple[bool, bool]:
    """Whether the request asks for the cluster's and the topics' authorized operations (v8 on; the
    cluster's until v10)."""
    return (
        bool(getattr(request, "include_cluster_authorized_operations", False)),
        bool(getattr(request, "include_topic_authorized_operations", False)),
    )


@dataclass(frozen=True)
class Operations:
    """The authorized operations an answer reports: the cluster's, and a topic's by its name (None: not
    asked for). Without an authorizer every operation is allowed, and Kafka then lists them all."""

    cluster: int = NOT_REQUESTED
    topic: Callable[[str], int] | None = None

    @classmethod
    def of(cls, authorizer: Authorizer, context: RequestContext, cluster: bool, topic: bool) -> Operations:
        """What the request's principal may do, where the request asks."""

        def of_topic(name: str) -> int:
            return authorizer.authorized_operations(context, "TOPIC", name)

        return cls(
            authorizer.authorized_operations(context, "CLUSTER", CLUSTER_NAME) if cluster else NOT_REQUESTED,
            of_topic if topic else None,
        )

    def of_topic(self, name: str) -> int:
        return NOT_REQUESTED if self.topic is None else self.topic(name)


def _response(
    cache: MetadataCache,
    offline: Set[int],
    version: int,
    listener: str,
    names: tuple[str, ...] | None,
    pending: set[str],
    operations: Operations = Operations(),
    denied: tuple[str, ...] = (),
) -> Any:
    module = response_module(ApiKey.METADATA, version)
    brokers = [
        build(module.MetadataResponseBroker, node_id=broker_id, host=host, port=port, rack=rack)
        for broker_id, host, port, rack in cache.reachable_brokers(listener)
    ]
    topics = []
    for name in sorted(cache.topics) if names is None else names:
        topics.append(_topic(cache, offline, module, name, name in pending, operations.of_topic(name)))
    for name in denied:
        refused = ErrorCode.topic_authorization_failed
        topics.append(
            build(module.MetadataResponseTopic, error_code=refused, name=name, topic_id=None, partitions=())
        )
    return build(
        module.MetadataResponse,
        throttle_time=throttle(),
        brokers=tuple(brokers),
        cluster_id=cache.cluster_id,
        controller_id=cache.controller_id,
        topics=tuple(topics),
        cluster_authorized_operations=operations.cluster,
    )


def _topic(
    cache: MetadataCache,
    offline_brokers: Set[int],
    module: Any,
    name: str,
    pending: bool,
    operations: int = NOT_REQUESTED,
) -> Any:
    assignment = cache.topics.get(name)
    if assignment is None:
        try:
            paths.validate_topic_name(name)
            # A topic created a moment ago shows as "leader not available", so clients retry.
            error = ErrorCode.leader_not_available if pending else ErrorCode.unknown_topic_or_partition
        except KafkaError:
            error = ErrorCode.invalid_topic_exception
        return build(module.MetadataResponseTopic, error_code=error, name=name, topic_id=None, partitions=())
    # Like Kafka, a listed topic's error is NONE: a partition without a leader says so itself.
    partitions = []
    for index in sorted(assignment.partitions):
        replicas = tuple(assignment.partitions[index])
        state = cache.states.get((name, index))
        # Offline: not registered, or still registered but found dead by the liveness probes.
        offline = tuple(r for r in replicas if r not in cache.brokers or r in offline_brokers)
        isr: tuple[int, ...]
        if state is None or state.leader < 0 or state.leader not in cache.brokers:
            error, leader, epoch, isr = ErrorCode.leader_not_available, -1, -1, ()
            if state is not None:
                epoch, isr = state.leader_epoch, tuple(state.isr)
        else:
            error, leader, epoch, isr = ErrorCode.none, state.leader, state.leader_epoch, tuple(state.isr)
        partitions.append(
            build(
                module.MetadataResponsePartition,
                error_code=error,
                partition_index=index,
                leader_id=leader,
                leader_epoch=epoch,
                replica_nodes=replicas,
                isr_nodes=isr,
                offline_replicas=offline,
            )
        )
    return build(
        module.MetadataResponseTopic,
        error_code=ErrorCode.none,
        name=name,
        # v10 on: the id ZooKeeper holds (null for a topic made before ids), so that clients see a
        # deleted and re-created topic as a new one.
        topic_id=uuid.UUID(bytes=kafka_uuid_bytes(assignment.topic_id)) if assignment.topic_id else None,
        is_internal=name.startswith("__"),
        partitions=tuple(partitions),
        topic_authorized_operations=operations,
    )


def _unknown_topic_ids(cache: MetadataCache, version: int, request: Any) -> Any:
    """Topics asked for by ID only: this broker keeps no topic IDs in its answers yet."""
    module = response_module(ApiKey.METADATA, version)
    topics = tuple(
        build(
            module.MetadataResponseTopic,
            error_code=ErrorCode.unknown_topic_id,
            name=None,
            topic_id=t.topic_id,
            partitions=(),
        )
        for t in request.topics
    )
    return build(
        module.MetadataResponse,
        throttle_time=throttle(),
        brokers=(),
        cluster_id=cache.cluster_id,
        controller_id=cache.controller_id,
        topics=topics,
    )
