"""The plain blocking face: `Producer`, `Consumer` and `Admin`, each running its asyncio core on a thread.

Each object starts a private daemon thread with its own event loop and creates its async core there; a
blocking method submits the core's coroutine to that loop and waits for the result. The one exception is
`Producer.send`, the hot path: it serializes, partitions and appends to the batch in the calling thread
(the accumulator is thread-safe) and only wakes the loop when a batch opens or fills, so a send costs no
thread hop. A send that must wait for memory waits in the calling thread, on the buffer pool's condition;
only one that must wait for a new topic's metadata goes through the loop.
Close the objects (or use them as context managers): the thread ends with them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import re
import threading
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping
from typing import Any, TypeVar

from backbone.client.admin.client import AsyncAdmin
from backbone.client.consumer.consumer import AsyncConsumer
from backbone.client.consumer.subscription import CommitCallback, check_listener
from backbone.client.producer.accumulator import RecordFuture
from backbone.client.producer.producer import AsyncProducer, Callback, MakeFuture, MustWait
from backbone.client.structs import ConsumerRecord, RecordList, TopicPartition
from backbone.wire.errors import KafkaTimeoutError

__all__ = ["Admin", "Consumer", "Producer"]

log = logging.getLogger(__name__)
T = TypeVar("T")


class _LoopThread:
    """An event loop running forever on its own daemon thread."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            # Tasks a core left behind are cancelled and awaited, so none is destroyed while pending.
            pending = asyncio.all_tasks(self.loop)
            for task in pending:
                task.cancel()
            self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    def is_current(self) -> bool:
        """Whether the caller runs on the loop's thread (in a callback)."""
        return threading.current_thread() is self._thread

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `coroutine` on the loop and wait for its result (KafkaTimeoutError after `timeout` s)."""
        if self.is_current():
            coroutine.close()
            raise RuntimeError("a blocking client method was called from its own callback thread")
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            if future.done():
                raise  # the operation's own timeout (e.g. KafkaTimeoutError), not the wait for it
            future.cancel()
            raise KafkaTimeoutError(f"the operation did not finish within {timeout} s") from None

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        if threading.current_thread() is not self._thread:
            self._thread.join()


async def _call(function: Callable[..., T], *args: Any) -> T:
    return function(*args)


class _Facade:
    """Owns the loop thread and the async core built on it."""

    _core: Any

    def __init__(self, factory: Callable[[], Any], name: str) -> None:
        self._thread = _LoopThread(name)
        try:
            self._core = self._thread.run(_call(factory))
            self._thread.run(self._core.start())
        except BaseException:
            self._thread.stop()
            raise
        self._closed = False

    def _run(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return self._thread.run(coroutine, timeout)

    def _on_loop(self, function: Callable[..., T], *args: Any) -> T:
        """Call a plain method of the core on its loop (so it never races the core's tasks)."""
        return self._thread.run(_call(function, *args))

    def close(self, timeout: float | None = None) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._thread.run(self._core.close(*(() if timeout is None else (timeout,))))
        finally:
            self._thread.stop()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def config(self) -> dict[str, Any]:
        return self._core.config


def _blocking(name: str, core: type) -> Callable[..., Any]:
    """A blocking method that runs the core's coroutine method `name`."""

    def method(self: _Facade, *args: Any, **kwargs: Any) -> Any:
        return self._run(getattr(self._core, name)(*args, **kwargs))

    method.__name__ = name
    method.__doc__ = getattr(core, name).__doc__
    return method


def _on_loop(name: str, core: type) -> Callable[..., Any]:
    """A blocking method that calls the core's plain method `name` on the loop thread."""

    def method(self: _Facade, *args: Any, **kwargs: Any) -> Any:
        return self._on_loop(lambda: getattr(self._core, name)(*args, **kwargs))

    method.__name__ = name
    method.__doc__ = getattr(core, name).__doc__
    return method


class Producer(_Facade):
    """Blocking producer: `send` returns a RecordFuture (`.get(timeout)`, callbacks); see AsyncProducer."""

    _core: AsyncProducer

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(lambda: AsyncProducer(config, **kwargs), "backbone-producer")
        if not self._core._serializing:
            # `send` without a Python frame of its own: the core's hot path with this face's future type
            # and wait handler bound in by functools.partial (a C call). It behaves as the method below, which
            # is why it may shadow it.
            self.send = functools.partial(  # type: ignore[method-assign]
                self._core._enqueue, RecordFuture, self._wait_then_enqueue
            )

    def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        headers: Iterable[tuple[str, bytes | None]] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        *,
        callback: Callback | None = None,
    ) -> RecordFuture:
        """Queue a record and return at once with its future (blocks only as AsyncProducer.send waits)."""
        key, value = self._core._serialized(key, value)
        return self._core._enqueue(
            RecordFuture,
            self._wait_then_enqueue,
            topic,
            value,
            key,
            headers,
            partition,
            timestamp_ms,
            callback,
        )

    def _wait_then_enqueue(self, make_future: MakeFuture, wait: MustWait) -> RecordFuture:
        # Memory or metadata is missing: wait for it (bounded by max.block.ms), memory in this thread. On the
        # loop's own thread, waiting could never end: the loop refuses it.
        if self._thread.is_current():
            return self._wait_on_loop(make_future, wait)
        future: RecordFuture = self._core._enqueue_blocking(make_future, wait, self._wait_on_loop)
        return future

    def _wait_on_loop(self, make_future: MakeFuture, wait: MustWait) -> RecordFuture:
        future: RecordFuture = self._run(self._core._wait_and_enqueue(make_future, wait))
        return future

    def flush(self, timeout: float | None = None) -> None:
        """Send everything waiting and wait for the answers (KafkaTimeoutError after `timeout` s)."""
        self._run(self._core.flush(timeout))

    def close(self, timeout: float | None = None) -> None:
        """Deliver what was sent (up to `timeout` s), then stop; undelivered records fail."""
        super().close(timeout)

    partitions_for = _blocking("partitions_for", AsyncProducer)
    # Blocks until the records are queued; the futures it returns answer once `flush` returned.
    send_many = _blocking("send_many", AsyncProducer)
    metrics = _on_loop("metrics", AsyncProducer)


