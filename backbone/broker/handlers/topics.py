"""CreateTopics, DeleteTopics and CreatePartitions, answered as Kafka's ZooKeeper-mode broker does.

Any broker may serve them (the store writes ZooKeeper directly; the controller and every broker follow
through their watches). Each topic gets its own error code. After a change the handler waits, bounded by
the request's timeout, until this broker's metadata cache shows it (every new partition has a leader, or
the deleted topic is gone), as Kafka's delayed admin operations do; a change not visible in time is
answered REQUEST_TIMED_OUT, also as Kafka does (the change itself still goes ahead).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from backbone.broker.handlers.admin_common import AdminPieces, MetadataWaiter, error_of
from backbone.broker.handlers.common import build, millis, response_module, throttle
from backbone.broker.handlers.config_catalog import describe_topic, validate_topic_overrides
from backbone.broker.network import Handler, RequestContext
from backbone.coordination import TopicAssignment, paths
from backbone.protocol.api import ApiKey
from backbone.protocol.errors import (
    InvalidConfigError,
    InvalidReplicaAssignmentError,
    InvalidRequestError,
    InvalidTopicError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

# Kafka's "use the broker default" for num_partitions and replication_factor.
USE_DEFAULT = -1


def topics_handlers(admin: AdminPieces, waiter: MetadataWaiter) -> dict[ApiKey, Handler]:
    async def create_topics(context: RequestContext) -> Any:
        return await _create_topics(admin, waiter, context)

    async def delete_topics(context: RequestContext) -> Any:
        return await _delete_topics(admin, waiter, context)

    async def create_partitions(context: RequestContext) -> Any:
        return await _create_partitions(admin, waiter, context)

    return {
        ApiKey.CREATE_TOPICS: create_topics,
        ApiKey.DELETE_TOPICS: delete_topics,
        ApiKey.CREATE_PARTITIONS: create_partitions,
    }


async def _settled(awaitables: Iterable[Awaitable[T]]) -> list[T | Exception]:
    """Each awaitable's result or the Exception it raised (one topic's failure is its own answer), run
    concurrently; anything else raised (an interrupt) propagates."""
    settled: list[T | Exception] = []
    for outcome in await asyncio.gather(*awaitables, return_exceptions=True):
        if isinstance(outcome, BaseException) and not isinstance(outcome, Exception):
            raise outcome
        settled.append(outcome)
    return settled


def _once_each(
    topics: Sequence[Any], refuse: Callable[[str, set[str]], Any]
) -> tuple[dict[str, Any], list[Any]]:
    """(answers by name in the request's order, the topics to serve): a name the request gives more than
    once is answered `refuse(name, all such names)` and not served; the others' answers are None until
    they are."""
    duplicates = {name for name, count in Counter(t.name for t in topics).items() if count > 1}
    answers: dict[str, Any] = {}
    to_serve = []
    for topic in topics:
        if topic.name in answers:
            continue
        if topic.name in duplicates:
            answers[topic.name] = refuse(topic.name, duplicates)
            continue
        answers[topic.name] = None
        to_serve.append(topic)
    return answers, to_serve


def _leaders_check(admin: AdminPieces, topic: str, partitions: int) -> Callable[[], bool]:
    """Whether this broker's cache shows `partitions` partitions of `topic`, each with a live leader."""

    def check() -> bool:
        cache = admin.cache
        assignment = cache.topics.get(topic)
        if assignment is None or len(assignment.partitions) < partitions:
            return False
        return all(cache.leader(topic, p) in cache.brokers for p in range(partitions))

    return check


def _gone_check(admin: AdminPieces, topic: str) -> Callable[[], bool]:
    return lambda: topic not in admin.cache.topics


async def _answer_when_visible(
    waiter: MetadataWaiter,
    timeout_s: float,
    pending: dict[str, Callable[[], bool]],
    results: dict[str, Any],
    timed_out: Callable[[str], Any],
) -> None:
    """Wait until this broker's cache shows every change; answer those it does not show in time with
    `timed_out(name)` (REQUEST_TIMED_OUT, as Kafka's delayed operations do). A timeout of 0 waits not."""
    if not pending or timeout_s <= 0:
        return
    if await waiter.wait_until(lambda: all(check() for check in pending.values()), timeout_s):
        return
    for name, check in pending.items():
        if not check():
            log.warning("event=admin_change_not_visible topic=%s timeout_s=%.1f", name, timeout_s)
            results[name] = timed_out(name)


# -- CreateTopics ----------------------------------------------------------------------------------------


async def _create_topics(admin: AdminPieces, waiter: MetadataWaiter, context: RequestContext) -> Any:
    request = context.decode()
    version = context.api_version
    module = response_module(ApiKey.CREATE_TOPICS, version)
    results, to_create = _once_each(
        request.topics,
        lambda name, duplicates: _create_error(
            module,
            name,
            ErrorCode.invalid_request,
            "Create topics request from client contains multiple entries for the following topics: "
            + ", ".join(sorted(duplicates)),
        ),
    )
    created: dict[str, TopicAssignment] = {}
    # Concurrently: each topic is its own ZooKeeper transaction, and one topic's round trips need not wait
    # for another's. Names colliding with an earlier one of the request ('.' and '_' are one in metric
    # names) go after it, so that they are refused as colliding, as Kafka's one-by-one creation does.
    first: list[Any] = []  # kio's CreatableTopic entries
    colliding: list[Any] = []
    flattened: set[str] = set()
    for topic in to_create:
        (colliding if topic.name.replace(".", "_") in flattened else first).append(topic)
        flattened.add(topic.name.replace(".", "_"))
    outcomes = await _settled(_create_one(admin, topic, request.validate_only) for topic in first)
    for topic in colliding:
        try:
            outcomes.append(await _create_one(admin, topic, request.validate_only))
        except Exception as exc:
            outcomes.append(exc)
    for topic, outcome in zip(first + colliding, outcomes, strict=True):
        if isinstance(outcome, Exception):
            code, message = error_of(outcome, "create_topic")
            results[topic.name] = _create_error(module, topic.name, code, message)
            continue
        assignment, overrides = outcome
        if not request.validate_only:
            created[topic.name] = assignment
        results[topic.name] = _create_result(admin, module, assignment, overrides)
    pending = {name: _leaders_check(admin, name, a.partition_count) for name, a in created.items()}
    await _answer_when_visible(
        waiter,
        millis(request.timeout) / 1000,
        pending,
        results,
        lambda name: _create_error(
            module,
            name,
            ErrorCode.request_timed_out,
            f"Topic {name} was created but its partitions have no leader yet; retry later.",
        ),
    )
    return build(module.CreateTopicsResponse, throttle_time=throttle(), topics=tuple(results.values()))


async def _create_one(
    admin: AdminPieces, topic: Any, validate_only: bool
) -> tuple[TopicAssignment, dict[str, str]]:
    """Check and create (or only check) one topic.

    The checks follow Kafka's ZkAdminManager (name, existence, null configs, sizes given both ways), except
    that configs are checked before the store places replicas: a bad config costs no ZooKeeper round trip.
    """
    name = topic.name
    paths.validate_topic_name(name)
    if name in admin.cache.topics:
        raise TopicAlreadyExistsError(f"Topic '{name}' already exists.")
    nulls = sorted(c.name for c in topic.configs if c.value is None)
    if nulls:
        raise InvalidConfigError(f"Null value not supported for topic configs: {','.join(nulls)}")
    overrides = {c.name: c.value for c in topic.configs}
    explicit = topic.assignments
    if explicit and (topic.num_partitions != USE_DEFAULT or topic.replication_factor != USE_DEFAULT):
        raise InvalidRequestError(
            "Both numPartitions or replicationFactor and replicasAssignments were set. "
            "Both cannot be used at the same time."
        )
    validate_topic_overrides(overrides, admin.config)
    if explicit:
        indexes = [a.partition_index for a in explicit]
        if len(set(indexes)) != len(indexes):
            raise InvalidReplicaAssignmentError(
                f"Duplicate partition indexes in the assignment: {sorted(indexes)}"
            )
        replicas = {a.partition_index: [int(b) for b in a.broker_ids] for a in explicit}
        partitions, factor = None, None
    else:
        replicas = None
        partitions = (
            admin.config["num.partitions"] if topic.num_partitions == USE_DEFAULT else topic.num_partitions
        )
        factor = (
            admin.config["default.replication.factor"]
            if topic.replication_factor == USE_DEFAULT
            else topic.replication_factor
        )
    assignment = await admin.zk(
        admin.store.create_topic,
        name,
        partitions,
        factor,
        assignment=replicas,
        configs=overrides,
        validate_only=validate_only,
    )
    if not validate_only:
        log.info(
            "event=topic_created topic=%s partitions=%d replication_factor=%d configs=%s",
            name,
            assignment.partition_count,
            assignment.replication_factor,
            ",".join(sorted(overrides)) or "-",
        )
    return assignment, overrides


def _create_result(
    admin: AdminPieces, module: Any, assignment: TopicAssignment, overrides: dict[str, str]
) -> Any:
    # Only v5+ answer with the topic's configs (KIP-525); older versions have no type for them.
    config_type = getattr(module, "CreatableTopicConfigs", None)
    configs = (
        None
        if config_type is None
        else tuple(
            build(config_type, **entry.wire_fields()) for entry in describe_topic(admin.config, overrides)
        )
    )
    return build(
        module.CreatableTopicResult,
        name=assignment.topic,
        topic_id=None,
        error_code=ErrorCode.none,
        error_message=None,
        topic_config_error_code=0,
        num_partitions=assignment.partition_count,
        replication_factor=assignment.replication_factor,
        configs=configs,
    )


def _create_error(module: Any, name: str, code: ErrorCode, message: str) -> Any:
    return build(
        module.CreatableTopicResult,
        name=name,
        topic_id=None,
        error_code=code,
        error_message=message,
        topic_config_error_code=0,
        num_partitions=USE_DEFAULT,
        replication_factor=USE_DEFAULT,
        configs=None,
    )


# -- DeleteTopics ----------------------------------------------------------------------------------------


async def _delete_topics(admin: AdminPieces, waiter: MetadataWaiter, context: RequestContext) -> Any:
    request = context.decode()
    version = context.api_version
    module = response_module(ApiKey.DELETE_TOPICS, version)
    # v6 names topics by name or ID (DeleteTopicState); older versions list names.
    states = getattr(request, "topics", None)
    names = [t.name for t in states] if states is not None else list(request.topic_names)
    results: dict[str, Any] = {}
    unknown_ids = [
        # This broker hands out no topic IDs (Metadata answers the zero UUID), so none can match.
        build(
            module.DeletableTopicResult,
            name=None,
            topic_id=t.topic_id,
            error_code=ErrorCode.unknown_topic_id,
            error_message="This server does not host this topic ID.",
        )
        for t in states or ()
        if t.name is None
    ]
    both = {t.name for t in states or () if t.name is not None and t.topic_id is not None}
    deleted: list[str] = []
    for name in names:
        if name is None or name in results:
            continue
        if name in both:
            message = "You may not specify both topic name and topic id."
            results[name] = _delete_result(module, name, ErrorCode.invalid_request, message)
            continue
        results[name] = await _delete_one(admin, module, version, name)
        if results[name].error_code == ErrorCode.none:
            deleted.append(name)
    pending = {name: _gone_check(admin, name) for name in deleted}
    await _answer_when_visible(
        waiter,
        millis(request.timeout) / 1000,
        pending,
        results,
        lambda name: _delete_result(
            module, name, ErrorCode.request_timed_out, f"Topic {name} is still being deleted."
        ),
    )
    return build(
        module.DeleteTopicsResponse, throttle_time=throttle(), responses=(*results.values(), *unknown_ids)
    )


async def _delete_one(admin: AdminPieces, module: Any, version: int, name: str) -> Any:
    if not admin.config["delete.topic.enable"]:
        # Kafka answers versions before 3 INVALID_REQUEST: they have no TOPIC_DELETION_DISABLED.
        code = ErrorCode.topic_deletion_disabled if version >= 3 else ErrorCode.invalid_request
        return _delete_result(module, name, code, "Topic deletion is disabled.")
    try:
        await admin.zk(admin.store.delete_topic, name)
    except InvalidTopicError:
        # Kafka looks the name up in its metadata cache, where an illegal name is simply unknown.
        return _delete_result(
            module, name, ErrorCode.unknown_topic_or_partition, f"Topic '{name}' does not exist."
        )
    except Exception as exc:
        code, message = error_of(exc, "delete_topic")
        return _delete_result(module, name, code, message)
    log.info("event=topic_deleted topic=%s", name)
    return _delete_result(module, name, ErrorCode.none, None)


def _delete_result(module: Any, name: str | None, code: ErrorCode, message: str | None) -> Any:
    return build(
        module.DeletableTopicResult, name=name, topic_id=None, error_code=code, error_message=message
    )


# -- CreatePartitions ------------------------------------------------------------------------------------


async def _create_partitions(admin: AdminPieces, waiter: MetadataWaiter, context: RequestContext) -> Any:
    request = context.decode()
    module = response_module(ApiKey.CREATE_PARTITIONS, context.api_version)
    results, to_grow = _once_each(
        request.topics,
        lambda name, _: _partitions_result(
            module, name, ErrorCode.invalid_request, "Duplicate topic in request."
        ),
    )
    grown: dict[str, int] = {}
    outcomes = await _settled(_grow(admin, topic, request.validate_only) for topic in to_grow)
    for topic, outcome in zip(to_grow, outcomes, strict=True):
        if isinstance(outcome, Exception):
            code, message = error_of(outcome, "create_partitions")
            results[topic.name] = _partitions_result(module, topic.name, code, message)
            continue
        if not request.validate_only:
            grown[topic.name] = topic.count
        results[topic.name] = _partitions_result(module, topic.name, ErrorCode.none, None)
    pending = {name: _leaders_check(admin, name, count) for name, count in grown.items()}
    await _answer_when_visible(
        waiter,
        millis(request.timeout) / 1000,
        pending,
        results,
        lambda name: _partitions_result(
            module,
            name,
            ErrorCode.request_timed_out,
            f"Partitions of {name} were added but have no leader yet; retry later.",
        ),
    )
    return build(module.CreatePartitionsResponse, throttle_time=throttle(), results=tuple(results.values()))


async def _grow(admin: AdminPieces, topic: Any, validate_only: bool) -> None:
    if topic.name not in admin.cache.topics and not await admin.zk(admin.store.topic_exists, topic.name):
        raise UnknownTopicOrPartitionError(f"The topic '{topic.name}' does not exist.")
    before = admin.cache.partition_count(topic.name)
    assignment = None
    if topic.assignments is not None:
        assignment = [[int(b) for b in a.broker_ids] for a in topic.assignments]
        increment = topic.count - before
        if before and increment > 0 and len(assignment) != increment:
            # Kafka calls this a bad assignment (the store, a bad partition count): answer as Kafka does.
            raise InvalidReplicaAssignmentError(
                f"Increasing the number of partitions by {increment} "
                f"but {len(assignment)} assignments provided."
            )
    await admin.zk(
        admin.store.add_partitions,
        topic.name,
        topic.count,
        assignment=assignment,
        validate_only=validate_only,
    )
    if not validate_only:
        log.info("event=partitions_created topic=%s from=%d to=%d", topic.name, before, topic.count)


def _partitions_result(module: Any, name: str, code: ErrorCode, message: str | None) -> Any:
    return build(module.CreatePartitionsTopicResult, name=name, error_code=code, error_message=message)
