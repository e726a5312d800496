"""The cluster store's admin operations kept in memory, for handler unit tests (the real store needs
ZooKeeper, which unit tests do not start). Each operation answers and fails as `ClusterStore`'s does for
what the handlers ask of it; replicas are placed over `brokers` in turn, and every change is also kept in
`calls` so a test can tell what reached ZooKeeper, and `on_change(topic)` is told, as a watch would be
(from the calling thread). `zk` runs a call as the broker's does: off the event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from backbone.coordination import AclBinding, PartitionState, ScramCredential, TopicAssignment, paths
from backbone.protocol.errors import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)


class MemoryStore:
    def __init__(self, brokers: Sequence[int] = (1,)) -> None:
        self.brokers = list(brokers)
        self.topics: dict[str, TopicAssignment] = {}
        self.topic_configs: dict[str, dict[str, str]] = {}
        self.broker_defaults: dict[str, str] = {}
        self.broker_configs: dict[int, dict[str, str]] = {}
        self.acl_list: list[AclBinding] = []
        self.credentials: dict[str, dict[str, ScramCredential]] = {}
        self.calls: list[tuple[str, Any]] = []
        self.on_change: Callable[[str], None] = lambda topic: None

    def _changed(self, call: str, topic: str, detail: Any = None) -> None:
        self.calls.append((call, topic if detail is None else (topic, detail)))
        self.on_change(topic)

    # -- topics -------------------------------------------------------------------------------------------

    def topic_exists(self, topic: str) -> bool:
        return topic in self.topics

    def create_topic(
        self,
        topic: str,
        partitions: int | None = None,
        replication_factor: int | None = None,
        *,
        assignment: Mapping[int, Sequence[int]] | None = None,
        configs: Mapping[str, str] | None = None,
        validate_only: bool = False,
    ) -> TopicAssignment:
        paths.validate_topic_name(topic)
        if topic in self.topics:
            raise TopicAlreadyExistsError(f"Topic '{topic}' already exists.")
        if assignment is None:
            assert partitions is not None and replication_factor is not None
            if partitions <= 0:
                raise InvalidPartitionsError("Number of partitions must be larger than 0.")
            if not 0 < replication_factor <= len(self.brokers):
                raise InvalidReplicationFactorError(
                    f"Replication factor: {replication_factor} larger than available brokers: "
                    f"{len(self.brokers)}."
                )
            assignment = {p: self._place(p, replication_factor) for p in range(partitions)}
        created = TopicAssignment(topic, {p: tuple(r) for p, r in sorted(assignment.items())})
        if not validate_only:
            self.topics[topic] = created
            self.topic_configs[topic] = dict(configs or {})
            self._changed("create_topic", topic)
        return created

    def add_partitions(
        self, topic: str, count: int, *, assignment: Sequence[Sequence[int]] | None, validate_only: bool
    ) -> None:
        before = self.topics[topic]
        if count <= before.partition_count:
            raise InvalidPartitionsError(
                f"Topic currently has {before.partition_count} partitions, which is higher than the "
                f"requested {count}."
            )
        added = range(before.partition_count, count)
        placed = (
            {p: tuple(r) for p, r in zip(added, assignment, strict=True)}
            if assignment is not None
            else {p: self._place(p, before.replication_factor) for p in added}
        )
        if not validate_only:
            self.topics[topic] = TopicAssignment(topic, {**before.partitions, **placed})
            self._changed("add_partitions", topic, count)

    def delete_topic(self, topic: str) -> None:
        paths.validate_topic_name(topic)
        if topic not in self.topics:
            raise UnknownTopicOrPartitionError(f"Topic '{topic}' does not exist.")
        del self.topics[topic]
        self._changed("delete_topic", topic)

    def get_topics(self, topics: Iterable[str] | None = None) -> dict[str, TopicAssignment]:
        wanted = self.topics if topics is None else topics
        return {t: self.topics[t] for t in wanted if t in self.topics}

    def set_partition_state(
        self,
        topic: str,
        partition: int,
        state: PartitionState,
        expected_version: int,
        *,
        controller_epoch_version: int,
    ) -> None:
        self._changed("set_partition_state", topic, (partition, state))

    def _place(self, partition: int, factor: int) -> tuple[int, ...]:
        return tuple(self.brokers[(partition + i) % len(self.brokers)] for i in range(factor))

    # -- configs ------------------------------------------------------------------------------------------

    def get_topic_config(self, topic: str) -> dict[str, str]:
        return dict(self.topic_configs.get(topic, {}))

    def set_topic_config(self, topic: str, config: Mapping[str, str]) -> None:
        if topic not in self.topics:
            raise UnknownTopicOrPartitionError(f"Topic '{topic}' does not exist.")
        self.topic_configs[topic] = dict(config)
        self._changed("set_topic_config", topic, dict(config))

    def get_broker_config(self, broker_id: int | None = None) -> dict[str, str]:
        if broker_id is None:
            return dict(self.broker_defaults)
        return dict(self.broker_configs.get(broker_id, {}))

    def set_broker_config(self, broker_id: int | None, config: Mapping[str, str]) -> None:
        if broker_id is None:
            self.broker_defaults = dict(config)
        else:
            self.broker_configs[broker_id] = dict(config)
        self.calls.append(("set_broker_config", (broker_id, dict(config))))

    # -- ACLs ---------------------------------------------------------------------------------------------

    def acls(self) -> list[AclBinding]:
        return list(self.acl_list)

    def add_acls(self, bindings: Iterable[AclBinding]) -> None:
        self.acl_list.extend(b for b in bindings if b not in self.acl_list)

    def remove_acls(self, bindings: Iterable[AclBinding]) -> None:
        gone = set(bindings)
        self.acl_list = [acl for acl in self.acl_list if acl not in gone]

    # -- SCRAM credentials ----------------------------------------------------------------------------------

    def scram_users(self) -> dict[str, list[str]]:
        return {user: sorted(found) for user, found in sorted(self.credentials.items()) if found}

    def scram_credentials(self, user: str) -> dict[str, ScramCredential]:
        return dict(self.credentials.get(user, {}))

    def set_scram_credential(self, user: str, mechanism: str, credential: ScramCredential) -> None:
        self.credentials.setdefault(user, {})[mechanism] = credential

    def delete_scram_credential(self, user: str, mechanism: str) -> bool:
        return self.credentials.get(user, {}).pop(mechanism, None) is not None


async def zk(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return await asyncio.to_thread(function, *args, **kwargs)
