"""The real pieces a broker's handlers are built from, without a broker around them: a replica manager
over a log directory, the metadata cache it reads, the broker's configuration and its authorizer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from backbone.broker.config import BrokerConfig
from backbone.broker.group_coordination import GroupCoordination
from backbone.broker.metadata_cache import MetadataCache
from backbone.broker.partition import Partition
from backbone.broker.replica_manager import ReplicaManager
from backbone.broker.security.authorizer import Authorizer
from backbone.coordination import BrokerRegistration, ClusterStore, EndPoint, PartitionState, TopicAssignment
from backbone.log.manager import LogManager

BROKER_ID = 1


@dataclass
class BrokerPieces:
    config: BrokerConfig
    cache: MetadataCache
    logs: LogManager
    replicas: ReplicaManager
    authorizer: Authorizer

    def lead(
        self, topic: str, partition: int, replicas: tuple[int, ...], isr: tuple[int, ...] | None = None
    ) -> Partition:
        """This broker leading `topic`-`partition` (leader epoch 0) with `isr` (all replicas by default)."""
        return self.place(topic, partition, replicas, leader=BROKER_ID, isr=isr)

    def place(
        self,
        topic: str,
        partition: int,
        replicas: tuple[int, ...],
        *,
        leader: int,
        isr: tuple[int, ...] | None = None,
        leader_epoch: int = 0,
    ) -> Partition:
        """The partition's assignment and state as ZooKeeper's watches would deliver them; this broker's
        replica of it."""
        self.show(topic, partition, replicas, leader=leader, isr=isr, leader_epoch=leader_epoch)
        return self.replicas.partitions[(topic, partition)]

    def show(
        self,
        topic: str,
        partition: int,
        replicas: tuple[int, ...],
        *,
        leader: int,
        isr: tuple[int, ...] | None = None,
        leader_epoch: int = 0,
    ) -> None:
        """The same for a partition this broker may not host."""
        assignment = self.cache.topics.get(topic)
        partitions = dict(assignment.partitions) if assignment is not None else {}
        partitions[partition] = replicas
        self.cache.topics[topic] = TopicAssignment(topic, partitions)
        for broker_id in replicas:
            self.cache.brokers.setdefault(
                broker_id,
                BrokerRegistration(broker_id, (EndPoint("PLAINTEXT", "127.0.0.1", 9092 + broker_id),), None),
            )
        self.cache.states[(topic, partition)] = PartitionState(
            leader=leader, leader_epoch=leader_epoch, isr=isr or replicas, controller_epoch=1
        )
        self.replicas.on_partition_state(topic, partition)

    async def close(self) -> None:
        await self.replicas.stop_replication()
        self.replicas.shutdown()
        self.logs.shutdown()


def broker_pieces(tmp_path: Path, **properties: Any) -> BrokerPieces:
    raw = {"broker.id": BROKER_ID, "log.dirs": str(tmp_path), "zookeeper.connect": "127.0.0.1:1/unused"}
    config = BrokerConfig(raw | properties)
    cache = MetadataCache()
    logs = LogManager([tmp_path], config.log)
    logs.startup()
    replicas = ReplicaManager(BROKER_ID, logs, cache, producer_expiration_ms=3_600_000)
    return BrokerPieces(config, cache, logs, replicas, Authorizer.from_config(config.values))


def pieces_fixture(**properties: Any) -> Callable[..., Any]:
    """A fixture giving a test its BrokerPieces (with these broker properties), closed after the test.
    Assign it in the test module: `pieces = pieces_fixture()`."""

    @pytest.fixture
    async def pieces(tmp_path: Path) -> AsyncIterator[BrokerPieces]:
        made = broker_pieces(tmp_path, **properties)
        yield made
        await made.close()

    return pieces


def group_coordination(pieces: BrokerPieces, unreachable: set[int] | None = None) -> GroupCoordination:
    """The broker's group coordination over these pieces. Its cluster store is never started: the tests
    that use it lead the offsets topic already, so nothing asks ZooKeeper. `unreachable` stands for the
    liveness probes' verdict (empty: every broker answers)."""
    store = ClusterStore(pieces.config["zookeeper.connect"])
    verdict = set() if unreachable is None else unreachable

    async def zk(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(function, *args, **kwargs)

    return GroupCoordination(
        BROKER_ID, pieces.config, pieces.cache, store, zk, pieces.replicas, lambda: verdict
    )