class _ThreadedListener:
    """A blocking consumer's rebalance listener, run on a worker thread while the event loop waits for it,
    so the listener may call the consumer's blocking methods (`commit` in `on_partitions_revoked`)."""

    def __init__(self, listener: Any) -> None:
        check_listener(listener)
        self._listener = listener

    async def _call(self, name: str, partitions: set[TopicPartition]) -> None:
        method = getattr(self._listener, name, None)
        if method is None and name == "on_partitions_lost":
            method = getattr(self._listener, "on_partitions_revoked", None)
        if method is not None:
            await asyncio.to_thread(method, partitions)

    async def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None:
        await self._call("on_partitions_revoked", partitions)

    async def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None:
        await self._call("on_partitions_assigned", partitions)

    async def on_partitions_lost(self, partitions: set[TopicPartition]) -> None:
        await self._call("on_partitions_lost", partitions)


class Consumer(_Facade):
    """Blocking consumer: see AsyncConsumer for every method."""

    _core: AsyncConsumer

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(lambda: AsyncConsumer(config, **kwargs), "backbone-consumer")

    def close(self, timeout: float | None = None) -> None:
        """Commit (with auto-commit, bounded by `timeout` s), leave the group, and stop."""
        super().close(timeout)

    def subscribe(
        self,
        topics: Iterable[str] | str | None = None,
        pattern: str | re.Pattern[str] | None = None,
        listener: Any = None,
    ) -> None:
        """Join the group reading `topics` or every topic matching `pattern`; see AsyncConsumer.subscribe.
        The listener's methods run on a worker thread and may call this consumer's methods."""
        wrapped = None if listener is None else _ThreadedListener(listener)
        self._on_loop(self._core.subscribe, topics, pattern, wrapped)

    def commit_async(
        self,
        offsets: Mapping[TopicPartition, Any] | None = None,
        callback: CommitCallback | None = None,
    ) -> concurrent.futures.Future[None]:
        """Commit in the background; `callback(offsets, exception_or_None)` runs on the consumer's loop
        thread (it must not call this consumer's blocking methods). The future completes when done."""
        done: concurrent.futures.Future[None] = concurrent.futures.Future()

        def start() -> None:
            task = self._core.commit_async(offsets, callback)
            task.add_done_callback(lambda _: done.set_result(None))

        self._on_loop(start)
        return done

    assign = _on_loop("assign", AsyncConsumer)
    assignment = _on_loop("assignment", AsyncConsumer)
    subscription = _on_loop("subscription", AsyncConsumer)
    unsubscribe = _blocking("unsubscribe", AsyncConsumer)
    commit = _blocking("commit", AsyncConsumer)
    committed = _blocking("committed", AsyncConsumer)
    pause = _on_loop("pause", AsyncConsumer)
    resume = _on_loop("resume", AsyncConsumer)
    paused = _on_loop("paused", AsyncConsumer)
    seek = _on_loop("seek", AsyncConsumer)
    seek_to_beginning = _on_loop("seek_to_beginning", AsyncConsumer)
    seek_to_end = _on_loop("seek_to_end", AsyncConsumer)
    seek_to_timestamp = _on_loop("seek_to_timestamp", AsyncConsumer)
    highwater = _on_loop("highwater", AsyncConsumer)
    position = _blocking("position", AsyncConsumer)
    beginning_offsets = _blocking("beginning_offsets", AsyncConsumer)
    end_offsets = _blocking("end_offsets", AsyncConsumer)
    offsets_for_times = _blocking("offsets_for_times", AsyncConsumer)
    partitions_for_topic = _blocking("partitions_for_topic", AsyncConsumer)
    topics = _blocking("topics", AsyncConsumer)

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> dict[TopicPartition, RecordList]:
        """Records fetched for the assigned partitions, waiting up to `timeout_ms` for some."""
        return self._run(self._core.poll(timeout_ms, max_records))

    def __iter__(self) -> Iterator[ConsumerRecord]:
        """Every record, one at a time, for as long as the consumer is open (break out to stop)."""
        while not self._closed:
            for records in self.poll(timeout_ms=1000).values():
                yield from records


