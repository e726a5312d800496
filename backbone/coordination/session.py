"""The ZooKeeper session under a ClusterStore: connection, chroot, error translation, session events, watches.

Kazoo calls state listeners on its connection thread, where no ZooKeeper call may block; watch callbacks
run on its callback thread. We move session work (re-registering the broker, telling listeners) to one
worker thread of our own, so it runs in order and may call the store.
"""

from __future__ import annotations

import enum
import functools
import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    RolledBackError,
    RuntimeInconsistency,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.watchers import ChildrenWatch, DataWatch
from kazoo.retry import KazooRetry

from backbone.coordination import paths
from backbone.coordination.errors import CoordinationError, CoordinationUnavailableError

__all__ = ["SessionEvent", "StoreSession", "Watch", "split_connect_string"]

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

_UNREACHABLE = (
    ConnectionLoss,
    SessionExpiredError,
    ConnectionClosedError,
    OperationTimeoutError,
    KazooTimeoutError,
)


class SessionEvent(enum.Enum):
    """What happened to the store's ZooKeeper session, as told to session listeners."""

    SUSPENDED = "suspended"  # connection lost; the session (and our ephemeral nodes) may still live
    RECONNECTED = "reconnected"  # the same session is back; nothing was lost
    EXPIRED = "expired"  # the session is gone: our ephemeral nodes (broker, controller) were deleted
    NEW_SESSION = "new_session"  # connected with a new session; the broker registration is back
    REGISTRATION_FAILED = "registration_failed"  # new session, but re-registering the broker failed
    WRONG_CLUSTER = "wrong_cluster"  # new session on a ZooKeeper holding another cluster: not registered


def split_connect_string(connect: str) -> tuple[str, str]:
    """`h1:2181,h2:2181/dc1` -> (`h1:2181,h2:2181`, `/dc1`); no chroot gives ``""``."""
    hosts, slash, chroot = connect.partition("/")
    if not hosts:
        raise CoordinationError(
            f"ZooKeeper connect string {connect!r} names no host (expected host:port[/chroot])"
        )
    if not slash:
        return hosts, ""
    chroot = "/" + chroot.strip("/")
    if chroot == "/":
        return hosts, ""
    if any(part in ("", ".", "..") for part in chroot.split("/")[1:]):
        raise CoordinationError(
            f"ZooKeeper chroot {chroot!r} in {connect!r} is not a normalized absolute path"
        )
    return hosts, chroot


