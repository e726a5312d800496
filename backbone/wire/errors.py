"""The client's exceptions: Kafka's error codes (one class each, from the protocol room) plus client ones.

Every error a broker sends back is raised as the protocol room's class for that code
(`NotLeaderOrFollowerError`, `TopicAlreadyExistsError`, ...), all subclasses of `KafkaError`, so callers
catch them by name. Errors that happen in the client itself (nothing answered in time, no broker could be
reached, a bad setting) are the `KafkaClientError` subclasses below; each message says what to do.
"""

from __future__ import annotations

from backbone.protocol.errors import KafkaError, error_class, error_for

__all__ = [
    "BufferExhaustedError",
    "ClientClosedError",
    "CommitFailedError",
    "ConfigError",
    "IllegalStateError",
    "KafkaClientError",
    "KafkaConnectionError",
    "KafkaError",
    "KafkaTimeoutError",
    "NoBrokersAvailable",
    "error_class",
    "error_for",
    "is_retriable",
]


class KafkaClientError(Exception):
    """An error raised by the client itself rather than sent by a broker."""

    retriable = False


class KafkaTimeoutError(KafkaClientError, TimeoutError):
    """An operation did not finish within its configured time (the message names the setting)."""

    retriable = True


class BufferExhaustedError(KafkaTimeoutError):
    """`send` waited `max.block.ms` for room in `buffer.memory` and found none."""


class KafkaConnectionError(KafkaClientError, ConnectionError):
    """A broker connection failed or was lost; requests on it may be retried on a new one."""

    retriable = True


class NoBrokersAvailable(KafkaClientError):
    """None of the bootstrap servers (or known brokers) could be reached."""

    retriable = True


class ConfigError(KafkaClientError, ValueError):
    """A configuration property is unknown or has an invalid value; the message names the property."""


class IllegalStateError(KafkaClientError):
    """A method was called when the object cannot honour it (e.g. `position` of an unassigned partition)."""


class ClientClosedError(IllegalStateError):
    """The producer, consumer or admin client was closed; create a new one."""


class CommitFailedError(KafkaClientError):
    """A commit cannot succeed: the group rebalanced and the partitions may belong to another member now.

    Records since the last successful commit may be read again by whoever owns them next. Poll again
    (rejoining the group) and go on; Kafka's consumer raises CommitFailedException for the same reason.
    """


def is_retriable(error: BaseException) -> bool:
    """Whether retrying the request that failed with `error` may succeed."""
    if isinstance(error, KafkaError):
        return error.retriable
    if isinstance(error, KafkaClientError):
        return error.retriable
    return False
