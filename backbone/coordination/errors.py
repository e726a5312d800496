"""Errors of the coordination room that have no Kafka error code of their own.

Where a Kafka error fits (an unknown topic, a bad replication factor...) the room raises the class from
`backbone.protocol.errors`. What is left is about ZooKeeper itself: it is unreachable, a write lost a
race, or the launcher cannot find the server. Kazoo's exceptions never leave the room.
"""

from __future__ import annotations

from backbone.protocol.errors import (
    DuplicateBrokerRegistrationError,
    InvalidUpdateVersionError,
    KafkaError,
)

__all__ = [
    "BrokerAlreadyRegisteredError",
    "CoordinationError",
    "CoordinationUnavailableError",
    "PortInUseError",
    "VersionConflictError",
    "ZooKeeperNotInstalledError",
    "ZooKeeperStartError",
]


class CoordinationError(Exception):
    """ZooKeeper refused or failed an operation and no Kafka error code describes it."""


class CoordinationUnavailableError(CoordinationError):
    """ZooKeeper cannot be reached (connection lost, session expired, request timed out).

    Retriable: the same call may succeed once the session is back.
    """

    retriable = True


class VersionConflictError(CoordinationError, InvalidUpdateVersionError):
    """A conditional update named a znode version that is no longer current.

    Someone else wrote the node since it was read; re-read it and decide again. It is also the Kafka
    error INVALID_UPDATE_VERSION, so a handler can return it as is.
    """

    def __init__(self, path: str, expected_version: int) -> None:
        self.path = path
        self.expected_version = expected_version
        KafkaError.__init__(
            self, f"{path} is no longer at version {expected_version}: re-read it and retry the update"
        )


class BrokerAlreadyRegisteredError(CoordinationError, DuplicateBrokerRegistrationError):
    """Another live session holds /brokers/ids/<id>: two brokers were given the same broker.id."""

    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id
        KafkaError.__init__(
            self,
            f"broker id {broker_id} is already registered by another live ZooKeeper session: "
            f"another broker runs with broker.id={broker_id}; give this one a different broker.id "
            "or stop the other one",
        )


class ZooKeeperNotInstalledError(CoordinationError):
    """Java or Debian's zookeeper package is missing; the message says what to install."""


class ZooKeeperStartError(CoordinationError):
    """The ZooKeeper server process exited or did not answer in time."""


class PortInUseError(ZooKeeperStartError):
    """The chosen client port is already bound by another process."""