class Admin(_Facade):
    """Blocking admin client: see AsyncAdmin for every method."""

    _core: AsyncAdmin

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(lambda: AsyncAdmin(config, **kwargs), "backbone-admin")

    def close(self, timeout: float | None = None) -> None:
        super().close()

    create_topics = _blocking("create_topics", AsyncAdmin)
    delete_topics = _blocking("delete_topics", AsyncAdmin)
    create_partitions = _blocking("create_partitions", AsyncAdmin)
    list_topics = _blocking("list_topics", AsyncAdmin)
    describe_topics = _blocking("describe_topics", AsyncAdmin)
    describe_configs = _blocking("describe_configs", AsyncAdmin)
    alter_configs = _blocking("alter_configs", AsyncAdmin)
    describe_cluster = _blocking("describe_cluster", AsyncAdmin)
    delete_records = _blocking("delete_records", AsyncAdmin)
    list_offsets = _blocking("list_offsets", AsyncAdmin)
    elect_leaders = _blocking("elect_leaders", AsyncAdmin)
    alter_partition_reassignments = _blocking("alter_partition_reassignments", AsyncAdmin)
    list_partition_reassignments = _blocking("list_partition_reassignments", AsyncAdmin)
    describe_log_dirs = _blocking("describe_log_dirs", AsyncAdmin)
    list_consumer_groups = _blocking("list_consumer_groups", AsyncAdmin)
    describe_consumer_groups = _blocking("describe_consumer_groups", AsyncAdmin)
    delete_consumer_groups = _blocking("delete_consumer_groups", AsyncAdmin)
    list_consumer_group_offsets = _blocking("list_consumer_group_offsets", AsyncAdmin)
    alter_consumer_group_offsets = _blocking("alter_consumer_group_offsets", AsyncAdmin)
    delete_consumer_group_offsets = _blocking("delete_consumer_group_offsets", AsyncAdmin)
    consumer_group_lag = _blocking("consumer_group_lag", AsyncAdmin)
    mirror_lag = _blocking("mirror_lag", AsyncAdmin)
