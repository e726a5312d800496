"""Dynamic configs (/config/<type>/<name>) and their change notifications (/config/changes).

A config write and its notification go in one transaction, so a broker watching /config/changes never
misses a change nor sees one that did not happen. As in Kafka, a config node holds the whole override
map: a writer replaces it (IncrementalAlterConfigs computes the new map and writes it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kazoo.exceptions import NodeExistsError, NoNodeError

from backbone.coordination import paths
from backbone.coordination.brokers import MAX_RACES
from backbone.coordination.errors import CoordinationError
from backbone.coordination.session import Watch, transaction_failure, translate_errors
from backbone.coordination.topics import TopicOps, validate_config_values
from backbone.coordination.znodes import (
    decode_config,
    decode_config_change,
    encode_config,
    encode_config_change,
    now_ms,
)
from backbone.protocol.errors import UnknownTopicOrPartitionError

__all__ = ["ConfigChange", "ConfigOps"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ConfigChange:
    """One notification: the config of `entity_type`/`entity_name` changed (re-read it)."""

    sequence: int
    entity_type: str
    entity_name: str


class ConfigOps(TopicOps):
    """Read and write topic, broker and other entity configs."""

    @translate_errors("read a config")
    def get_config(self, entity_type: str, entity_name: str) -> dict[str, str]:
        """The overrides stored for an entity ({} when none)."""
        path = paths.config_entity_path(entity_type, entity_name)
        found = self._get_or_none(path)
        return decode_config(found[0], path) if found else {}

    @translate_errors("write a config")
    def set_config(self, entity_type: str, entity_name: str, config: Mapping[str, str]) -> None:
        """Replace an entity's overrides and announce the change, in one transaction."""
        path = paths.config_entity_path(entity_type, entity_name)
        self._write_config_node(path, paths.entity_path(entity_type, entity_name), config)

    def _write_config_node(self, path: str, entity_path: str, config: Mapping[str, str]) -> None:
        """Replace the config at `path` (creating missing parents, as Kafka does for a user's client
        entities) and create the notification naming `entity_path`, in one transaction."""
        values = validate_config_values(config)
        notification = encode_config_change(entity_path)
        for _ in range(MAX_RACES):
            transaction = self._client.transaction()
            if self._exists(path) is not None:
                transaction.set_data(path, encode_config(values))
                node_ops = 1
            else:
                parents = self._missing_parents(path)
                for parent in parents:
                    transaction.create(parent, b"")
                transaction.create(path, encode_config(values))
                node_ops = len(parents) + 1
            transaction.create(paths.config_change_prefix_path(), notification, sequence=True)
            failure = transaction_failure(transaction.commit())
            if failure is None:
                log.info("event=config_changed entity=%s keys=%s", entity_path, ",".join(sorted(values)))
                return
            if failure[0] < node_ops and isinstance(failure[1], NodeExistsError | NoNodeError):
                continue  # created or deleted meanwhile: choose create/set again
            raise failure[1]
        raise CoordinationError(f"config of {entity_path} kept changing while being written; retry")

    def _missing_parents(self, path: str) -> list[str]:
        missing = []
        parent = paths.parent_of(path)
        while parent != paths.CONFIG and self._exists(parent) is None:
            missing.append(parent)
            parent = paths.parent_of(parent)
        return list(reversed(missing))

    def get_topic_config(self, topic: str) -> dict[str, str]:
        """The topic's overrides; UnknownTopicOrPartitionError when there is no such topic."""
        self._require_topic(topic)
        return self.get_config("topics", topic)

    def set_topic_config(self, topic: str, config: Mapping[str, str]) -> None:
        self._require_topic(topic)
        self.set_config("topics", topic, config)

    def _require_topic(self, topic: str) -> None:
        if not self.topic_exists(topic):
            raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")

    def get_broker_config(self, broker_id: int | None = None) -> dict[str, str]:
        """A broker's overrides, or the cluster-wide defaults (`<default>`) when broker_id is None."""
        return self.get_config("brokers", paths.broker_config_name(broker_id))

    def set_broker_config(self, broker_id: int | None, config: Mapping[str, str]) -> None:
        self.set_config("brokers", paths.broker_config_name(broker_id), config)

    # -- notifications ---------------------------------------------------------------------------

    def _read_change(self, name: str) -> ConfigChange | None:
        found = self._get_or_none(paths.config_change_path(name))
        if found is None:
            return None  # purged between listing and reading
        entity_type, entity_name = decode_config_change(found[0])
        return ConfigChange(paths.sequence_number(name, paths.CONFIG_CHANGE_PREFIX), entity_type, entity_name)

    @translate_errors("read config change notifications")
    def config_changes(self, after_sequence: int = -1) -> list[ConfigChange]:
        """Pending notifications with a sequence number above `after_sequence`, oldest first."""
        changes = []
        for name in self._change_names(after_sequence):
            change = self._read_change(name)
            if change is not None:
                changes.append(change)
        return changes

    def _change_names(self, after_sequence: int, names: list[str] | None = None) -> list[str]:
        listed = self._children(paths.CONFIG_CHANGES) if names is None else names
        numbered = [(paths.sequence_number(n, paths.CONFIG_CHANGE_PREFIX), n) for n in listed]
        return [name for sequence, name in sorted(numbered) if sequence > after_sequence]

    def watch_config_changes(
        self, callback: Callable[[ConfigChange], None], *, after_sequence: int | None = None
    ) -> Watch:
        """Call `callback(change)` once per new notification, in order.

        Notifications present when the watch starts count as seen unless `after_sequence` says where
        to start (a broker reads full configs at startup, then follows changes).
        """
        last_seen: list[int | None] = [after_sequence]  # a cell the closure updates

        def on_children(names: list[str]) -> None:
            if last_seen[0] is None:
                sequences = [paths.sequence_number(n, paths.CONFIG_CHANGE_PREFIX) for n in names]
                last_seen[0] = max(sequences, default=-1)
                return
            for name in self._change_names(last_seen[0], names):
                last_seen[0] = paths.sequence_number(name, paths.CONFIG_CHANGE_PREFIX)
                try:
                    change = self._read_change(name)
                    if change is not None:
                        callback(change)
                except Exception:  # one bad notification or callback must not hide the later ones
                    log.exception("event=config_change_callback_failed notification=%s", name)

        return self._watch_children(paths.CONFIG_CHANGES, on_children, "config changes")

    @translate_errors("purge config change notifications")
    def purge_config_changes(self, older_than_ms: int = 15 * 60 * 1000) -> int:
        """Delete notifications older than `older_than_ms` (Kafka keeps 15 minutes); returns how many."""
        cutoff = now_ms() - older_than_ms
        purged = 0
        for name in self._children(paths.CONFIG_CHANGES):
            path = paths.config_change_path(name)
            stat = self._exists(path)
            if stat is None or stat.ctime >= cutoff:
                continue
            try:
                self._client.delete(path, version=stat.version)
                purged += 1
            except NoNodeError:
                log.debug("event=config_change_notification_already_purged path=%s", path)
        return purged
