"""The broker's view of the cluster, kept current by ZooKeeper watches.

Every broker watches the live brokers, the controller, the topic list, each topic's assignment and each
partition's state, so any broker answers Metadata for the whole cluster. Watch callbacks arrive on
kazoo's threads; `MetadataSync` hands each one to the event loop, where the cache is changed and the
listeners (replica manager, controller) are told, so all broker state is touched from one thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from backbone.coordination import (
    BrokerRegistration,
    ClusterStore,
    ControllerInfo,
    CoordinationError,
    PartitionState,
    TopicAssignment,
    Watch,
)
from backbone.protocol import TopicPartition
from backbone.protocol.errors import KafkaError

log = logging.getLogger(__name__)


@dataclass
class MetadataCache:
    cluster_id: str | None = None
    controller_id: int = -1
    brokers: dict[int, BrokerRegistration] = field(default_factory=dict)
    topics: dict[str, TopicAssignment] = field(default_factory=dict)
    states: dict[TopicPartition, PartitionState] = field(default_factory=dict)

    def partition_count(self, topic: str) -> int:
        assignment = self.topics.get(topic)
        return 0 if assignment is None else len(assignment.partitions)

    def replicas(self, topic: str, partition: int) -> tuple[int, ...]:
        assignment = self.topics.get(topic)
        if assignment is None:
            return ()
        return tuple(assignment.partitions.get(partition, ()))

    def leader(self, topic: str, partition: int) -> int:
        state = self.states.get((topic, partition))
        return -1 if state is None else state.leader

    def reachable_brokers(self, listener: str) -> list[tuple[int, str, int, str | None]]:
        """(id, host, port, rack) of each live broker with `listener`; others cannot be reached from it."""
        found = []
        for broker_id in sorted(self.brokers):
            address = self.endpoint(broker_id, listener)
            if address is not None:
                found.append((broker_id, address[0], address[1], self.brokers[broker_id].rack))
        return found

    def endpoint(self, broker_id: int, listener: str) -> tuple[str, int] | None:
        registration = self.brokers.get(broker_id)
        if registration is None:
            return None
        for endpoint in registration.endpoints:
            if endpoint.listener == listener:
                return endpoint.host, endpoint.port
        return None


class MetadataListener:
    """What the replica manager and controller hear about; every method runs on the event loop."""

    def on_brokers_changed(self, previous: set[int], current: set[int]) -> None: ...

    def on_partition_state(self, topic: str, partition: int) -> None: ...

    def on_topic_deleted(self, topic: str) -> None: ...

    def on_topic_changed(self, topic: str) -> None: ...

    def on_topic_config(self, topic: str, overrides: dict[str, str]) -> None:
        """A topic's config overrides, read as its watch is installed: before its assignment is applied,
        so its logs never take a record the overrides would refuse (a compacted topic's keyless ones)."""

    def on_controller_changed(self, controller_id: int) -> None: ...


class MetadataSync:
    """Installs the watches and applies what they report to a MetadataCache, on the event loop."""

    def __init__(self, store: ClusterStore, cache: MetadataCache, loop: asyncio.AbstractEventLoop) -> None:
        self.store = store
        self.cache = cache
        self.loop = loop
        self.listeners: list[MetadataListener] = []
        self._topic_watches: dict[str, Watch | _PendingWatch] = {}
        self._state_watches: dict[TopicPartition, Watch | _PendingWatch] = {}
        self._watches: list[Watch] = []
        self._closed = False

    def start(self) -> None:
        """Install the watches (blocking: call it from a worker thread)."""
        self.cache.cluster_id = self.store.get_cluster_id()
        self._watches.append(self.store.watch_brokers(self._threadsafe(self._brokers_changed)))
        self._watches.append(self.store.watch_controller(self._threadsafe(self._controller_changed)))
        self._watches.append(self.store.watch_topics(self._threadsafe(self._topics_changed)))

    def close(self) -> None:
        self._closed = True
        for watch in [*self._watches, *self._topic_watches.values(), *self._state_watches.values()]:
            watch.cancel()

    def _threadsafe(self, handler: Callable[..., None]) -> Callable[..., None]:
        def forward(*args: object) -> None:
            if not self._closed and not self.loop.is_closed():
                self.loop.call_soon_threadsafe(self._run, handler, args)

        return forward

    def _run(self, handler: Callable[..., None], args: tuple[object, ...]) -> None:
        if self._closed:
            return
        try:
            handler(*args)
        except Exception:
            log.exception("event=metadata_update_failed handler=%s", handler.__name__)

    def _notify(self, method: str, *args: object) -> None:
        for listener in self.listeners:
            try:
                getattr(listener, method)(*args)
            except Exception:
                log.exception("event=metadata_listener_failed listener=%r method=%s", listener, method)

    # -- handlers (event loop) -------------------------------------------------------------------------

    def _brokers_changed(self, brokers: list[BrokerRegistration]) -> None:
        previous = set(self.cache.brokers)
        self.cache.brokers = {b.broker_id: b for b in brokers}
        if previous != set(self.cache.brokers):
            log.info("event=brokers_changed live=%s", sorted(self.cache.brokers))
        self._notify("on_brokers_changed", previous, set(self.cache.brokers))

    def _controller_changed(self, info: ControllerInfo | None) -> None:
        self.cache.controller_id = -1 if info is None else info.broker_id
        self._notify("on_controller_changed", self.cache.controller_id)

    def _topics_changed(self, topics: list[str]) -> None:
        current = set(topics)
        for topic in sorted(current - set(self._topic_watches)):
            self._watch_topic(topic)
        for topic in sorted(set(self._topic_watches) - current):
            self._forget_topic(topic)

    def _watch_topic(self, topic: str) -> None:
        # Watch installation blocks on ZooKeeper; do it off the loop and apply results through _threadsafe.
        self._topic_watches[topic] = _PendingWatch()
        callback = self._threadsafe(lambda assignment: self._topic_changed(topic, assignment))

        def install() -> None:
            try:
                overrides = self.store.get_topic_config(topic)
            except (KafkaError, CoordinationError) as exc:  # the broker reads it again when the topic appears
                log.warning("event=topic_config_unreadable topic=%s error=%r", topic, str(exc))
            else:  # queued before the watch's first report, so applied before the assignment
                self.loop.call_soon_threadsafe(self._run, self._config_read, (topic, overrides))
            watch = self.store.watch_topic(topic, callback)
            self.loop.call_soon_threadsafe(self._installed, self._topic_watches, topic, watch)

        self.loop.run_in_executor(None, install)

    def _config_read(self, topic: str, overrides: dict[str, str]) -> None:
        if topic in self._topic_watches:
            self._notify("on_topic_config", topic, overrides)

    def _installed(self, registry: dict, key: object, watch: Watch) -> None:
        if self._closed or not isinstance(registry.get(key), _PendingWatch):
            watch.cancel()  # forgotten (or closed) while installing
            return
        registry[key] = watch

    def _topic_changed(self, topic: str, assignment: TopicAssignment | None) -> None:
        if assignment is None:
            self._forget_topic(topic)
            return
        if topic not in self._topic_watches:
            return
        self.cache.topics[topic] = assignment
        for partition in assignment.partitions:
            key = (topic, partition)
            if key not in self._state_watches:
                self._watch_state(topic, partition)
        self._notify("on_topic_changed", topic)

    def _watch_state(self, topic: str, partition: int) -> None:
        key = (topic, partition)
        self._state_watches[key] = _PendingWatch()
        callback = self._threadsafe(lambda state: self._state_changed(topic, partition, state))

        def install() -> None:
            watch = self.store.watch_partition_state(topic, partition, callback)
            self.loop.call_soon_threadsafe(self._installed, self._state_watches, key, watch)

        self.loop.run_in_executor(None, install)

    def _state_changed(self, topic: str, partition: int, state: PartitionState | None) -> None:
        key = (topic, partition)
        if key not in self._state_watches:
            return
        if state is None:
            self.cache.states.pop(key, None)
        else:
            known = self.cache.states.get(key)
            if known is not None and state.zk_version < known.zk_version:
                return  # older than what this broker wrote itself and already applied
            self.cache.states[key] = state
        self._notify("on_partition_state", topic, partition)

    def apply_written_state(self, topic: str, partition: int, state: PartitionState) -> None:
        """A state this broker wrote itself: apply it now rather than when its own watch reports it."""
        self._state_changed(topic, partition, state)

    def _forget_topic(self, topic: str) -> None:
        watch = self._topic_watches.pop(topic, None)
        if watch is None:
            return
        watch.cancel()
        for key in [k for k in self._state_watches if k[0] == topic]:
            self._state_watches.pop(key).cancel()
            self.cache.states.pop(key, None)
        self.cache.topics.pop(topic, None)
        log.info("event=topic_removed topic=%s", topic)
        self._notify("on_topic_deleted", topic)


class _PendingWatch:
    """Stands in for a watch while it is being installed on a worker thread."""

    def cancel(self) -> None:
        pass
