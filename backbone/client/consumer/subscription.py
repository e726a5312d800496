"""What a group consumer subscribed to, and the rebalance listener it told about partition changes.

Pure logic, no I/O: the group membership asks `Subscription.topics_in` which of the cluster's topics the
consumer wants (a fixed list, or every topic a pattern matches, re-evaluated on each metadata refresh), and
`changes` splits a new assignment into what was revoked and what was added.

A rebalance listener is any object with some of `on_partitions_revoked(partitions)`,
`on_partitions_assigned(partitions)` and `on_partitions_lost(partitions)` (Kafka's and kafka-python's names).
Each may be a plain function or a coroutine function. `on_partitions_lost` defaults to
`on_partitions_revoked`, as in Kafka's ConsumerRebalanceListener.
"""

from __future__ import annotations

import inspect
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from backbone.client.structs import OffsetAndMetadata, TopicPartition
from backbone.wire.errors import IllegalStateError

__all__ = [
    "CommitCallback",
    "ConsumerRebalanceListener",
    "Subscription",
    "call_listener",
    "changes",
    "check_listener",
]

log = logging.getLogger(__name__)

CommitCallback = Callable[[Mapping[TopicPartition, OffsetAndMetadata], BaseException | None], Any]
"""What `commit_async` calls when done: the offsets and the exception (None when they were committed)."""


class ConsumerRebalanceListener:
    """A base to subclass: every callback does nothing unless overridden (`lost` falls back to `revoked`)."""

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> Any:
        """Called before the partitions are taken away: commit what was processed of them here."""

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> Any:
        """Called once the partitions are this consumer's, before records of them are returned."""

    def on_partitions_lost(self, lost: set[TopicPartition]) -> Any:
        """Called when the partitions already belong to someone else (the member was dropped from the group):
        committing them is no longer possible."""
        return self.on_partitions_revoked(lost)


@dataclass(slots=True)
class Subscription:
    """Either a list of topic names or a pattern (a `re` pattern matched against whole topic names)."""

    topics: frozenset[str] = frozenset()
    pattern: re.Pattern[str] | None = None
    listener: Any = None
    matched: frozenset[str] = field(default=frozenset())
    """Topics the consumer currently subscribes to: `topics`, or what `pattern` matched last."""

    def covers(self, topic: str) -> bool:
        """Whether `topic` is subscribed: named, or matched by the pattern (whatever metadata knows yet)."""
        return topic in self.topics if self.pattern is None else self.pattern.fullmatch(topic) is not None

    @classmethod
    def create(
        cls, topics: Iterable[str] | str | None, pattern: str | re.Pattern[str] | None, listener: Any
    ) -> Subscription:
        if (topics is None) == (pattern is None):
            raise IllegalStateError(
                "subscribe() takes either topics=[...] or pattern=..., not both or neither"
            )
        check_listener(listener)
        if pattern is not None:
            compiled = re.compile(pattern) if isinstance(pattern, str) else pattern
            return cls(pattern=compiled, listener=listener)
        names = [topics] if isinstance(topics, str) else list(topics or ())
        bad = [name for name in names if not isinstance(name, str) or not name.strip()]
        if bad:
            raise ValueError(f"topic names must be non-empty strings, got {bad!r}")
        chosen = frozenset(names)
        return cls(topics=chosen, listener=listener, matched=chosen)

    def topics_in(self, cluster_topics: Iterable[str], internal: Iterable[str] = ()) -> frozenset[str]:
        """The subscribed topics among `cluster_topics` (a pattern never matches internal topics)."""
        if self.pattern is None:
            return self.topics
        hidden = set(internal)
        return frozenset(t for t in cluster_topics if t not in hidden and self.pattern.fullmatch(t))


def check_listener(listener: Any) -> None:
    """TypeError unless `listener` is None or has at least one of the listener methods."""
    if listener is not None and not any(
        callable(getattr(listener, name, None))
        for name in ("on_partitions_revoked", "on_partitions_assigned", "on_partitions_lost")
    ):
        raise TypeError(
            "listener must have on_partitions_revoked, on_partitions_assigned or on_partitions_lost"
        )


def changes(
    owned: Iterable[TopicPartition], assigned: Iterable[TopicPartition]
) -> tuple[set[TopicPartition], set[TopicPartition]]:
    """(revoked, added): what `owned` loses and gains when `assigned` becomes the assignment."""
    before, after = set(owned), set(assigned)
    return before - after, after - before


async def call_listener(listener: Any, callback: str, partitions: set[TopicPartition]) -> Exception | None:
    """Call `listener.<callback>(partitions)`, awaiting it when it is a coroutine function.

    An exception in the listener does not stop the rebalance (abandoning it would only make the group
    rebalance again): it is logged and returned, and the consumer raises it from `poll` afterwards, as
    Kafka's consumer does.
    """
    if listener is None:
        return None
    method = getattr(listener, callback, None)
    if method is None and callback == "on_partitions_lost":
        method = getattr(listener, "on_partitions_revoked", None)
    if method is None:
        return None
    try:
        result = method(set(partitions))
        if inspect.isawaitable(result):
            await result
    except Exception as error:
        log.warning(
            "event=rebalance_listener_failed callback=%s partitions=%d error=%r",
            callback,
            len(partitions),
            error,
        )
        return error
    return None
