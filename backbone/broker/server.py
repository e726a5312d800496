"""The broker process: storage, ZooKeeper registration, metadata, controller, listeners, housekeeping.

Start-up order matters: logs are recovered before anything is served; listeners are bound before the
broker registers in ZooKeeper (so the advertised port answers); the broker registers before it may become
controller. Shut-down goes the other way, and a SIGTERM ends it cleanly (producer snapshots and a clean
shutdown marker in every log, so the next start skips recovery).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from backbone.broker.config import BrokerConfig
from backbone.broker.connection_limits import ConnectionLimits
from backbone.broker.controller.control_loop import Controller
from backbone.broker.controller.liveness import Liveness
from backbone.broker.fetch_sessions import FetchSessionCache
from backbone.broker.group_coordination import GroupCoordination
from backbone.broker.handlers.admin_common import MetadataWaiter
from backbone.broker.handlers.broker_configs import apply_dynamic
from backbone.broker.handlers.wiring import register_all
from backbone.broker.metadata_cache import MetadataCache, MetadataListener, MetadataSync
from backbone.broker.metrics import BrokerMetrics
from backbone.broker.network import Handler, Listener
from backbone.broker.quotas import QuotaManager
from backbone.broker.region_sender import FileRegionSender
from backbone.broker.replica_fetcher import FetcherSettings
from backbone.broker.replica_manager import ReplicaManager
from backbone.broker.request_memory import RequestMemory
from backbone.broker.security.authorizer import Authorizer, keep_loaded
from backbone.broker.security.guards import guard_apis
from backbone.broker.security.listeners import inter_broker_security, secure_listener
from backbone.coordination import (
    BrokerAlreadyRegisteredError,
    BrokerRegistration,
    ClusterStore,
    ConfigChange,
    CoordinationError,
    EndPoint,
    PartitionState,
    ScramCredential,
    SessionEvent,
    Watch,
    paths,
)
from backbone.coordination.quotas import parse_entity_node
from backbone.log import LogManager
from backbone.log.cleaner import LogCleaner
from backbone.log.meta_properties import InconsistentClusterIdError, LogDirIdentity
from backbone.protocol.api import ApiTable
from backbone.protocol.errors import KafkaError
from backbone.stopping import stop_on_signals

log = logging.getLogger(__name__)

T = TypeVar("T")

# How often the broker snapshots idempotent-producer state and forgets idle producers.
PRODUCER_SNAPSHOT_INTERVAL_S = 60.0
# How long a shutdown step waits for ZooKeeper before going on without it.
SHUTDOWN_ZK_TIMEOUT_S = 5.0


class Broker(MetadataListener):
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.api_table: ApiTable[Handler] = ApiTable()
        self.cache = MetadataCache()
        self.log_manager = LogManager(
            config.log_dirs,
            config.log,
            cleaner=LogCleaner(dedupe_buffer_bytes=config["log.cleaner.dedupe.buffer.size"]),
        )
        self.store = ClusterStore(
            config["zookeeper.connect"],
            session_timeout=config["zookeeper.session.timeout.ms"] / 1000,
            connect_timeout=config["zookeeper.connection.timeout.ms"] / 1000,
        )
        self.replicas = ReplicaManager(
            self.broker_id,
            self.log_manager,
            self.cache,
            producer_expiration_ms=config["producer.id.expiration.ms"],
            replica_lag_time_max_ms=config["replica.lag.time.max.ms"],
            fetcher_settings=FetcherSettings(
                broker_id=self.broker_id,
                listener=config.inter_broker_listener,
                wait_max_ms=config["replica.fetch.wait.max.ms"],
                min_bytes=config["replica.fetch.min.bytes"],
                max_bytes=config["replica.fetch.response.max.bytes"],
                partition_max_bytes=config["replica.fetch.max.bytes"],
                backoff_ms=config["replica.fetch.backoff.ms"],
                socket_timeout_ms=config["replica.socket.timeout.ms"],
                security=inter_broker_security(config),
            ),
        )
        self.controller = Controller(
            self.broker_id, self.cache, self.store, self.zk, config, lambda: self.liveness.unreachable
        )
        self.group_coordination = GroupCoordination(
            self.broker_id,
            config,
            self.cache,
            self.store,
            self.zk,
            self.replicas,
            lambda: self.liveness.unreachable,
        )
        # Handlers reach the group coordinator here (membership, offsets).
        self.group_coordinator = self.group_coordination.coordinator
        self.liveness = Liveness(
            self.broker_id,
            lambda node: self.cache.endpoint(node, config.inter_broker_listener),
            self._liveness_changed,
            interval_ms=config["broker.liveness.probe.interval.ms"],
            timeout_ms=config["broker.liveness.timeout.ms"],
            security=inter_broker_security(config),
        )
        self._shutdown_watch: Watch | None = None
        self.authorizer = Authorizer.from_config(config.values)
        self._acl_watches: list[Watch] = []
        self.connection_limits = ConnectionLimits(config.values)
        budget = config["queued.max.request.bytes"]
        self.request_memory = RequestMemory(budget) if budget >= 0 else None
        self.quotas = QuotaManager(config.values)
        self.fetch_sessions = FetchSessionCache(
            config["max.incremental.fetch.session.cache.slots"],
            config["min.incremental.fetch.session.eviction.ms"],
        )
        self.listeners: list[Listener] = []
        self.sync: MetadataSync | None = None
        self._config_watch: Watch | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.metadata_generation = 0
        self.stopped = asyncio.Event()
        # Set when the broker must stop on its own (its ZooKeeper holds another cluster); `failure` says why.
        self.failed = asyncio.Event()
        self.failure: Exception | None = None
        self.metrics: BrokerMetrics | None = BrokerMetrics(self) if config["metrics.port"] else None
        # Admin handlers answer once this broker's cache shows their change; this wakes them.
        self.metadata_waiter = MetadataWaiter()
        register_all(self)
        if self.authorizer.enabled:
            guard_apis(self.api_table, self.authorizer)

    async def _write_partition_state(
        self, topic: str, partition: int, state: PartitionState, expected_version: int
    ) -> int:
        return await self.zk(self.store.set_partition_state, topic, partition, state, expected_version)

    async def zk(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking ZooKeeper call off the event loop."""
        return await asyncio.to_thread(function, *args, **kwargs)

    async def _scram_credentials(self, user: str) -> dict[str, ScramCredential]:
        return await self.zk(self.store.scram_credentials, user)

    # -- lifecycle ------------------------------------------------------------------------------------

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        await asyncio.to_thread(self.log_manager.lock_dirs)
        await asyncio.to_thread(self.store.start)
        self.cache.cluster_id = await self._check_cluster_id()
        self.store.add_session_listener(lambda event: self._session_event(loop, event))
        # Before the logs open, so they open with the dynamic log defaults.
        await self._load_broker_configs()
        await asyncio.to_thread(self.log_manager.startup)
        sender = FileRegionSender(self.config["fetch.sendfile.threshold.bytes"])
        for endpoint in self.config.listeners:
            listener = Listener(
                endpoint, self.api_table, sender, max_request_bytes=self.config["socket.request.max.bytes"]
            )
            secure_listener(listener, self.config, self._scram_credentials)
            listener.limits = self.connection_limits
            listener.memory = self.request_memory
            listener.quotas = self.quotas
            await listener.start()
            listener.metrics = self.metrics
            self.listeners.append(listener)
        if self.metrics is not None:
            self.metrics.serve(self.config["metrics.port"], self.config.listeners[0].host)
        self.sync = MetadataSync(self.store, self.cache, loop)
        # The group coordination follows offsets-partition leadership once the replica manager has applied it.
        self.sync.listeners = [
            self,
            self.replicas,
            self.controller,
            self.group_coordination,
            self.metadata_waiter,
        ]
        self.replicas.write_state = self._write_partition_state
        self.replicas.may_join_isr = self._may_join_isr
        self.replicas.apply_written_state = self.sync.apply_written_state
        await asyncio.to_thread(self.sync.start)
        await self._finish_deletions_missed()
        self._config_watch = await self.zk(self.store.watch_config_changes, self._config_changed_threadsafe)
        # Read after the watch is set, so no quota or broker config change falls between the two.
        self.quotas.book.replace(await self.zk(self.store.client_quotas))
        await self._load_broker_configs()
        await self._register()
        await self._clear_predecessor_state()
        self._shutdown_watch = await self.zk(
            self.store.watch_controlled_shutdowns, self._shutdowns_threadsafe
        )
        if self.authorizer.enabled:
            self._acl_watches = await keep_loaded(self.authorizer, self.store)
        # Clients are served only now: an earlier Metadata answer would list no brokers, not even this one.
        for listener in self.listeners:
            await listener.start_serving()
        self.controller.start()
        self._tasks = [
            loop.create_task(
                self._every(self.config["log.retention.check.interval.ms"] / 1000, self._retention)
            ),
            loop.create_task(self._every(1.0, self._flush)),
            loop.create_task(
                self._every(min(max(self.connection_limits.idle_s / 4, 0.05), 30), self._close_idle)
            ),
            # Checked at half the lag time so a follower leaves the ISR within 1.5x replica.lag.time.max.ms.
            loop.create_task(self._every(self.config["replica.lag.time.max.ms"] / 2000, self._check_isr_lag)),
            loop.create_task(self._every(PRODUCER_SNAPSHOT_INTERVAL_S, self._producer_housekeeping)),
            loop.create_task(
                self._every(
                    self.config["offsets.retention.check.interval.ms"] / 1000,
                    self.group_coordination.expire_offsets,
                )
            ),
        ]
        if self.config["log.cleaner.enable"]:
            self._tasks.append(loop.create_task(self._run_cleaner()))
        log.info(
            "event=broker_started broker_id=%d cluster_id=%s listeners=%s seconds=%.2f",
            self.broker_id,
            self.cache.cluster_id,
            ",".join(f"{x.name}://{x.endpoint.host}:{x.port}" for x in self.listeners),
            time.monotonic() - started,
        )

    async def _check_cluster_id(self) -> str:
        """The cluster id, checked against the log directories' meta.properties and recorded there, as Kafka
        does: a broker whose ZooKeeper holds another cluster refuses to start (InconsistentClusterIdError)."""
        identity = LogDirIdentity(self.config.log_dirs, self.broker_id)
        stored = await asyncio.to_thread(identity.stored_cluster_id)
        found = await self.zk(self.store.get_cluster_id)
        identity.check(found, stored)
        cluster_id = found if found else await self.zk(self.store.get_or_create_cluster_id)
        await asyncio.to_thread(identity.record, cluster_id)
        self.store.cluster_id = cluster_id
        return cluster_id

    def _session_event(self, loop: asyncio.AbstractEventLoop, event: SessionEvent) -> None:
        if event is SessionEvent.WRONG_CLUSTER:
            failure = InconsistentClusterIdError(
                f"ZooKeeper at {self.config['zookeeper.connect']} now holds another cluster than "
                f"{self.cache.cluster_id}; the broker stops rather than join it."
            )
            loop.call_soon_threadsafe(self._fail, failure)

    def _fail(self, failure: Exception) -> None:
        self.failure = failure
        self.failed.set()

    async def _register(self) -> None:
        """Register in ZooKeeper; after a crash, take over the dead process's registration (same endpoints)
        or wait for its session to expire."""
        timeout_s = self.config["zookeeper.session.timeout.ms"] / 1000 * 2 + 5
        deadline = time.monotonic() + timeout_s
        warned = False
        while True:
            try:
                await self.zk(self.store.register_broker, self._registration())
                return
            except BrokerAlreadyRegisteredError:
                pass
            try:
                # Our listeners are bound: a registration advertising the same addresses is a dead process's.
                await self.zk(self.store.replace_stale_registration, self._registration())
                return
            except BrokerAlreadyRegisteredError:
                if time.monotonic() >= deadline:
                    raise
                if not warned:
                    warned = True
                    log.warning(
                        "event=waiting_for_old_session broker_id=%d reason='broker id still registered by "
                        "an earlier session (a crashed process?); it expires within the session timeout'",
                        self.broker_id,
                    )
                await asyncio.sleep(0.5)

    def _registration(self) -> BrokerRegistration:
        ports = {listener.name: listener.port for listener in self.listeners}
        endpoints = tuple(
            # An advertised port of 0 means "whatever the listener was given" (tests bind port 0).
            EndPoint(e.listener, e.host, e.port or ports[e.listener], e.security_protocol)
            for e in self.config.advertised_listeners
        )
        return BrokerRegistration(self.broker_id, endpoints, rack=self.config["broker.rack"])

    async def _clear_predecessor_state(self) -> None:
        """A crashed predecessor of this broker (same id, same log dirs, which we now hold) may have left a
        controller node or a controlled-shutdown request behind, live until its session expires."""
        await self.zk(self.store.clear_controlled_shutdown, self.broker_id)
        if self.cache.controller_id == self.broker_id and not self.controller.active:
            await self.zk(self.store.remove_controller, self.broker_id)

    async def stop(self) -> None:
        log.info("event=broker_stopping broker_id=%d", self.broker_id)
        if self.config["controlled.shutdown.enable"] and self.store.registered_broker is not None:
            await self._controlled_shutdown()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.liveness.stop()
        await self.group_coordination.stop()  # pending joins and syncs answer NOT_COORDINATOR
        if self._shutdown_watch is not None:
            self._shutdown_watch.cancel()
        for watch in self._acl_watches:
            watch.cancel()
        if await self.controller.stop():
            await self._bounded_zk("resign as controller", self.store.resign_controller)
        log.debug("event=shutdown_step step=listeners")
        for listener in self.listeners:
            await listener.stop()
        if self._config_watch is not None:
            self._config_watch.cancel()
        if self.sync is not None:
            self.sync.close()
        log.debug("event=shutdown_step step=replication")
        await self.replicas.stop_replication()
        for partition in self.replicas.partitions.values():
            partition.wake_waiters(answer_now=True)  # long-polls answer, on the loop, before storage closes
        await self._bounded_zk("unregister", self.store.unregister_broker)
        # Storage closes cleanly whatever ZooKeeper does: snapshots, clean-shutdown markers.
        log.debug("event=shutdown_step step=storage")
        await asyncio.to_thread(self.replicas.shutdown)
        await asyncio.to_thread(self.log_manager.shutdown)
        # Closing the session also ends any ZooKeeper call still retrying above.
        await self._bounded_zk("close the ZooKeeper session", self.store.close)
        self.stopped.set()
        log.info("event=broker_stopped broker_id=%d", self.broker_id)

    async def _bounded_zk(self, what: str, function: Callable[[], object]) -> None:
        """A shutdown step that needs ZooKeeper: skipped with a warning when ZooKeeper does not answer."""
        try:
            await asyncio.wait_for(self.zk(function), SHUTDOWN_ZK_TIMEOUT_S)
        except (TimeoutError, KafkaError, CoordinationError) as exc:
            log.warning("event=shutdown_step_skipped step=%r error=%r", what, str(exc) or "timed out")

    async def _controlled_shutdown(self) -> None:
        """Ask the controller to move leadership off this broker, and wait (bounded) until it has."""
        started = time.monotonic()
        config = self.config
        patience_s = (config["controlled.shutdown.max.retries"] + 1) * config[
            "controlled.shutdown.retry.backoff.ms"
        ]
        deadline = started + patience_s / 1000
        try:
            await asyncio.wait_for(
                self.zk(self.store.announce_controlled_shutdown, self.broker_id), SHUTDOWN_ZK_TIMEOUT_S
            )
        except (TimeoutError, KafkaError, CoordinationError) as exc:
            log.warning("event=controlled_shutdown_skipped error=%r", str(exc) or "timed out")
            return
        while (movable := self._movable_leaderships()) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        log.info(
            "event=controlled_shutdown broker_id=%d seconds=%.2f still_leading=%d",
            self.broker_id,
            time.monotonic() - started,
            len(movable),
        )

    def _movable_leaderships(self) -> list[tuple[str, int]]:
        """Partitions this broker leads that another live in-sync replica could lead instead."""
        others = set(self.cache.brokers) - self.liveness.unreachable - {self.broker_id}
        return [
            key
            for key, partition in self.replicas.partitions.items()
            if partition.is_leader and any(r in others for r in partition.isr)
        ]

    # -- metadata events ------------------------------------------------------------------------------

    def on_brokers_changed(self, previous: set[int], current: set[int]) -> None:
        self.metadata_generation += 1
        self.liveness.track({b: r.epoch for b, r in self.cache.brokers.items()})

    def _may_join_isr(self, broker_id: int) -> bool:
        """As the controller judges (KIP-841): registered, reachable and not in controlled shutdown."""
        return (
            broker_id in self.cache.brokers
            and broker_id not in self.liveness.unreachable
            and broker_id not in self.controller.shutting_down
        )

    def _liveness_changed(self, broker_id: int, reachable: bool) -> None:
        self.metadata_generation += 1  # offline replicas in Metadata answers change
        self.controller.mark_dirty()
        if not reachable and broker_id == self.cache.controller_id:
            # Elect a new controller now rather than when the dead one's session expires.
            asyncio.get_running_loop().create_task(self._remove_dead_controller(broker_id))

    async def _remove_dead_controller(self, broker_id: int) -> None:
        try:
            await self.zk(self.store.remove_controller, broker_id)
        except (KafkaError, CoordinationError) as exc:
            log.warning("event=controller_removal_failed controller=%d error=%r", broker_id, str(exc))

    def _shutdowns_threadsafe(self, brokers: set[int]) -> None:
        loop = self.sync.loop if self.sync is not None else None
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._shutdowns_changed, brokers)

    def _shutdowns_changed(self, brokers: set[int]) -> None:
        if brokers != self.controller.shutting_down:
            log.info("event=controlled_shutdowns brokers=%s", sorted(brokers))
        self.controller.shutting_down = set(brokers)
        self.controller.mark_dirty()

    def on_partition_state(self, topic: str, partition: int) -> None:
        self.metadata_generation += 1

    def on_topic_deleted(self, topic: str) -> None:
        self.metadata_generation += 1
        # Runs after every listener has seen the deletion, so the replica manager has deleted the logs.
        asyncio.get_running_loop().create_task(self._replica_data_deleted(topic))

    async def _finish_deletions_missed(self) -> None:
        """Topics deleted while this broker was down: delete their logs here and say so, or the names
        stay marked for deletion."""
        for topic in await self.zk(self.store.topics_marked_for_deletion):
            if await self.zk(self.store.topic_exists, topic):
                continue  # queued, not deleted yet
            for key in [k for k in self.log_manager.logs() if k[0] == topic]:
                await asyncio.to_thread(self.log_manager.delete_log, *key)
            await self._replica_data_deleted(topic)

    async def _replica_data_deleted(self, topic: str) -> None:
        try:
            await self.zk(self.store.replica_data_deleted, topic, self.broker_id)
        except (KafkaError, CoordinationError) as exc:
            log.warning("event=topic_deletion_ack_failed topic=%s error=%r", topic, str(exc))

    def on_controller_changed(self, controller_id: int) -> None:
        self.metadata_generation += 1

    def on_topic_changed(self, topic: str) -> None:
        self.metadata_generation += 1
        if topic not in self.replicas.topic_configs:  # MetadataSync could not read it before the assignment
            asyncio.get_running_loop().create_task(self._load_topic_config(topic))

    async def _load_topic_config(self, topic: str) -> None:
        try:
            overrides = await self.zk(self.store.get_topic_config, topic)
        except (KafkaError, CoordinationError) as exc:
            log.warning("event=topic_config_unreadable topic=%s error=%r", topic, str(exc))
            return
        if topic in self.cache.topics:
            self.replicas.apply_topic_config(topic, overrides)

    async def _load_broker_configs(self) -> None:
        """Read the dynamic broker configs (cluster-wide defaults and this broker's) and apply them: the
        effective values in `config`, the log defaults to every log."""
        try:
            defaults = await self.zk(self.store.get_broker_config, None)
            mine = await self.zk(self.store.get_broker_config, self.broker_id)
        except (KafkaError, CoordinationError) as exc:
            log.warning("event=broker_config_unreadable error=%r", str(exc))
            return
        apply_dynamic(self.config, defaults, mine)
        self.replicas.apply_log_defaults(self.config.log)
        log.info(
            "event=broker_config_applied defaults=%s broker=%s",
            ",".join(sorted(self.config.dynamic_defaults)) or "-",
            ",".join(sorted(self.config.dynamic_broker)) or "-",
        )

    def _config_changed_threadsafe(self, change: ConfigChange) -> None:
        loop = self.sync.loop if self.sync is not None else None
        if loop is None or loop.is_closed():
            return
        if change.entity_type == "topics":
            loop.call_soon_threadsafe(lambda: loop.create_task(self._load_topic_config(change.entity_name)))
            return
        mine = (paths.broker_config_name(None), paths.broker_config_name(self.broker_id))
        if change.entity_type == "brokers" and change.entity_name in mine:
            loop.call_soon_threadsafe(lambda: loop.create_task(self._load_broker_configs()))
            return
        entity = parse_entity_node(f"{change.entity_type}/{change.entity_name}")
        if entity is not None:
            # Read here, on the watch's thread; the book changes on the loop.
            try:
                values = self.store.client_quota(entity)
            except CoordinationError as exc:
                log.warning("event=client_quota_unreadable entity=%s error=%r", entity, str(exc))
                return
            loop.call_soon_threadsafe(self.quotas.book.update, entity, values)
            log.info("event=client_quota_changed entity=%s values=%s", entity, values)

    # -- housekeeping ---------------------------------------------------------------------------------

    async def _every(self, interval_s: float, action: Callable[[], Any]) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await action()
            except Exception:
                log.exception("event=housekeeping_failed action=%s", getattr(action, "__name__", action))

    async def _retention(self) -> None:
        deleted = await asyncio.to_thread(self.log_manager.run_retention)
        if deleted:
            log.info("event=retention segments_deleted=%d", deleted)

    async def _run_cleaner(self) -> None:
        """Clean logs back to back while there is work, and pause log.cleaner.backoff.ms only after a pass
        that found none, as Kafka's cleaner threads do: a log filling faster than one pass cleans is
        compacted soon after its last write, not a backoff after each pass."""
        while True:
            # Read at each pause: it is a dynamic broker config.
            await asyncio.sleep(self.config["log.cleaner.backoff.ms"] / 1000)
            try:
                while await asyncio.to_thread(self.log_manager.run_cleaner):
                    pass
            except Exception:
                log.exception("event=housekeeping_failed action=clean_logs")

    async def _close_idle(self) -> None:
        self.connection_limits.close_idle(self.listeners)

    async def _flush(self) -> None:
        started = time.monotonic()
        await asyncio.to_thread(self.log_manager.run_flush)
        if self.metrics is not None:
            self.metrics.log_flush.observe(time.monotonic() - started)

    async def _check_isr_lag(self) -> None:
        self.replicas.check_isr_lag()

    async def _producer_housekeeping(self) -> None:
        self.replicas.expire_producers()
        for partition in list(self.replicas.partitions.values()):
            await asyncio.to_thread(partition.take_producer_snapshot)


async def run_broker(config: BrokerConfig, ready: Callable[[Broker], None] | None = None) -> None:
    """Run a broker until SIGTERM or SIGINT, then shut it down cleanly."""
    broker = Broker(config)
    stop = stop_on_signals()
    try:
        await broker.start()
        if ready is not None:
            ready(broker)
        signalled = asyncio.ensure_future(stop.wait())
        failed = asyncio.ensure_future(broker.failed.wait())
        await asyncio.wait((signalled, failed), return_when=asyncio.FIRST_COMPLETED)
        signalled.cancel()
        failed.cancel()
    finally:
        await broker.stop()
    if broker.failure is not None:
        raise broker.failure
