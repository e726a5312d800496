"""The producer's sender: drains ready batches to partition leaders and handles the answers.

One task on the event loop. Each round it fails batches whose `delivery.timeout.ms` passed (waiting, or
sent and unanswered), takes the head batch of every partition that is ready and whose leader has a ready
connection with a free in-flight slot (`max.in.flight.requests.per.connection`), groups them into one
Produce request per leader (up to `max.request.size`), and sends each request from its own task so answers
are handled as they come; requests reach a broker in the order they were planned, so an idempotent
producer's sequence numbers (given as batches are taken) reach it in order. It sleeps until a batch lingers
long enough, a retry backoff ends, an in-flight batch expires, or someone wakes it (`wakeup`: a send filled
or opened a batch, an answer freed a slot, metadata changed, a connection became ready).

Errors: retriable ones (leader moved, not enough replicas, timeouts, lost connections) put the batch back
at the front of its queue after `retry.backoff.ms` (doubling up to `retry.backoff.max.ms`) until `retries`
or `delivery.timeout.ms` runs out; errors that mean stale metadata also ask for a refresh. Everything
about sequence numbers and epochs is in `idempotence`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

from backbone.client.cluster import ClusterClient, backoff_ms
from backbone.client.producer.accumulator import ProducerBatch, RecordAccumulator
from backbone.client.producer.idempotence import IdempotenceState
from backbone.client.structs import TopicPartition
from backbone.protocol.api import ApiKey
from backbone.protocol.errors import ErrorCode, KafkaError, error_for
from backbone.wire.connection import BrokerConnection
from backbone.wire.errors import (
    KafkaClientError,
    KafkaConnectionError,
    KafkaTimeoutError,
    is_retriable,
)
from backbone.wire.produce import ProducedPartition, decode_produce_response, encode_produce_request

__all__ = ["METADATA_ERRORS", "Sender"]

log = logging.getLogger(__name__)

METADATA_ERRORS = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.leader_not_available,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.unknown_leader_epoch,
        ErrorCode.kafka_storage_error,
        ErrorCode.replica_not_available,
    }
)
"""Errors that mean the client's view of who leads a partition is stale (Java's InvalidMetadataException)."""

_NEEDS_PRODUCER_ID = -1.0  # what `_plan` returns instead of a wait when nothing goes before InitProducerId
_POLL_WHEN_BLOCKED = 0.1  # seconds: re-check batches waiting on a connection or leader, against lost wakeups
_TRANSACTION_TIMEOUT_MS = 60_000  # InitProducerId requires one; unused by a non-transactional producer


class Sender:
    def __init__(
        self,
        cluster: ClusterClient,
        accumulator: RecordAccumulator,
        config: Mapping[str, Any],
        idempotence: IdempotenceState | None,
    ) -> None:
        self.cluster = cluster
        self.accumulator = accumulator
        self.idempotence = idempotence
        self.acks: int = config["acks"]
        self.retries: int = config["retries"]
        self.request_timeout_ms: int = config["request.timeout.ms"]
        self.max_request_size: int = config["max.request.size"]
        self.max_in_flight: int = config["max.in.flight.requests.per.connection"]
        self.backoff = (config["retry.backoff.ms"], config["retry.backoff.max.ms"])
        self._wakeup = asyncio.Event()
        self._wake_requested = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = -1
        self._in_flight: dict[TopicPartition, list[ProducerBatch]] = defaultdict(list)
        self._in_flight_expiry = float("inf")
        """No in-flight batch expires before this (monotonic seconds; settled ones may make it early)."""
        self._node_requests: dict[int, int] = defaultdict(int)
        self._unstarted: dict[int, int] = defaultdict(int)
        """Requests per broker that a round planned (their batches numbered) whose task has not started."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._connecting: set[int] = set()
        self.on_acknowledged: Callable[[ProducerBatch], None] | None = None
        """Called with each batch the broker acknowledged (the producer's audit counts it)."""
        self._stopping = False
        self._task: asyncio.Task[None] | None = None

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._task = asyncio.ensure_future(self._run())
        self.cluster.listeners.append(self.wakeup)

    def wakeup(self) -> None:
        """Make the sender run a round soon. Any thread may call it.

        Requests coalesce until the round starts: a producer filling batches faster than the loop thread
        gets to run costs one cross-thread wakeup (a write to the loop's self-pipe) per round, not one per
        batch. The round clears the flag before it looks at the queues, so a batch added after that look
        always finds the flag clear and asks again.
        """
        if self._wake_requested:
            return
        self._wake_requested = True
        loop = self._loop
        if loop is None or threading.get_ident() == self._loop_thread:
            self._wakeup.set()
        else:
            loop.call_soon_threadsafe(self._wakeup.set)

    def in_flight_batches(self) -> list[ProducerBatch]:
        return [batch for batches in self._in_flight.values() for batch in batches]

    async def wait_for(self, batches: list[ProducerBatch], timeout: float | None) -> bool:
        """Wait until every batch completed; False if `timeout` seconds passed first.

        Batches complete about in the order they were made, so the newest (last) is waited for first: by
        then the others are nearly all done, and waiting for thousands of batches takes a few wake-ups, not
        one per answer.
        """
        try:
            async with asyncio.timeout(timeout):
                for batch in reversed(batches):
                    if not batch.done:
                        await batch.wait_done()
        except TimeoutError:
            return False
        return True

    async def stop(self, error: BaseException) -> None:
        """Stop sending; batches still waiting or in flight fail with `error`."""
        self._stopping = True
        self.wakeup()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for batch in self.accumulator.take_all() + self.in_flight_batches():
            self._fail(batch, error, sequence_gap=False)

    # -- the loop ---------------------------------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        # A timer that sets the event, not asyncio.timeout (several times the cost), kept from round to round
        # while it is due no later than the next round needs: a round that ends waiting for answers asks for
        # the same poll every time, and a timer per round (a heap push and a cancel) cost several percent of
        # a request at one record per request. A timer that fires early costs a round. A timer that has fired
        # is forgotten as it fires: uvloop's may fire before its `when()` (its clock counts milliseconds), so
        # `when() <= now` does not tell that it has.
        timer: asyncio.TimerHandle | None = None

        def fire() -> None:
            nonlocal timer
            timer = None
            self._wakeup.set()

        try:
            while not self._stopping:
                self._wake_requested = False
                self._wakeup.clear()
                try:
                    wait = await self._round(time.monotonic())
                except Exception:
                    # A defect here must not end the task: every batch would then wait for good, silently.
                    log.exception("event=sender_round_failed")
                    wait = _POLL_WHEN_BLOCKED
                if wait <= 0:
                    continue
                if wait != float("inf"):
                    now = loop.time()
                    if timer is None or timer.when() > now + wait:
                        if timer is not None:
                            timer.cancel()
                        timer = loop.call_at(now + wait, fire)
                await self._wakeup.wait()
        finally:
            if timer is not None:
                timer.cancel()

    async def _round(self, now: float) -> float:
        """Fail expired batches, send what can go; return how long to sleep before the next round (0: now)."""
        requests, wait = self._plan(now)
        if wait == _NEEDS_PRODUCER_ID:
            await self._init_producer_id()
            return 0.0
        for node_id, batches in requests.items():
            self._unstarted[node_id] += 1
            self._spawn(self._produce(node_id, batches))
        return wait

    def _plan(self, now: float, only_node: int | None = None) -> tuple[dict[int, list[ProducerBatch]], float]:
        """A round but for starting the requests (of the broker `only_node` alone, if given): fail expired
        batches, take what can go and count it as in flight. Returns the requests, and how long to sleep
        before the next round (_NEEDS_PRODUCER_ID: nothing goes before the producer has an id)."""
        state = self.idempotence
        if state is not None and state.bump_required and not self.in_flight_batches():
            state.bump(self.accumulator.pending_batches())
        # Without a producer id, or until the in-flight batches settled before an epoch bump, nothing goes.
        drain = state is None or (state.has_producer_id and not state.bump_required)
        expired, requests, blocked, next_due = self._collect(now, drain, only_node)
        for batch in expired:
            self._expire(batch, now)
        next_due = min(next_due, self._expire_in_flight(now))
        if state is not None and not state.has_producer_id:
            return {}, _NEEDS_PRODUCER_ID if self.accumulator.has_pending() else float("inf")
        if state is not None and state.bump_required:
            # Nothing goes until the in-flight batches settled and the epoch is bumped. An expiry just now
            # may have asked for the bump after the heads were taken: they go back, to be renumbered.
            for batches in requests.values():
                for batch in batches:
                    self.accumulator.reenqueue(batch)
            return {}, 0.0 if requests else _POLL_WHEN_BLOCKED
        for node_id, batches in requests.items():
            self._node_requests[node_id] += 1
            for batch in batches:
                if state is not None:
                    state.assign(batch)
                self._in_flight[batch.tp].append(batch)
                self._in_flight_expiry = min(self._in_flight_expiry, batch.deadline)
        if blocked:
            next_due = min(next_due, _POLL_WHEN_BLOCKED)
        return requests, next_due if next_due > 0 or not blocked else _POLL_WHEN_BLOCKED

    def _collect(
        self, now: float, drain: bool, only_node: int | None = None
    ) -> tuple[list[ProducerBatch], dict[int, list[ProducerBatch]], bool, float]:
        """Under one hold of the accumulator lock (the sending threads want it for every record): take out
        expired batches, then (if `drain`) the head batch of each sendable partition grouped by leader
        (partitions led by `only_node`, if given).

        Returns the expired batches, the requests, whether some batch is held back, and the seconds until
        a waiting batch is due.
        """
        metadata = self.cluster.metadata
        accumulator = self.accumulator
        requests: dict[int, list[ProducerBatch]] = {}
        sizes: dict[int, int] = {}
        blocked = False
        with accumulator.lock:
            expired = accumulator.expire_locked(now)
            for tp, queue in accumulator.queues.items() if drain else ():
                if not queue or not accumulator.is_sendable(queue[0], now):
                    continue
                batch = queue[0]
                leader = metadata.leader_for(tp)
                if only_node is not None and leader != only_node:
                    continue
                if leader < 0:
                    self.cluster.add_topics([tp.topic])
                    self.cluster.request_update()
                    blocked = True
                    continue
                if not self._node_can_send(leader):
                    blocked = True
                    continue
                if batch.base_sequence >= 0 and self._in_flight.get(tp):
                    blocked = True  # a retried batch goes again only after those before it settled
                    continue
                size = sizes.get(leader, 0)
                estimate = batch.size_in_bytes
                if size and size + estimate > self.max_request_size:
                    blocked = True
                    continue
                sizes[leader] = size + estimate
                batch.full = True  # it leaves the queue: no more appends
                requests.setdefault(leader, []).append(queue.popleft())
            next_due = accumulator.next_ready_in_locked(now)
        return expired, requests, blocked, next_due

    def _expire_in_flight(self, now: float) -> float:
        """Fail the in-flight batches whose `delivery.timeout.ms` passed, as Kafka's producer does: a broker
        that took the request and hangs must not hold the records past it (each retry's request timeout
        would otherwise start the wait again). Their requests stay open; a late answer finds them done and
        is ignored. Returns the seconds until the next in-flight batch expires."""
        if now < self._in_flight_expiry:  # the common case, checked at every answer: no scan
            return self._in_flight_expiry - now
        soonest = float("inf")
        expired = []
        for batches in self._in_flight.values():
            for batch in batches:
                if batch.deadline <= now:
                    expired.append(batch)
                else:
                    soonest = min(soonest, batch.deadline - now)
        for batch in expired:
            self._expire(batch, now)
        self._in_flight_expiry = now + soonest
        return soonest

    def _node_can_send(self, node_id: int) -> bool:
        conn = self.cluster.connection_if_ready(node_id)
        if conn is None:
            if node_id not in self._connecting:
                self._connecting.add(node_id)
                self._spawn(self._connect(node_id))
            return False
        return self._node_requests[node_id] < self.max_in_flight and conn.can_send()

    async def _connect(self, node_id: int) -> None:
        try:
            await self.cluster.connection(node_id)
        except (KafkaConnectionError, KafkaError) as error:
            log.warning("event=leader_connect_failed node=%d error=%s", node_id, error)
            self.cluster.request_update()
        finally:
            self._connecting.discard(node_id)
            self.wakeup()

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _init_producer_id(self) -> None:
        state = self.idempotence
        assert state is not None
        attempt = 0
        while not state.has_producer_id and not self._stopping:
            try:
                response = await self.cluster.request_kio(
                    None,
                    ApiKey.INIT_PRODUCER_ID,
                    transactional_id=None,
                    transaction_timeout=_TRANSACTION_TIMEOUT_MS,
                )
                if response.error_code:
                    raise error_for(response.error_code, "InitProducerId")
                state.set_producer(int(response.producer_id), int(response.producer_epoch))
                return
            except (KafkaClientError, KafkaError) as error:
                if not is_retriable(error):
                    log.error("event=producer_id_unavailable error=%s", error)
                    for batch in self.accumulator.take_all():
                        self._fail(batch, error, sequence_gap=False)
                    return
                attempt += 1
                log.warning("event=init_producer_id_failed attempt=%d error=%s", attempt, error)
                await asyncio.sleep(backoff_ms(*self.backoff, attempt) / 1000)

    # -- one request ------------------------------------------------------------------------------

    async def _produce(self, node_id: int, batches: list[ProducerBatch]) -> None:
        """Send a request to `node_id`, then, while the broker's next request is ready when the answer
        comes, that one from here: in the turn of the event loop that brought the answer, where going
        through the sender's task took two more turns (each one a wait for the GIL while an application
        thread is sending), a task and a round.

        Not while a request a round planned for the broker waits for its task's first turn: its batches were
        numbered first, and a request planned here would be written before it, so the broker would see a
        partition's sequences out of order (OUT_OF_ORDER_SEQUENCE_NUMBER, and a retry). The round woken at
        the end plans after it instead."""
        # This turn writes the request, or queues it for a free slot of the connection, whose queue keeps
        # the order: requests planned after it go after it.
        self._unstarted[node_id] -= 1
        try:
            while batches:
                try:
                    await self._produce_once(node_id, batches)
                finally:
                    self._node_requests[node_id] -= 1
                if self._stopping or self._unstarted[node_id]:
                    break
                batches = self._plan(time.monotonic(), node_id)[0].get(node_id, [])
        finally:
            self.wakeup()  # a round for everything else: other brokers, timers, a producer id

    async def _produce_once(self, node_id: int, batches: list[ProducerBatch]) -> None:
        try:
            await self._exchange(node_id, batches)
        except Exception as error:
            # A defect must not strand the batches as in flight: they would hold back their partitions'
            # retries and any epoch bump for good. They are retried (or expire) like after a lost answer.
            log.exception("event=produce_request_failed node=%d", node_id)
            failure = KafkaConnectionError(f"producing to broker {node_id} failed: {error!r}")
            for batch in batches:
                self._settle_error(batch, failure, -1)

    async def _exchange(self, node_id: int, batches: list[ProducerBatch]) -> None:
        """One Produce request and its answer, each batch settled by what the broker said of it."""
        by_tp = {batch.tp: batch for batch in batches}
        topics: dict[str, list[tuple[int, bytes | bytearray]]] = defaultdict(list)
        for batch in batches:
            topics[batch.tp.topic].append((batch.tp.partition, batch.build()))
        payload = list(topics.items())
        try:
            # The round saw it ready; `connection` (a coroutine) only when it closed since.
            conn = self.cluster.connection_if_ready(node_id) or await self.cluster.connection(node_id)
            if self.acks == 0:
                await self._send_without_answer(conn, payload, batches)
                return
            results = await conn.request(
                ApiKey.PRODUCE,
                lambda version: encode_produce_request(version, self.acks, self.request_timeout_ms, payload),
                decode_produce_response,
                timeout_ms=self.request_timeout_ms,
            )
        except (KafkaClientError, KafkaError) as error:
            if isinstance(error, KafkaConnectionError | KafkaTimeoutError):
                self.cluster.request_update()
            for batch in batches:
                self._settle_error(batch, error, -1)
            return
        for result in results:
            answered = by_tp.pop(TopicPartition(result.topic, result.partition), None)
            if answered is not None:
                self._settle(answered, result)
        for batch in by_tp.values():
            unanswered = KafkaConnectionError(f"broker {node_id} left {batch.tp} unanswered")
            self._settle_error(batch, unanswered, -1)

    async def _send_without_answer(
        self,
        conn: BrokerConnection,
        payload: list[tuple[str, list[tuple[int, bytes | bytearray]]]],
        batches: list[ProducerBatch],
    ) -> None:
        version = conn.version(ApiKey.PRODUCE)
        await conn.send_no_response(
            ApiKey.PRODUCE, version, encode_produce_request(version, 0, self.request_timeout_ms, payload)
        )
        for batch in batches:
            self._succeed(batch, -1, -1)

    def _settle(self, batch: ProducerBatch, result: ProducedPartition) -> None:
        if batch.done:
            return  # expired while its request was out (`_expire_in_flight`): the answer comes too late
        code = result.error_code
        if code == ErrorCode.none or code == ErrorCode.duplicate_sequence_number:
            # DUPLICATE_SEQUENCE_NUMBER: an old broker saying it already has the batch; it is written.
            self._succeed(batch, result.base_offset, result.log_append_time_ms)
            return
        detail = result.error_message or ""
        if result.record_errors:
            detail += f" (record errors: {result.record_errors[:3]})"
        self._settle_error(
            batch, error_for(code, f"producing to {batch.tp}: {detail}".rstrip(": ")), result.log_start_offset
        )

    def _succeed(self, batch: ProducerBatch, base_offset: int, log_append_time: int) -> None:
        self._forget_in_flight(batch)
        if self.idempotence is not None:
            self.idempotence.acknowledged(batch)
        self.accumulator.pool.release(batch.reserved)
        batch.complete(base_offset, log_append_time, None)
        if self.on_acknowledged is not None:
            self.on_acknowledged(batch)

    def _settle_error(self, batch: ProducerBatch, error: BaseException, log_start_offset: int) -> None:
        if batch.done:
            return  # expired while its request was out: it is not retried
        self._forget_in_flight(batch)
        code = getattr(error, "code", None)
        if code in METADATA_ERRORS:
            self.cluster.request_update()
        now = time.monotonic()
        if self._can_retry(batch, error) and batch.attempts < self.retries and now < batch.deadline:
            batch.attempts += 1
            batch.retry_at = now + backoff_ms(*self.backoff, batch.attempts) / 1000
            log.warning("event=batch_retry partition=%s attempt=%d error=%s", batch.tp, batch.attempts, error)
            self.accumulator.reenqueue(batch)
            return
        self._fail(batch, error, sequence_gap=True)

    def _can_retry(self, batch: ProducerBatch, error: BaseException) -> bool:
        state = self.idempotence
        code = getattr(error, "code", None)
        if state is not None and code == ErrorCode.unknown_producer_id:
            # The broker lost this producer's state (e.g. retention removed its batches): start a new epoch.
            state.request_bump(batch.tp, "UNKNOWN_PRODUCER_ID")
            return True
        if state is not None and code == ErrorCode.out_of_order_sequence_number:
            if state.is_behind_acknowledged(batch) or (
                state.is_next_sequence(batch) and not self._in_flight.get(batch.tp)
            ):
                # The broker took later sequences already, or nothing before this batch is pending yet
                # the broker saw a gap: only a new epoch resolves that.
                state.request_bump(batch.tp, "OUT_OF_ORDER_SEQUENCE_NUMBER")
            return True  # otherwise an earlier batch is being retried; this one follows it
        return is_retriable(error)

    def _fail(self, batch: ProducerBatch, error: BaseException, *, sequence_gap: bool) -> None:
        self._forget_in_flight(batch)
        if sequence_gap and self.idempotence is not None and batch.base_sequence >= 0:
            self.idempotence.request_bump(batch.tp, f"batch failed: {type(error).__name__}")
        self.accumulator.pool.release(batch.reserved)
        log.warning(
            "event=batch_failed partition=%s records=%d error=%s", batch.tp, batch.record_count, error
        )
        batch.complete(-1, -1, error)

    def _expire(self, batch: ProducerBatch, now: float) -> None:
        waited = (now - batch.created) * 1000
        self._fail(
            batch,
            KafkaTimeoutError(
                f"expiring {batch.record_count} record(s) for {batch.tp}: {waited:.0f} ms passed since the "
                "batch was created (delivery.timeout.ms). Check that the partition has a leader the client "
                "can reach, or raise delivery.timeout.ms"
            ),
            sequence_gap=True,
        )

    def _forget_in_flight(self, batch: ProducerBatch) -> None:
        batches = self._in_flight.get(batch.tp)
        if batches and batch in batches:
            batches.remove(batch)
            if not batches:
                del self._in_flight[batch.tp]
