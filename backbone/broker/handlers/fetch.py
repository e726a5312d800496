"""Fetch: whole record batches from partition leaders, bounded by the high watermark, with long-poll.

The answer waits up to `max_wait_ms` for `min_bytes` to accumulate (an append to any asked partition wakes
it). Records leave as file regions (see region_sender); sizes respect `partition_max_bytes` and the
request's `max_bytes`, except that the first non-empty partition always gets at least one whole batch so
a consumer can make progress (KIP-74). A fetcher that opens a fetch session (KIP-227, fetch_sessions) names
only the partitions that changed, and is answered only the partitions with news.

A follower's fetch (replica id >= 0) reads up to the log end, not the high watermark, and the offset it
asks for tells the leader what the follower holds (which moves the high watermark and the ISR).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from backbone.broker.fetch_sessions import FetchSessionCache
from backbone.broker.handlers.common import error_code_of, millis
from backbone.broker.network import Handler, RequestContext
from backbone.broker.quotas import charge_fetch, fetch_byte_limit
from backbone.broker.region_sender import Regions
from backbone.protocol.errors import (
    FencedLeaderEpochError,
    KafkaError,
    TopicAuthorizationFailedError,
    UnknownLeaderEpochError,
)
from backbone.wire.chunks import Chunk
from backbone.wire.fetch import FetchPartitionResult, encode_fetch_response

if TYPE_CHECKING:
    from backbone.broker.metrics import BrokerMetrics
    from backbone.broker.partition import Partition
    from backbone.broker.replica_manager import ReplicaManager
    from backbone.broker.security.authorizer import Authorizer


def fetch_handler(
    replicas: ReplicaManager,
    authorizer: Authorizer,
    metrics: BrokerMetrics | None,
    sessions: FetchSessionCache | None = None,
) -> Handler:
    sessions = sessions if sessions is not None else FetchSessionCache()

    async def handle(context: RequestContext) -> list[Chunk]:
        request = context.decode()
        follower = request.replica_id >= 0
        try:
            plan = sessions.plan(request, privileged=follower)
        except KafkaError as exc:
            return encode_fetch_response(context.api_version, [], error_code=exc.code)
        deadline = time.monotonic() + max(0, millis(request.max_wait)) / 1000
        denied = _denied(authorizer, context, request.replica_id, [topic for topic, _ in plan.to_read])
        # Replication is not a client: no client quota applies to a follower's fetch.
        max_bytes = request.max_bytes if follower else fetch_byte_limit(context, request.max_bytes)
        stopping = False  # the broker is stopping: answer with what there is
        while True:
            topics, total, readable, full, failed = _read(
                replicas, plan.to_read, request.replica_id, max_bytes, denied
            )
            remaining = deadline - time.monotonic()
            if total >= request.min_bytes or remaining <= 0 or failed or full or not readable or stopping:
                break
            # Too little yet (`fetch.min.bytes`, as Kafka's delayed fetch): sleep until an asked partition,
            # also one that already gave records, has more for this fetcher or changes leader, or the
            # deadline; then read them all again. Wake-ups that bring nothing for it (an append to another
            # partition, a high watermark this follower does not read up to) do not read again.
            seen = [_readable_state(partition, follower) for partition in readable]
            waited = time.monotonic()
            while remaining > 0:
                stopping = await _wait_for_append(readable, remaining)
                if stopping:
                    break
                remaining = deadline - time.monotonic()
                if any(
                    _readable_state(p, follower) != state for p, state in zip(readable, seen, strict=True)
                ):
                    break
            context.remote_wait_s += time.monotonic() - waited
        if follower:
            context.throttle_ms = 0
        elif charge_fetch(context, total):
            # Throttled: answered at once without records, the client asks again after the throttle time.
            assert context.throttle_ms is not None
            return encode_fetch_response(
                context.api_version,
                [],
                throttle_time_ms=context.throttle_ms,
                session_id=plan.throttled_session_id(),
            )
        if metrics is not None and total:
            metrics.sent(topics)
        answered, session_id = plan.answer(topics)
        return encode_fetch_response(context.api_version, answered, session_id=session_id)

    return handle


async def _wait_for_append(partitions: list[Partition], timeout: float) -> bool:
    """Sleep until an append to one of `partitions` (or a leadership change) wakes us, or `timeout` s;
    True when the broker is stopping and the fetch must answer now.

    One future, registered with every partition and awaited directly, so the append that sets it resumes
    this fetch on the next event-loop turn (asyncio.wait over a future per partition took two turns and
    more objects), as Kafka's append path completes a delayed fetch at once.
    """
    loop = asyncio.get_running_loop()
    woken: asyncio.Future[bool] = loop.create_future()
    for partition in partitions:
        partition.add_waiter(woken)
    timer = loop.call_later(timeout, _wake, woken)
    try:
        return await woken
    finally:
        timer.cancel()


def _readable_state(partition: Partition, follower: bool) -> tuple[int, int, bool, str | None]:
    """What a fetch can read of `partition` (up to its log end for a follower, else up to its high
    watermark) and who leads it: the wait ends when this changes."""
    log = partition.log
    limit = log.log_end_offset if follower else log.high_watermark
    return limit, partition.leader_epoch, partition.is_leader, partition.removed


def _wake(waiter: asyncio.Future[bool]) -> None:
    if not waiter.done():
        waiter.set_result(False)


def _denied(
    authorizer: Authorizer, context: RequestContext, replica_id: int, topics: Sequence[str]
) -> frozenset[str]:
    """Topics this fetch may not read: followers need CLUSTER_ACTION, consumers READ on each topic."""
    if not authorizer.enabled:
        return frozenset()
    if replica_id >= 0:
        allowed = authorizer.check_cluster(context, "CLUSTER_ACTION")
        return frozenset() if allowed else frozenset(topics)
    return frozenset(topic for topic in topics if not authorizer.check(context, "READ", "TOPIC", topic))


def _read(
    replicas: ReplicaManager,
    to_read: Sequence[tuple[str, Sequence[Any]]],
    replica_id: int,
    max_bytes: int,
    denied: frozenset[str] = frozenset(),
) -> tuple[list[tuple[str, list[FetchPartitionResult]]], int, list[Partition], bool, bool]:
    """The answer as it stands, its records' size, the partitions read, whether the size limit left records
    out, and whether any partition failed. `to_read` pairs each topic with its asked partitions (each with
    partition, fetch_offset, partition_max_bytes and, from v9, current_leader_epoch)."""
    budget = max_bytes
    total = 0
    failed = full = False
    readable: list[Partition] = []
    topics = []
    for topic_name, asked_partitions in to_read:
        results = []
        for asked in asked_partitions:
            result = FetchPartitionResult(asked.partition)
            try:
                if topic_name in denied:
                    raise TopicAuthorizationFailedError(f"not authorized to read {topic_name}")
                partition = replicas.leader_partition(topic_name, asked.partition)
                # Fetch v4-v8 carry no leader epoch: such a fetcher does not fence.
                check_leader_epoch(partition, getattr(asked, "current_leader_epoch", -1))
                limit = min(asked.partition_max_bytes, budget)
                read, high_watermark, log_start_offset = partition.read(
                    asked.fetch_offset, max(limit, 0), replica_id
                )
                readable.append(partition)
                result.high_watermark = result.last_stable_offset = high_watermark
                result.log_start_offset = log_start_offset
                size = read.size if read.regions else 0
                if size and (total == 0 or size <= budget):
                    result.records = Regions(read.regions) if len(read.regions) > 1 else read.regions[0]
                    total += size
                    budget -= size
                else:
                    result.records = b""
                    full = full or size > 0
            except KafkaError as exc:
                result.error_code = exc.code
                result.records = b""
                failed = True
            except Exception as exc:  # one partition's failure must not fail the others
                result.error_code = error_code_of(exc)
                result.records = b""
                failed = True
            results.append(result)
        topics.append((topic_name, results))
    return topics, total, readable, full, failed


def check_leader_epoch(partition: Partition, current_leader_epoch: int) -> None:
    if current_leader_epoch < 0 or current_leader_epoch == partition.leader_epoch:
        return
    if current_leader_epoch < partition.leader_epoch:
        raise FencedLeaderEpochError(
            f"leader epoch {current_leader_epoch} is older than {partition.leader_epoch} for "
            f"{partition.topic}-{partition.index}"
        )
    raise UnknownLeaderEpochError(
        f"leader epoch {current_leader_epoch} is newer than {partition.leader_epoch} for "
        f"{partition.topic}-{partition.index}"
    )