def translate_errors(action: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorator: kazoo errors a method did not handle itself leave as CoordinationError."""

    def decorate(method: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(method)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            with zk_errors(action):
                return method(*args, **kwargs)

        return wrapper

    return decorate


@contextmanager
def zk_errors(action: str) -> Iterator[None]:
    try:
        yield
    except _UNREACHABLE as error:
        raise CoordinationUnavailableError(
            f"{action}: ZooKeeper is unreachable ({type(error).__name__}); retry once the session is back"
        ) from error
    except KazooException as error:
        raise CoordinationError(f"{action}: ZooKeeper answered {type(error).__name__} {error}") from error


def transaction_failure(results: list[Any]) -> tuple[int, Exception] | None:
    """The operation that made a ZooKeeper multi fail (index, error), or None when it committed.

    Operations before the culprit report RolledBackError, those after it RuntimeInconsistency.
    """
    for index, result in enumerate(results):
        if isinstance(result, Exception) and not isinstance(result, RolledBackError | RuntimeInconsistency):
            return index, result
    return None


class Watch:
    """A registered watch; `cancel()` stops callbacks (kazoo drops the watch at its next event)."""

    def __init__(self, description: str) -> None:
        self.description = description
        self._cancelled = threading.Event()

    def cancel(self) -> None:
        self._cancelled.set()

    @property
    def active(self) -> bool:
        return not self._cancelled.is_set()

    def __repr__(self) -> str:
        return f"Watch({self.description}, active={self.active})"


class StoreSession:
    """A kazoo client rooted at one cluster's chroot, with Backbone's error and session handling."""

    def __init__(
        self,
        connect: str,
        *,
        session_timeout: float = 18.0,  # Kafka's zookeeper.session.timeout.ms default
        connect_timeout: float = 15.0,
    ) -> None:
        self.connect_string = connect
        self.hosts, self.chroot = split_connect_string(connect)
        self.session_timeout = session_timeout
        self.connect_timeout = connect_timeout
        self._client = KazooClient(
            hosts=self.hosts + self.chroot,
            timeout=session_timeout,
            # Reconnect for as long as the store is open, backing off to one attempt every 2 s.
            connection_retry=KazooRetry(max_tries=-1, delay=0.05, backoff=2, max_delay=2.0),
            # Reads retry a few times over a dropped connection; writes are never retried blindly.
            command_retry=KazooRetry(max_tries=5, delay=0.05, backoff=2, max_delay=1.0),
        )
        self._listeners: list[Callable[[SessionEvent], None]] = []
        self._listeners_lock = threading.Lock()
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="zk-session")
        self._expired = False
        self._started = False
        self._closed = False
        self._client.add_listener(self._on_state)

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """Connect (creating the chroot and Kafka's persistent paths when missing)."""
        if self.chroot:
            self._ensure_chroot()
        self._connect(self._client)
        self._started = True
        with zk_errors("create ZooKeeper's persistent paths"):
            for path in paths.PERSISTENT_PATHS:
                self._client.ensure_path(path)
        log.info(
            "event=zookeeper_store_connected connect=%s session=0x%x",
            self.connect_string,
            self.session_id or 0,
        )

    def _connect(self, client: KazooClient) -> None:
        try:
            with zk_errors(f"connect to ZooKeeper at {self.hosts}"):
                client.start(timeout=self.connect_timeout)
        except CoordinationUnavailableError as error:
            raise CoordinationUnavailableError(
                f"could not connect to ZooKeeper at {self.hosts} within {self.connect_timeout:g}s: "
                "is it running? (`backbone zookeeper start` starts one)"
            ) from error

    def _ensure_chroot(self) -> None:
        # Kazoo cannot create its own chroot; a short root-level session does it once.
        root = KazooClient(hosts=self.hosts, timeout=self.session_timeout)
        self._connect(root)
        try:
            with zk_errors(f"create chroot {self.chroot}"):
                root.ensure_path(self.chroot)
        finally:
            root.stop()
            root.close()

    def close(self) -> None:
        """End the session (our ephemeral nodes go at once) and stop the worker thread."""
        if self._closed:
            return
        self._closed = True
        self._client.remove_listener(self._on_state)
        try:
            self._client.stop()
            self._client.close()
        finally:
            self._worker.shutdown(wait=True, cancel_futures=True)
        log.info("event=zookeeper_store_closed connect=%s", self.connect_string)

    def __enter__(self) -> StoreSession:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def connected(self) -> bool:
        return bool(self._client.connected)

    @property
    def session_id(self) -> int | None:
        client_id = self._client.client_id
        return int(client_id[0]) if client_id else None

    @property
    def session_credentials(self) -> tuple[int, bytes] | None:
        """(session id, password) while connected; what another client needs to join the session."""
        client_id = self._client.client_id
        return (int(client_id[0]), bytes(client_id[1])) if client_id else None

    # -- session events --------------------------------------------------------------------------

    def add_session_listener(self, listener: Callable[[SessionEvent], None]) -> None:
        """Call `listener(event)` on each session change, from the store's session thread, in order."""
        with self._listeners_lock:
            self._listeners.append(listener)

    def remove_session_listener(self, listener: Callable[[SessionEvent], None]) -> None:
        with self._listeners_lock:
            self._listeners.remove(listener)

    def _on_state(self, state: str) -> None:
        # Kazoo's connection thread: record and hand off, never block here.
        if not self._started or self._closed:
            return
        if state == KazooState.SUSPENDED:
            event = SessionEvent.SUSPENDED
        elif state == KazooState.LOST:
            self._expired = True
            event = SessionEvent.EXPIRED
        elif self._expired:
            self._expired = False
            event = SessionEvent.NEW_SESSION
        else:
            event = SessionEvent.RECONNECTED
        log.info(
            "event=zookeeper_session_state state=%s session_event=%s connect=%s",
            state,
            event.value,
            self.connect_string,
        )
        try:
            self._worker.submit(self._handle_session_event, event)
        except RuntimeError:  # close() shut the worker down between our check and the submit
            log.debug(
                "event=zookeeper_session_event_dropped session_event=%s reason=store_closed", event.value
            )

    def _handle_session_event(self, event: SessionEvent) -> None:
        final = self._after_session_event(event)
        with self._listeners_lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(final)
            except Exception:  # a listener's bug must not stop the others or this thread
                log.exception(
                    "event=zookeeper_session_listener_failed session_event=%s listener=%r",
                    final.value,
                    listener,
                )

    def _after_session_event(self, event: SessionEvent) -> SessionEvent:
        """Hook for subclasses (re-registration); returns the event listeners should see."""
        return event

    # -- reads -----------------------------------------------------------------------------------

    def _get(self, path: str) -> tuple[bytes, ZnodeStat]:
        data, stat = self._client.retry(self._client.get, path)
        return data, stat

    def _get_or_none(self, path: str) -> tuple[bytes, ZnodeStat] | None:
        try:
            return self._get(path)
        except NoNodeError:
            return None

    def _children(self, path: str) -> list[str]:
        return sorted(self._client.retry(self._client.get_children, path))

    def _exists(self, path: str) -> ZnodeStat | None:
        stat: ZnodeStat | None = self._client.retry(self._client.exists, path)
        return stat

    # -- writes ----------------------------------------------------------------------------------

    def _create_ephemeral_checked(self, path: str, data: bytes) -> ZnodeStat:
        """Create an ephemeral node; if it exists and this very session owns it, take it as created.

        That case arises when a create succeeded but its answer was lost with the connection.
        Raises NodeExistsError when another session owns the node.
        """
        try:
            _, stat = self._client.create(path, data, ephemeral=True, include_data=True)
            return stat
        except NodeExistsError:
            existing = self._exists(path)
            if existing is not None and existing.ephemeralOwner == self.session_id:
                return self._client.set(path, data)
            raise

    def _set_or_create(self, path: str, data: bytes) -> ZnodeStat:
        try:
            return self._client.set(path, data)
        except NoNodeError:
            _, stat = self._client.create(path, data, makepath=True, include_data=True)
            return stat

    # -- watches ---------------------------------------------------------------------------------

    def _watch_children(self, path: str, on_change: Callable[[list[str]], None], description: str) -> Watch:
        """Call `on_change(sorted children)` now and after every change of `path`'s children."""
        watch = Watch(description)

        def fire(children: list[str]) -> bool:
            if not watch.active:
                return False  # tells kazoo to drop this watch
            try:
                on_change(sorted(children))
            except Exception:  # a callback's bug must not end the watch or kazoo's event thread
                log.exception("event=zookeeper_watch_callback_failed watch=%s path=%s", description, path)
            return True

        with zk_errors(f"watch {description}"):
            ChildrenWatch(self._client, path, fire)
        return watch

    def _watch_data(
        self, path: str, on_change: Callable[[bytes | None, ZnodeStat | None], None], description: str
    ) -> Watch:
        """Call `on_change(data, stat)` now and after each change of `path` (None, None: no node)."""
        watch = Watch(description)

        # Kazoo retries a callback with two arguments when the three-argument call raises TypeError,
        # so this wrapper takes the event and never lets an exception out.
        def fire(data: bytes | None, stat: ZnodeStat | None, event: object = None) -> bool:
            if not watch.active:
                return False
            try:
                on_change(data, stat)
            except Exception:
                log.exception("event=zookeeper_watch_callback_failed watch=%s path=%s", description, path)
            return True

        with zk_errors(f"watch {description}"):
            DataWatch(self._client, path, fire)
        return watch
