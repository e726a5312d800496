"""Metadata and DescribeCluster against a real metadata cache, broker config and authorizer (no broker, no
network, no ZooKeeper): what the cache holds is what clients are told, cached answers last until the
metadata generation moves, and missing topics are auto-created as the broker's settings allow."""

from __future__ import annotations

from collections.abc import Set

import pytest
from kio.schema.describe_cluster.v1 import request as describe_cluster
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import request as metadata

from backbone.broker.handlers.cluster import BROKER_ENDPOINT, CONTROLLER_ENDPOINT, describe_cluster_handler
from backbone.broker.handlers.metadata import TopicAutoCreation, metadata_handler
from backbone.consumer_groups.offsets_topic import OFFSETS_TOPIC
from tests.helpers.broker_pieces import BROKER_ID, BrokerPieces, broker_pieces, pieces_fixture
from tests.helpers.handler_context import decoded_answer, handler_context
from tests.helpers.memory_store import MemoryStore, zk
from tests.helpers.requests import metadata_request

pytestmark = pytest.mark.unit

OTHER = 2
pieces = pieces_fixture()


class Cluster:
    """What the Metadata handler reads besides the cache: the liveness verdict, the metadata generation
    and the topics it was asked to create."""

    def __init__(self) -> None:
        self.unreachable: set[int] = set()
        self.generation = 0
        self.asked_to_create: list[list[str]] = []

    def unreachable_brokers(self) -> Set[int]:
        return self.unreachable

    def current_generation(self) -> int:
        return self.generation

    async def create(self, topics: list[str]) -> set[str]:
        self.asked_to_create.append(topics)
        return set(topics)


async def ask(pieces: BrokerPieces, cluster: Cluster, request: metadata.MetadataRequest):
    handle = metadata_handler(
        pieces.cache,
        pieces.config,
        pieces.authorizer,
        unreachable=cluster.unreachable_brokers,
        generation=cluster.current_generation,
        auto_create=cluster.create,
    )
    return decoded_answer(request, await handle(handler_context(request)))


def no_creation(*topics: str) -> metadata.MetadataRequest:
    request = metadata_request(*topics)
    return metadata.MetadataRequest(
        topics=request.topics, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )


async def test_brokers_leaders_replicas_and_isr_are_those_of_the_cache(pieces) -> None:
    pieces.place("t", 0, (OTHER, BROKER_ID), leader=OTHER, isr=(OTHER,), leader_epoch=4)
    pieces.cache.controller_id = OTHER
    pieces.cache.cluster_id = "cluster-a"
    answer = await ask(pieces, Cluster(), metadata_request("t"))
    assert [(b.node_id, b.host, b.port) for b in answer.brokers] == [
        (BROKER_ID, "127.0.0.1", 9092 + BROKER_ID),
        (OTHER, "127.0.0.1", 9092 + OTHER),
    ]
    assert (answer.cluster_id, answer.controller_id) == ("cluster-a", OTHER)
    (topic,) = answer.topics
    (partition,) = topic.partitions
    assert (topic.name, topic.error_code) == ("t", ErrorCode.none)
    assert (partition.leader_id, partition.leader_epoch) == (OTHER, 4)
    assert (partition.replica_nodes, partition.isr_nodes, partition.offline_replicas) == (
        (OTHER, BROKER_ID),
        (OTHER,),
        (),
    )


async def test_a_replica_the_liveness_probes_find_dead_is_offline(pieces) -> None:
    pieces.place("t", 0, (OTHER, BROKER_ID), leader=BROKER_ID)
    cluster = Cluster()
    cluster.unreachable = {OTHER}
    answer = await ask(pieces, cluster, metadata_request("t"))
    assert answer.topics[0].partitions[0].offline_replicas == (OTHER,)


async def test_unknown_and_invalid_topics_are_answered_each_with_its_error(pieces) -> None:
    answer = await ask(pieces, Cluster(), no_creation("absent", "bad/name"))
    assert {t.name: t.error_code for t in answer.topics} == {
        "absent": ErrorCode.unknown_topic_or_partition,
        "bad/name": ErrorCode.invalid_topic_exception,
    }


