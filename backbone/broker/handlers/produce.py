"""Produce: append each partition's record set on its leader and answer when `acks` is met.

The request is decoded by the protocol room's fast path (records stay slices of the request buffer); the
broker checks batch headers and CRCs, never individual records. acks=0 gets no answer at all.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from backbone.broker.handlers.common import error_code_of, error_message_of
from backbone.broker.network import Handler, RequestContext
from backbone.broker.quotas import charge_produce
from backbone.consumer_groups.offsets_topic import OFFSETS_TOPIC
from backbone.protocol.errors import (
    CorruptMessageError,
    InvalidRequiredAcksError,
    InvalidTopicError,
    KafkaError,
    TransactionalIdAuthorizationFailedError,
)
from backbone.wire.produce import (
    ProducePartitionResult,
    ProduceRequestData,
    decode_produce_request,
    encode_produce_response,
)

if TYPE_CHECKING:
    from backbone.broker.config import BrokerConfig
    from backbone.broker.metrics import BrokerMetrics
    from backbone.broker.replica_manager import ReplicaManager
    from backbone.broker.security.authorizer import Authorizer

log = logging.getLogger(__name__)


def produce_handler(
    replicas: ReplicaManager, authorizer: Authorizer, config: BrokerConfig, metrics: BrokerMetrics | None
) -> Handler:
    async def handle(context: RequestContext) -> list[bytes] | None:
        request = decode_produce_request(context.frame, context.api_version, context.body_offset)
        results: list[tuple[str, list[ProducePartitionResult]]] = []
        acks = request.acks
        # As Kafka's delayed produce: every partition is appended first, then acks=all waits once for all
        # of them, so a request naming several partitions waits one replication round trip, not one each.
        waits: list[tuple[list[ProducePartitionResult], int, Awaitable[ProducePartitionResult | None]]] = []
        for topic in request.topics:
            answers: list[ProducePartitionResult] = []
            if not authorizer.check(context, "WRITE", "TOPIC", topic.name):
                refused = ErrorCode.topic_authorization_failed
                results.append(
                    (
                        topic.name,
                        [ProducePartitionResult(p.index, error_code=refused) for p in topic.partitions],
                    )
                )
                continue
            for part in topic.partitions:
                answer, wait = _append_partition(
                    replicas, config, metrics, topic.name, part.index, part.records, acks, request
                )
                if wait is not None:
                    waits.append((answers, len(answers), wait))
                answers.append(answer)
            results.append((topic.name, answers))
        if waits:
            waited = time.monotonic()
            failures = await asyncio.gather(*(wait for _, _, wait in waits))
            context.remote_wait_s += time.monotonic() - waited
            for (answers, position, _), failure in zip(waits, failures, strict=True):
                if failure is not None:
                    answers[position] = failure
        throttle_ms = charge_produce(context)
        if acks == 0:
            return None
        return [encode_produce_response(context.api_version, results, throttle_ms)]

    return handle


def _append_partition(
    replicas: ReplicaManager,
    config: BrokerConfig,
    metrics: BrokerMetrics | None,
    topic: str,
    index: int,
    records: memoryview | None,
    acks: int,
    request: ProduceRequestData,
) -> tuple[ProducePartitionResult, Awaitable[ProducePartitionResult | None] | None]:
    """Append one partition's records on its leader: its answer, and with acks=all what to wait for (which
    gives the answer to use instead when the wait fails)."""
    try:
        if acks not in (0, 1, -1):
            raise InvalidRequiredAcksError(f"acks={acks} must be 0, 1 or -1 (all)")
        if request.transactional_id is not None:
            raise TransactionalIdAuthorizationFailedError("transactions are not supported by this broker")
        if records is None or len(records) == 0:
            raise CorruptMessageError("produce request without records")
        if topic == OFFSETS_TOPIC:  # only the group coordinator writes there, in its own format
            raise InvalidTopicError(f"cannot produce to the internal topic {OFFSETS_TOPIC}")
        partition = replicas.leader_partition(topic, index)
        min_insync = replicas.check_min_insync(partition, config) if acks == -1 else 1
        result = partition.append_as_leader(records)
        if metrics is not None:
            metrics.appended(topic, result.records, len(records))
    except Exception as exc:
        return _failed(topic, index, exc), None
    answer = ProducePartitionResult(
        index,
        base_offset=result.base_offset,
        log_append_time_ms=result.log_append_time_ms,
        log_start_offset=result.log_start_offset,
    )
    if acks != -1:
        return answer, None
    # A retried duplicate waits too: its first attempt may not have been committed yet.
    committed = partition.wait_committed(result.base_offset, max(0, request.timeout_ms), min_insync)
    return answer, _failure_of(committed, topic, index)


async def _failure_of(wait: Awaitable[None], topic: str, index: int) -> ProducePartitionResult | None:
    try:
        await wait
    except Exception as exc:
        return _failed(topic, index, exc)
    return None


def _failed(topic: str, index: int, exc: Exception) -> ProducePartitionResult:
    if isinstance(exc, KafkaError):
        if exc.code is not ErrorCode.not_leader_or_follower:
            log.info("event=produce_rejected partition=%s-%d error=%s", topic, index, exc)
        return ProducePartitionResult(
            index, error_code=exc.code, error_message=error_message_of(exc), record_errors=exc.record_errors
        )
    # a bug must fail this partition, not the broker or the connection
    return ProducePartitionResult(index, error_code=error_code_of(exc), error_message=error_message_of(exc))
