"""Cluster id, broker registration and membership, controller election, producer id blocks."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from backbone.coordination import paths
from backbone.coordination.errors import (
    BrokerAlreadyRegisteredError,
    CoordinationError,
    VersionConflictError,
)
from backbone.coordination.session import (
    SessionEvent,
    StoreSession,
    Watch,
    transaction_failure,
    translate_errors,
    zk_errors,
)
from backbone.coordination.znodes import (
    BrokerRegistration,
    ClusterId,
    ControllerInfo,
    ProducerIdBlock,
    decode_controller_epoch,
    encode_controller_epoch,
    new_kafka_uuid,
    now_ms,
)
from backbone.protocol.errors import KafkaError

__all__ = ["BrokerOps", "ControllerEpoch"]

log = logging.getLogger(__name__)

T = TypeVar("T")

# Optimistic read-modify-write loops give up after this many lost races (each race means another
# writer made progress, so a livelock needs that many writers in a row).
MAX_RACES = 10
INITIAL_CONTROLLER_EPOCH = 0
MAX_PRODUCER_ID = 2**63 - 1


@dataclass(frozen=True)
class ControllerEpoch:
    """The controller epoch and the /controller_epoch znode version that fences writes made under it."""

    epoch: int
    zk_version: int


class BrokerOps(StoreSession):
    """What a broker does about itself and the controller."""

    def __init__(self, connect: str, **options: float) -> None:
        super().__init__(connect, **options)
        self._registration: BrokerRegistration | None = None
        self._registration_pending = False
        self._registration_lock = threading.Lock()
        # The cluster this broker belongs to, once known: a new session re-registers only where /cluster/id
        # still names it (a new ZooKeeper on the same address may serve another cluster).
        self.cluster_id: str | None = None

    # -- cluster id ------------------------------------------------------------------------------

    @translate_errors("read the cluster id")
    def get_cluster_id(self) -> str | None:
        found = self._get_or_none(paths.CLUSTER_ID)
        return ClusterId.decode(found[0]).id if found else None

    @translate_errors("create the cluster id")
    def get_or_create_cluster_id(self, proposed: str | None = None) -> str:
        """The cluster's id, creating it (`proposed` or a new Kafka uuid) the first time."""
        return self._read_or_create(
            paths.CLUSTER_ID, lambda: ClusterId(proposed or new_kafka_uuid()).encode(), self.get_cluster_id
        )

    def _read_or_create(self, path: str, initial: Callable[[], bytes], read: Callable[[], T | None]) -> T:
        """`read()`, creating `path` with `initial()` first if it is missing; the first creator wins."""
        existing = read()
        if existing is not None:
            return existing
        try:
            self._client.create(path, initial(), makepath=True)
        except NodeExistsError:
            log.debug("event=znode_created_concurrently path=%s", path)
        created = read()
        if created is None:
            raise CoordinationError(f"{path} vanished right after it was created")
        return created

    # -- registration ----------------------------------------------------------------------------

    @translate_errors("register the broker")
    def register_broker(self, registration: BrokerRegistration) -> BrokerRegistration:
        """Create the ephemeral /brokers/ids/<id>; the store re-creates it after a session expiry.

        Returns the registration with `epoch` set (the node's czxid, Kafka's broker epoch).
        Raises BrokerAlreadyRegisteredError when another live session holds the id.
        """
        with self._registration_lock:
            registered = self._create_registration(registration)
            self._registration = registered
            self._registration_pending = False
        log.info(
            "event=broker_registered broker_id=%d epoch=%d endpoints=%s rack=%s",
            registered.broker_id,
            registered.epoch,
            ",".join(e.connection_string() for e in registered.endpoints),
            registered.rack,
        )
        return registered

    @translate_errors("replace a stale broker registration")
    def replace_stale_registration(self, registration: BrokerRegistration) -> BrokerRegistration:
        """Take over /brokers/ids/<id> from a dead process whose session has not expired yet.

        Only when the node advertises exactly our endpoints: the caller has bound those very addresses, so
        nothing alive listens there any more (a crashed predecessor of this broker). Without this, a broker
        restarted after kill -9 waits a whole session timeout. Raises BrokerAlreadyRegisteredError otherwise.
        """
        path = paths.broker_path(registration.broker_id)
        found = self._get_or_none(path)
        if found is not None:
            existing = BrokerRegistration.decode(registration.broker_id, found[0])
            if found[1].ephemeralOwner == self.session_id or existing.endpoints != registration.endpoints:
                raise BrokerAlreadyRegisteredError(registration.broker_id)
            try:
                self._client.delete(path, version=found[1].version)
            except (NoNodeError, BadVersionError):
                log.debug("event=stale_broker_node_changed broker_id=%d", registration.broker_id)
            log.warning(
                "event=stale_broker_registration_replaced broker_id=%d old_epoch=%d",
                registration.broker_id,
                found[1].czxid,
            )
        return self.register_broker(registration)

    def _create_registration(self, registration: BrokerRegistration) -> BrokerRegistration:
        path = paths.broker_path(registration.broker_id)
        try:
            stat = self._create_ephemeral_checked(path, registration.encode())
        except NodeExistsError as error:
            raise BrokerAlreadyRegisteredError(registration.broker_id) from error
        return dataclasses.replace(registration, epoch=stat.czxid)

    @property
    def registered_broker(self) -> BrokerRegistration | None:
        """This store's broker registration as last written (None before register / after unregister)."""
        return self._registration

    @property
    def registration_pending(self) -> bool:
        """True while a re-registration after session expiry has not yet succeeded."""
        return self._registration_pending

    @translate_errors("unregister the broker")
    def unregister_broker(self) -> None:
        """Delete our broker node (only if this session owns it) and stop re-registering."""
        with self._registration_lock:
            registration, self._registration = self._registration, None
            self._registration_pending = False
        if registration is None:
            return
        path = paths.broker_path(registration.broker_id)
        found = self._get_or_none(path)
        if found is not None and found[1].ephemeralOwner == self.session_id:
            try:
                self._client.delete(path, version=found[1].version)
            except NoNodeError:
                log.debug("event=broker_node_already_gone broker_id=%d", registration.broker_id)
        log.info("event=broker_unregistered broker_id=%d", registration.broker_id)

    def _after_session_event(self, event: SessionEvent) -> SessionEvent:
        if event is SessionEvent.EXPIRED:
            with self._registration_lock:
                self._registration_pending = self._registration is not None
            return event
        if event not in (SessionEvent.NEW_SESSION, SessionEvent.RECONNECTED):
            return event
        with self._registration_lock:
            registration = self._registration
            if registration is None or not self._registration_pending:
                return event
            try:
                with zk_errors("re-register the broker"):
                    found = self.get_cluster_id()
                    if self.cluster_id is not None and found != self.cluster_id:
                        log.error(
                            "event=inconsistent_cluster_id broker_id=%d cluster_id=%s "
                            "zookeeper_cluster_id=%s connect=%s "
                            "reason='ZooKeeper holds another cluster; the broker does not register'",
                            registration.broker_id,
                            self.cluster_id,
                            found,
                            self.connect_string,
                        )
                        self._registration, self._registration_pending = None, False
                        return SessionEvent.WRONG_CLUSTER
                    fresh = dataclasses.replace(registration, timestamp_ms=now_ms())
                    registered = self._create_registration(fresh)
            except (CoordinationError, KafkaError):
                # Stays pending: the next RECONNECTED or NEW_SESSION tries again.
                log.exception("event=broker_reregistration_failed broker_id=%d", registration.broker_id)
                return SessionEvent.REGISTRATION_FAILED
            self._registration = registered
            self._registration_pending = False
        log.info("event=broker_reregistered broker_id=%d epoch=%d", registered.broker_id, registered.epoch)
        return event

    # -- membership ------------------------------------------------------------------------------

    @translate_errors("read a broker registration")
    def get_broker(self, broker_id: int) -> BrokerRegistration | None:
        found = self._get_or_none(paths.broker_path(broker_id))
        return BrokerRegistration.decode(broker_id, found[0], epoch=found[1].czxid) if found else None

    @translate_errors("list brokers")
    def broker_ids(self) -> list[int]:
        return sorted(int(name) for name in self._children(paths.BROKER_IDS))

    @translate_errors("list brokers")
    def list_brokers(self) -> list[BrokerRegistration]:
        """Live brokers in id order, with endpoints, racks and epochs."""
        return self._read_brokers(self._children(paths.BROKER_IDS))

    def _read_brokers(self, names: list[str]) -> list[BrokerRegistration]:
        brokers = []
        for broker_id in sorted(int(name) for name in names):
            broker = self.get_broker(broker_id)
            if broker is not None:  # None: it left between listing and reading
                brokers.append(broker)
        return brokers

    def watch_brokers(self, callback: Callable[[list[BrokerRegistration]], None]) -> Watch:
        """Call `callback(live brokers)` now and whenever a broker joins or leaves."""
        return self._watch_children(
            paths.BROKER_IDS, lambda names: callback(self._read_brokers(names)), "broker membership"
        )

    # -- controller ------------------------------------------------------------------------------

    @translate_errors("read the controller")
    def get_controller(self) -> ControllerInfo | None:
        found = self._get_or_none(paths.CONTROLLER)
        return ControllerInfo.decode(found[0]) if found else None

    @translate_errors("read the controller epoch")
    def get_controller_epoch(self) -> ControllerEpoch | None:
        found = self._get_or_none(paths.CONTROLLER_EPOCH)
        return ControllerEpoch(decode_controller_epoch(found[0]), found[1].version) if found else None

    def _controller_epoch_or_initial(self) -> ControllerEpoch:
        return self._read_or_create(
            paths.CONTROLLER_EPOCH,
            lambda: encode_controller_epoch(INITIAL_CONTROLLER_EPOCH),
            self.get_controller_epoch,
        )

    @translate_errors("elect the controller")
    def try_become_controller(self, broker_id: int) -> ControllerEpoch | None:
        """Atomically create /controller for `broker_id` and bump /controller_epoch (as Kafka 2.2+).

        Returns the new epoch when this broker won, None when another broker is the controller.
        """
        for _ in range(MAX_RACES):
            current = self._controller_epoch_or_initial()
            transaction = self._client.transaction()
            transaction.create(paths.CONTROLLER, ControllerInfo(broker_id).encode(), ephemeral=True)
            transaction.set_data(
                paths.CONTROLLER_EPOCH, encode_controller_epoch(current.epoch + 1), version=current.zk_version
            )
            results = transaction.commit()
            failure = transaction_failure(results)
            if failure is None:
                elected = ControllerEpoch(current.epoch + 1, results[1].version)
                log.info("event=controller_elected broker_id=%d epoch=%d", broker_id, elected.epoch)
                return elected
            index, error = failure
            if index == 0 and isinstance(error, NodeExistsError):
                found = self._get_or_none(paths.CONTROLLER)
                if found is None:
                    continue  # the controller just left; run again
                if found[1].ephemeralOwner == self.session_id:
                    return self.get_controller_epoch()  # we won earlier and lost the answer
                return None
            if index == 1 and isinstance(error, BadVersionError):
                continue  # the epoch moved under us; read it again
            raise error
        raise CoordinationError(f"controller election kept losing races {MAX_RACES} times; retry later")

    @translate_errors("remove a dead controller")
    def remove_controller(self, broker_id: int) -> bool:
        """Delete /controller if it still names `broker_id`: its process is known dead (its listener refuses
        connections, or it is this broker's own crashed predecessor), so nobody need wait for its session to
        expire. Safe: a controller that was in fact alive loses /controller, and the controller epoch bumped
        by the next election fences its writes. Returns whether the node was deleted."""
        found = self._get_or_none(paths.CONTROLLER)
        if found is None or ControllerInfo.decode(found[0]).broker_id != broker_id:
            return False
        if found[1].ephemeralOwner == self.session_id:
            return False  # this session is the controller: resign_controller is the way out
        try:
            self._client.delete(paths.CONTROLLER, version=found[1].version)
        except (NoNodeError, BadVersionError):
            return False
        log.warning("event=unreachable_controller_node_removed broker_id=%d", broker_id)
        return True

    # -- controlled shutdown -----------------------------------------------------------------------

    @translate_errors("announce a controlled shutdown")
    def announce_controlled_shutdown(self, broker_id: int) -> None:
        """Ask the controller to move leadership off `broker_id` (an ephemeral node of this session)."""
        path = paths.controlled_shutdown_path(broker_id)
        self._client.ensure_path(paths.CONTROLLED_SHUTDOWN)
        try:
            self._client.create(path, b"", ephemeral=True)
        except NodeExistsError:
            log.debug("event=controlled_shutdown_already_announced broker_id=%d", broker_id)

    @translate_errors("clear a controlled shutdown")
    def clear_controlled_shutdown(self, broker_id: int) -> None:
        """Remove a controlled-shutdown announcement (a crashed predecessor's, at start-up)."""
        with contextlib.suppress(NoNodeError):
            self._client.delete(paths.controlled_shutdown_path(broker_id))

    @translate_errors("watch controlled shutdowns")
    def watch_controlled_shutdowns(self, callback: Callable[[set[int]], None]) -> Watch:
        """Call `callback(ids of brokers in controlled shutdown)` now and on every change."""
        self._client.ensure_path(paths.CONTROLLED_SHUTDOWN)
        return self._watch_children(
            paths.CONTROLLED_SHUTDOWN,
            lambda names: callback({int(n) for n in names if n.isdigit()}),
            "controlled shutdowns",
        )

    @translate_errors("increment the controller epoch")
    def increment_controller_epoch(self, expected_zk_version: int) -> ControllerEpoch:
        """Bump /controller_epoch if it is still at `expected_zk_version` (else VersionConflictError)."""
        current = self._controller_epoch_or_initial()
        if current.zk_version != expected_zk_version:
            raise VersionConflictError(paths.CONTROLLER_EPOCH, expected_zk_version)
        try:
            stat = self._client.set(
                paths.CONTROLLER_EPOCH,
                encode_controller_epoch(current.epoch + 1),
                version=expected_zk_version,
            )
        except BadVersionError as error:
            raise VersionConflictError(paths.CONTROLLER_EPOCH, expected_zk_version) from error
        return ControllerEpoch(current.epoch + 1, stat.version)

    @translate_errors("resign as controller")
    def resign_controller(self) -> bool:
        """Delete /controller if this session holds it; True when it did."""
        found = self._get_or_none(paths.CONTROLLER)
        if found is None or found[1].ephemeralOwner != self.session_id:
            return False
        try:
            self._client.delete(paths.CONTROLLER, version=found[1].version)
        except (NoNodeError, BadVersionError):
            return False  # gone or replaced already: in either case we no longer hold it
        log.info("event=controller_resigned broker_id=%d", ControllerInfo.decode(found[0]).broker_id)
        return True

    def watch_controller(self, callback: Callable[[ControllerInfo | None], None]) -> Watch:
        """Call `callback(current controller or None)` now and whenever /controller changes."""

        def on_change(data: bytes | None, stat: object) -> None:
            callback(ControllerInfo.decode(data) if stat is not None else None)

        return self._watch_data(paths.CONTROLLER, on_change, "controller")

    # -- producer ids ----------------------------------------------------------------------------

    @translate_errors("allocate producer ids")
    def allocate_producer_id_block(self, broker_id: int, size: int = 1000) -> ProducerIdBlock:
        """Claim the next `size` producer ids for `broker_id` (Kafka's ZkProducerIdManager)."""
        if size <= 0:
            raise ValueError(f"producer id block size must be positive, got {size}")
        for _ in range(MAX_RACES):
            data, stat = self._get(paths.PRODUCER_ID_BLOCK)
            first = ProducerIdBlock.decode(data).last + 1 if data else 0
            if first > MAX_PRODUCER_ID - size:
                raise CoordinationError("producer ids are exhausted: every 64-bit producer id was handed out")
            block = ProducerIdBlock(broker_id, first, first + size - 1)
            try:
                self._client.set(paths.PRODUCER_ID_BLOCK, block.encode(), version=stat.version)
            except BadVersionError:
                continue  # another broker took a block first
            return block
        raise CoordinationError(f"producer id allocation lost {MAX_RACES} races in a row; retry later")