async def test_missing_topics_are_created_and_answered_leader_not_available(pieces) -> None:
    pieces.lead("present", 0, (BROKER_ID,))
    cluster = Cluster()
    answer = await ask(pieces, cluster, metadata_request("present", "fresh"))
    assert cluster.asked_to_create == [["fresh"]]
    assert {t.name: t.error_code for t in answer.topics} == {
        "present": ErrorCode.none,
        "fresh": ErrorCode.leader_not_available,
    }


async def test_no_topic_is_created_when_the_broker_disallows_it(tmp_path) -> None:
    made = broker_pieces(tmp_path, **{"auto.create.topics.enable": False})
    try:
        cluster = Cluster()
        answer = await ask(made, cluster, metadata_request("fresh"))
        assert cluster.asked_to_create == []
        assert answer.topics[0].error_code == ErrorCode.unknown_topic_or_partition
    finally:
        await made.close()


async def test_a_cached_answer_is_reused_until_the_generation_moves(pieces) -> None:
    pieces.lead("t", 0, (BROKER_ID,))
    cluster = Cluster()
    handle = metadata_handler(
        pieces.cache,
        pieces.config,
        pieces.authorizer,
        unreachable=cluster.unreachable_brokers,
        generation=cluster.current_generation,
        auto_create=cluster.create,
    )
    request = no_creation("t")
    first = await handle(handler_context(request))
    pieces.lead("t", 1, (BROKER_ID,))  # the cache changes, but nobody said so yet
    assert await handle(handler_context(request)) == first
    cluster.generation += 1
    after = decoded_answer(request, await handle(handler_context(request)))
    assert [p.partition_index for p in after.topics[0].partitions] == [0, 1]


async def test_auto_creation_uses_the_broker_defaults_within_the_live_brokers(tmp_path) -> None:
    made = broker_pieces(tmp_path, **{"num.partitions": 3, "default.replication.factor": 3})
    store = MemoryStore(brokers=(BROKER_ID, OTHER))
    offsets_created: list[bool] = []

    async def ensure_offsets_topic() -> None:
        offsets_created.append(True)

    try:
        made.place("existing", 0, (BROKER_ID, OTHER), leader=BROKER_ID)  # two live brokers
        store.create_topic("existing", 1, 1)
        creation = TopicAutoCreation(made.config, made.cache, store, zk, ensure_offsets_topic)
        created = await creation.create(["fresh", "existing", "bad/name", OFFSETS_TOPIC])
        assert created == {"fresh", "existing", OFFSETS_TOPIC}
        assert store.topics["fresh"].partition_count == 3
        assert store.topics["fresh"].replication_factor == 2  # not 3: only two brokers live
        assert offsets_created == [True]
        assert OFFSETS_TOPIC not in store.topics  # the group coordination creates it, its own way
    finally:
        await made.close()


async def test_describe_cluster_lists_the_cache_brokers_and_controller(pieces) -> None:
    pieces.place("t", 0, (BROKER_ID, OTHER), leader=BROKER_ID)
    pieces.cache.controller_id = BROKER_ID
    pieces.cache.cluster_id = "cluster-a"
    request = describe_cluster.DescribeClusterRequest(
        include_cluster_authorized_operations=False, endpoint_type=BROKER_ENDPOINT
    )
    answer = await describe_cluster_handler(pieces.cache, pieces.authorizer)(handler_context(request))
    assert (answer.error_code, answer.cluster_id, answer.controller_id) == (
        ErrorCode.none,
        "cluster-a",
        BROKER_ID,
    )
    assert [b.broker_id for b in answer.brokers] == [BROKER_ID, OTHER]


async def test_describe_cluster_refuses_controller_endpoints_as_a_zookeeper_mode_broker(pieces) -> None:
    request = describe_cluster.DescribeClusterRequest(
        include_cluster_authorized_operations=False, endpoint_type=CONTROLLER_ENDPOINT
    )
    answer = await describe_cluster_handler(pieces.cache, pieces.authorizer)(handler_context(request))
    assert answer.error_code == ErrorCode.mismatched_endpoint_type
    assert answer.brokers == ()
