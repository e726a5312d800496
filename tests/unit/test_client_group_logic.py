"""The consumer's group logic without a broker: subscriptions, listeners, settings, the leader's part."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import pytest

from backbone.client import (
    AsyncConsumer,
    ConfigError,
    IllegalStateError,
    OffsetAndMetadata,
    TopicPartition,
)
from backbone.client.cluster import ClusterMetadata, PartitionInfo, TopicInfo
from backbone.client.config import CONSUMER_OPTIONS, resolve
from backbone.client.consumer import membership as group_membership
from backbone.client.consumer.group import ConsumerGroup, _as_offset
from backbone.client.consumer.group_requests import JoinResult, MemberMetadata
from backbone.client.consumer.membership import GroupMembership
from backbone.client.consumer.subscription import (
    ConsumerRebalanceListener,
    Subscription,
    call_listener,
    changes,
)
from backbone.protocol.errors import ErrorCode
from backbone.wire.connection import BrokerConnection
from backbone.wire.errors import KafkaConnectionError
from backbone.wire.groups.consumer_protocol import decode_assignment, decode_subscription

pytestmark = pytest.mark.unit


def tp(topic: str, partition: int) -> TopicPartition:
    return TopicPartition(topic, partition)


# -- subscriptions ----------------------------------------------------------------------------------


def test_a_subscription_is_topics_or_a_pattern() -> None:
    assert Subscription.create(["a", "b"], None, None).matched == {"a", "b"}
    assert Subscription.create("a", None, None).matched == {"a"}
    with pytest.raises(IllegalStateError, match="either topics"):
        Subscription.create(["a"], "a.*", None)
    with pytest.raises(IllegalStateError, match="either topics"):
        Subscription.create(None, None, None)
    with pytest.raises(ValueError, match="non-empty strings"):
        Subscription.create(["a", ""], None, None)
    with pytest.raises(TypeError, match="on_partitions_revoked"):
        Subscription.create(["a"], None, object())


def test_a_pattern_matches_whole_names_and_skips_internal_topics() -> None:
    sub = Subscription.create(None, r"events\..*", None)
    cluster = ["events.click", "events.view", "xevents.click", "events", "__consumer_offsets"]
    assert sub.topics_in(cluster, internal=["__consumer_offsets"]) == {"events.click", "events.view"}
    everything = Subscription.create(None, re.compile(".*"), None)
    assert "__consumer_offsets" not in everything.topics_in(cluster, internal=["__consumer_offsets"])


def test_changes_split_revoked_and_added() -> None:
    revoked, added = changes({tp("a", 0), tp("a", 1)}, {tp("a", 1), tp("a", 2)})
    assert revoked == {tp("a", 0)}
    assert added == {tp("a", 2)}


# -- listeners --------------------------------------------------------------------------------------


class Recorder(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.calls: list[tuple[str, set[TopicPartition]]] = []

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.calls.append(("revoked", revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.calls.append(("assigned", assigned))


async def test_listeners_may_be_plain_or_async_and_lost_falls_back_to_revoked() -> None:
    listener = Recorder()
    assert await call_listener(listener, "on_partitions_assigned", {tp("a", 0)}) is None
    assert await call_listener(listener, "on_partitions_revoked", {tp("a", 0)}) is None
    assert await call_listener(listener, "on_partitions_lost", {tp("a", 1)}) is None
    assert listener.calls == [
        ("assigned", {tp("a", 0)}),
        ("revoked", {tp("a", 0)}),
        ("revoked", {tp("a", 1)}),
    ]
    assert await call_listener(None, "on_partitions_revoked", {tp("a", 0)}) is None


async def test_a_failing_listener_is_reported_not_raised() -> None:
    class Failing:
        def on_partitions_assigned(self, assigned: Any) -> None:
            raise RuntimeError("boom")

    error = await call_listener(Failing(), "on_partitions_assigned", {tp("a", 0)})
    assert isinstance(error, RuntimeError)
    # a listener without the callback is simply not called
    assert await call_listener(Failing(), "on_partitions_revoked", {tp("a", 0)}) is None


# -- settings and misuse ----------------------------------------------------------------------------


def test_group_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match=r"heartbeat\.interval\.ms"):
        AsyncConsumer(group_id="g", session_timeout_ms=3000, heartbeat_interval_ms=3000)
    with pytest.raises(ConfigError, match=r"group\.instance\.id"):
        AsyncConsumer(group_instance_id="i-1")
    with pytest.raises(ConfigError, match="unknown partition assignor 'fair'"):
        AsyncConsumer(group_id="g", partition_assignment_strategy=["fair"])
    java = AsyncConsumer(
        group_id="g",
        partition_assignment_strategy="org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
    )
    assert java.group is not None and java.group.cooperative
    default = AsyncConsumer(group_id="g")
    assert default.group is not None and not default.group.cooperative  # range is eager
    assert [a.name for a in default.group.assignors] == ["range", "cooperative-sticky"]


async def test_misuse_is_explained() -> None:
    plain = AsyncConsumer()
    with pytest.raises(IllegalStateError, match="group_id"):
        plain.subscribe(["a"])
    with pytest.raises(IllegalStateError, match="group_id"):
        await plain.commit()
    grouped = AsyncConsumer(group_id="g")
    grouped.subscribe(["a"])
    assert grouped.subscription() == {"a"}
    with pytest.raises(IllegalStateError, match="unsubscribe"):
        grouped.assign([tp("a", 0)])
    manual = AsyncConsumer(group_id="g")
    manual.assign([tp("a", 0)])
    with pytest.raises(IllegalStateError, match="assign"):
        manual.subscribe(["a"])


def test_commit_values_may_be_offsets_or_pairs() -> None:
    assert _as_offset(5) == OffsetAndMetadata(5)
    assert _as_offset((5, "note")) == OffsetAndMetadata(5, "note")
    assert _as_offset(OffsetAndMetadata(5, "x", 3)) == OffsetAndMetadata(5, "x", 3)
    with pytest.raises(ValueError, match="negative"):
        _as_offset(-1)


# -- the leader's side ------------------------------------------------------------------------------


def metadata(**topics: int) -> ClusterMetadata:
    infos = {
        name: TopicInfo(
            name,
            0,
            {p: PartitionInfo(name, p, 1, 0, (1,), (1,)) for p in range(count)},
            available=tuple(range(count)),
        )
        for name, count in topics.items()
    }
    return ClusterMetadata(topics=infos, created=1.0)


def group_of(*topics: str, **options: Any) -> ConsumerGroup:
    consumer = AsyncConsumer(group_id="g", **options)
    consumer.subscribe(list(topics))
    assert consumer.group is not None
    return consumer.group


async def test_the_leader_splits_partitions_among_members_by_their_subscriptions() -> None:
    members = {"m-1": group_of("a", "b"), "m-2": group_of("a"), "m-3": group_of("a", "b")}
    leader = members["m-1"]
    leader.cluster.metadata = metadata(a=3, b=2)
    joined = [
        MemberMetadata(member_id, None, dict(group.join_protocols(-1))["range"])
        for member_id, group in members.items()
    ]
    assert decode_subscription(joined[0].metadata).topics == ("a", "b")
    assigned = await leader.assign("range", joined)
    result = {member: set(decode_assignment(data).partitions) for member, data in assigned.items()}
    assert result == {
        "m-1": {("a", 0), ("b", 0)},
        "m-2": {("a", 1)},
        "m-3": {("a", 2), ("b", 1)},
    }
    assert leader.cluster.topics >= {"a", "b"}  # the leader follows every topic the group reads


async def test_more_members_than_partitions_leaves_some_idle() -> None:
    members = {f"m-{i}": group_of("a") for i in range(4)}
    leader = members["m-0"]
    leader.cluster.metadata = metadata(a=2)
    joined = [MemberMetadata(m, None, dict(g.join_protocols(-1))["range"]) for m, g in members.items()]
    sizes = sorted(
        len(decode_assignment(d).partitions) for d in (await leader.assign("range", joined)).values()
    )
    assert sizes == [0, 0, 1, 1]


def test_cooperative_members_send_what_they_own() -> None:
    group = group_of("a", partition_assignment_strategy=["cooperative-sticky"])
    group.owned = {tp("a", 1), tp("a", 0)}
    ((name, data),) = group.join_protocols(4)
    subscription = decode_subscription(data)
    assert name == "cooperative-sticky"
    assert subscription.owned_partitions == (("a", 0), ("a", 1))
    assert subscription.generation == 4


# -- the coordinator connection ---------------------------------------------------------------------


async def test_aborting_a_connection_while_it_connects_is_a_connection_error() -> None:
    # A connection closed while connecting (the cluster client drops bootstrap connections once brokers are
    # known) must fail its waiters with a retriable error, not cancel them: a cancelled coordinator lookup
    # would end the consumer's join.
    accepted = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.set()
        await reader.read()  # never answers ApiVersions
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    conn = BrokerConnection("127.0.0.1", port, -1, client_id="test")
    try:
        waiter = asyncio.ensure_future(conn.connect())
        await asyncio.wait_for(accepted.wait(), 10)
        conn.abort()
        with pytest.raises(KafkaConnectionError, match="closed while connecting"):
            await asyncio.wait_for(waiter, 10)
    finally:
        await conn.close()
        server.close()
        await server.wait_closed()


# -- rejoining after the coordinator failed a round ---------------------------------------------------


class SilentHooks:
    """A member with nothing to revoke or apply; as leader it assigns nothing."""

    def join_protocols(self, generation_id: int) -> list[tuple[str, bytes]]:
        return [("range", b"")]

    async def assign(self, protocol_name: str, members: Any) -> dict[str, bytes]:
        return {}

    async def on_join_prepare(self) -> None:
        pass

    async def on_join_complete(self, protocol_name: str, assignment: bytes) -> bool:
        return False

    async def on_membership_lost(self) -> None:
        pass


async def rounds_until_stable(
    monkeypatch: pytest.MonkeyPatch, join_codes: list[ErrorCode], sync_codes: list[ErrorCode]
) -> tuple[int, float]:
    """Run a join against a coordinator answering JoinGroup, then SyncGroup, with the codes given in turn
    (then none); return the JoinGroup rounds it took and the seconds they took."""
    settings = {"group.id": "g", "retry.backoff.ms": 100, "retry.backoff.max.ms": 1000}
    config = resolve(CONSUMER_OPTIONS, "consumer", settings, {})
    membership = GroupMembership(None, config, SilentHooks())  # type: ignore[arg-type]
    joins = iter(join_codes)
    syncs = iter(sync_codes)
    rounds = 0

    async def coordinator(deadline: float | None = None) -> object:
        return object()

    async def join_group(conn: object, group_id: str, **_: Any) -> JoinResult:
        nonlocal rounds
        rounds += 1
        code = next(joins, ErrorCode.none)
        return JoinResult(code, 1, "range", "m-1", "m-1", (), False)

    async def sync_group(conn: object, group_id: str, **_: Any) -> tuple[ErrorCode, bytes]:
        return next(syncs, ErrorCode.none), b""

    monkeypatch.setattr(membership, "coordinator", coordinator)
    monkeypatch.setattr(group_membership, "join_group", join_group)
    monkeypatch.setattr(group_membership, "sync_group", sync_group)
    monkeypatch.setattr(membership, "coordinator_dead", lambda reason: None)
    started = time.monotonic()
    await asyncio.wait_for(membership._join_until_stable(), 30)
    return rounds, time.monotonic() - started


async def test_a_coordinator_that_cannot_store_the_group_is_not_asked_again_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A coordinator whose offsets partition cannot take writes answers SyncGroup with
    # COORDINATOR_NOT_AVAILABLE at once; rejoining at once spun thousands of rounds a second against it.
    unavailable = [ErrorCode.coordinator_not_available] * 3
    rounds, seconds = await rounds_until_stable(monkeypatch, [], unavailable)
    assert rounds == 4
    assert seconds >= (100 + 200 + 400) * 0.8 / 1000, "backed off exponentially from retry.backoff.ms"


async def test_answers_of_a_normal_rebalance_rejoin_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    codes = [ErrorCode.member_id_required, ErrorCode.rebalance_in_progress, ErrorCode.illegal_generation]
    rounds, seconds = await rounds_until_stable(monkeypatch, codes, [ErrorCode.rebalance_in_progress])
    assert rounds == 5
    assert seconds < 0.08, "no backoff between the rounds of a rebalance"
