"""The classic group membership state machine (consumer_groups/group.py), driven directly on the event loop:
joins and generations, rebalances on newcomers, session and rebalance timeouts, static membership, leaving,
and the errors stale or unknown members get."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from backbone.consumer_groups.group import Group, GroupConfig, GroupSnapshot, GroupState
from backbone.consumer_groups.group_types import JoinResult, subscription_topics
from backbone.protocol.errors import ErrorCode
from backbone.wire.groups.consumer_protocol import Subscription, encode_subscription

pytestmark = pytest.mark.unit

LONG_MS = 60_000  # long enough never to expire during a test
RANGE = [("range", b"range-metadata")]


class Store:
    """Records what the group asks to persist; answers with `error`."""

    def __init__(self) -> None:
        self.snapshots: list[GroupSnapshot] = []
        self.error = ErrorCode.none

    async def persist(self, snapshot: GroupSnapshot) -> ErrorCode:
        self.snapshots.append(snapshot)
        return self.error


def make_group(**config: int) -> tuple[Group, Store]:
    store = Store()
    settings = {"min_session_timeout_ms": 10, "initial_rebalance_delay_ms": 0, **config}
    return Group("g", GroupConfig(**settings), store.persist), store


async def wait_until(condition: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


def join(
    group: Group,
    member_id: str = "",
    *,
    instance: str | None = None,
    protocols: list[tuple[str, bytes]] | None = None,
    protocol_type: str = "consumer",
    session_ms: int = LONG_MS,
    rebalance_ms: int = LONG_MS,
    v4: bool = False,
    client_id: str = "client",
) -> asyncio.Task[JoinResult]:
    """A JoinGroup in flight (it may wait for the join phase to end)."""
    return asyncio.ensure_future(
        group.join(
            member_id=member_id,
            group_instance_id=instance,
            client_id=client_id,
            client_host="/127.0.0.1",
            session_timeout_ms=session_ms,
            rebalance_timeout_ms=rebalance_ms,
            protocol_type=protocol_type,
            protocols=RANGE if protocols is None else protocols,
            require_known_member_id=v4,
        )
    )


def sync(group: Group, member_id: str, generation: int, assignments: dict[str, bytes] | None = None, **kw):
    return asyncio.ensure_future(
        group.sync(
            member_id=member_id,
            group_instance_id=kw.get("instance"),
            generation_id=generation,
            protocol_type=kw.get("protocol_type"),
            protocol_name=kw.get("protocol_name"),
            assignments=assignments or {},
        )
    )


async def stable_group(count: int, **join_args) -> tuple[Group, Store, list[str]]:
    """A Stable group of `count` members (joined one after another); their ids in join order."""
    group, store = make_group()
    ids: list[str] = []
    for _ in range(count):
        newcomer = join(group, **join_args)
        await wait_until(lambda t=newcomer: group.state is GroupState.PREPARING_REBALANCE or t.done())
        rejoins = [join(group, m, **join_args) for m in ids]
        results = [*(await asyncio.gather(*rejoins)), await newcomer]
        ids = [r.member_id for r in results]
        generation = results[0].generation_id
        syncs = [sync(group, m, generation, {x: x.encode() for x in ids}) for m in ids]
        assert all(r.error is ErrorCode.none for r in await asyncio.gather(*syncs))
    assert group.state is GroupState.STABLE
    return group, store, ids


async def test_first_member_joins_leads_and_gets_its_assignment():
    group, store = make_group()
    first = await join(group, v4=True, client_id="app")
    assert first.error is ErrorCode.member_id_required
    assert first.member_id.startswith("app-")
    assert group.state is GroupState.EMPTY and not group.is_empty()  # the pending member counts

    result = await join(group, first.member_id, v4=True, client_id="app")
    assert result.error is ErrorCode.none
    assert (result.generation_id, result.leader_id, result.member_id) == (1, first.member_id, first.member_id)
    assert (result.protocol_type, result.protocol_name) == ("consumer", "range")
    assert [(m.member_id, m.metadata) for m in result.members] == [(first.member_id, b"range-metadata")]
    assert group.state is GroupState.COMPLETING_REBALANCE

    synced = await sync(group, first.member_id, 1, {first.member_id: b"all of it"})
    assert (synced.error, synced.assignment, synced.protocol_name) == (ErrorCode.none, b"all of it", "range")
    assert group.state is GroupState.STABLE
    stored = store.snapshots[-1]
    assert (stored.generation_id, stored.leader_id, stored.protocol_name) == (1, first.member_id, "range")
    assert [(m.member_id, m.assignment, m.subscription) for m in stored.members] == [
        (first.member_id, b"all of it", b"range-metadata")
    ]


async def test_new_member_triggers_a_rebalance_and_only_the_leader_gets_the_members():
    group, _, (leader,) = await stable_group(1)
    newcomer = join(group)
    await wait_until(lambda: group.state is GroupState.PREPARING_REBALANCE)
    assert group.heartbeat(leader, None, 1) is ErrorCode.rebalance_in_progress
    assert not newcomer.done()  # waits for the leader to rejoin

    leader_join = await join(group, leader)
    follower_join = await newcomer
    assert leader_join.generation_id == follower_join.generation_id == 2
    assert leader_join.leader_id == follower_join.leader_id == leader
    assert {m.member_id for m in leader_join.members} == {leader, follower_join.member_id}
    assert follower_join.members == []

    follower_sync = sync(group, follower_join.member_id, 2)
    await asyncio.sleep(0)
    assert not follower_sync.done()  # followers wait for the leader's assignments
    leader_sync = await sync(group, leader, 2, {leader: b"p0", follower_join.member_id: b"p1"})
    assert leader_sync.assignment == b"p0"
    assert (await follower_sync).assignment == b"p1"
    assert group.heartbeat(follower_join.member_id, None, 2) is ErrorCode.none


async def test_session_expiry_removes_the_member_and_rebalances():
    group, _ = make_group()
    keeper = (await join(group)).member_id
    await sync(group, keeper, 1, {keeper: b"a"})
    quiet = join(group, session_ms=300)
    await wait_until(lambda: group.state is GroupState.PREPARING_REBALANCE)
    await join(group, keeper)
    quiet_id = (await quiet).member_id
    await asyncio.gather(sync(group, keeper, 2, {keeper: b"a", quiet_id: b"b"}), sync(group, quiet_id, 2))
    assert group.state is GroupState.STABLE

    # Nobody heartbeats: the quiet member's short session runs out, the keeper's long one does not.
    await wait_until(lambda: group.state is not GroupState.STABLE)
    assert quiet_id not in group.members
    assert group.heartbeat(quiet_id, None, 2) is ErrorCode.unknown_member_id
    assert group.heartbeat(keeper, None, 2) is ErrorCode.rebalance_in_progress
    rejoined = await join(group, keeper)
    assert (rejoined.generation_id, [m.member_id for m in rejoined.members]) == (3, [keeper])


async def test_rebalance_timeout_drops_a_member_that_does_not_rejoin():
    group, _, (first, silent) = await stable_group(2, rebalance_ms=400)
    rejoin = join(group, first, rebalance_ms=400)  # the leader asks for a new assignment
    result = await asyncio.wait_for(rejoin, 20)
    assert result.generation_id == 3
    assert [m.member_id for m in result.members] == [first]
    assert silent not in group.members
    assert group.heartbeat(silent, None, 2) is ErrorCode.unknown_member_id


async def test_static_member_rejoining_unchanged_takes_its_place_without_a_rebalance():
    group, store, (first, second) = await stable_group(2, instance=None)
    static_join = join(group, instance="worker-1")
    await wait_until(lambda: group.state is GroupState.PREPARING_REBALANCE)
    rejoins = [join(group, first), join(group, second)]
    static = await static_join
    generation = static.generation_id
    await asyncio.gather(*rejoins)
    assignments = {first: b"A", second: b"B", static.member_id: b"S"}
    await asyncio.gather(*(sync(group, m, generation, assignments) for m in assignments))
    persisted = len(store.snapshots)

    restarted = await join(group, instance="worker-1")  # a restart: no member id yet
    assert restarted.error is ErrorCode.none
    assert restarted.member_id != static.member_id and restarted.member_id.startswith("worker-1-")
    assert restarted.generation_id == generation
    assert group.state is GroupState.STABLE
    assert len(store.snapshots) == persisted + 1  # the new member id is stored
    assert (await sync(group, restarted.member_id, generation, instance="worker-1")).assignment == b"S"
    # The old incarnation is fenced; everyone else carries on undisturbed.
    assert group.heartbeat(static.member_id, "worker-1", generation) is ErrorCode.fenced_instance_id
    assert group.heartbeat(first, None, generation) is ErrorCode.none
    assert group.validate_offset_commit(static.member_id, "worker-1", generation) is (
        ErrorCode.fenced_instance_id
    )


async def test_static_member_rejoining_with_a_new_protocol_choice_rebalances():
    group, _, (member,) = await stable_group(1, instance="worker-1")
    changed = join(group, instance="worker-1", protocols=[("roundrobin", b""), ("range", b"")])
    result = await changed
    assert result.error is ErrorCode.none and result.generation_id == 2
    assert result.protocol_name == "roundrobin"
    assert group.heartbeat(member, "worker-1", 1) is ErrorCode.fenced_instance_id


async def test_static_member_rejoining_with_new_subscription_bytes_keeps_its_place():
    # As Kafka: only a change of the selected protocol rebalances, not the subscription bytes (which a
    # restarted member's always change: they carry its owned partitions and generation).
    group, _, (member,) = await stable_group(1, instance="worker-1")
    result = await join(group, instance="worker-1", protocols=[("range", b"other topics")])
    assert result.error is ErrorCode.none and result.generation_id == 1
    assert group.state is GroupState.STABLE
    assert group.heartbeat(member, "worker-1", 1) is ErrorCode.fenced_instance_id


async def test_leave_removes_members_and_reports_each_one():
    group, _, (first, second, third) = await stable_group(3, instance=None)
    error, per_member = group.leave([(second, None), ("nobody", None)])
    assert error is ErrorCode.none
    assert per_member == [ErrorCode.none, ErrorCode.unknown_member_id]
    assert group.state is GroupState.PREPARING_REBALANCE
    results = await asyncio.gather(join(group, first), join(group, third))
    assert {m.member_id for m in results[0].members} == {first, third}

    error, per_member = group.leave([(first, None), (third, None)])
    assert per_member == [ErrorCode.none, ErrorCode.none]
    assert group.state is GroupState.EMPTY and group.is_empty()


async def test_leave_of_static_members_checks_the_instance():
    group, _, (member,) = await stable_group(1, instance="worker-1")
    _, errors = group.leave([("some-other-id", "worker-1"), ("", "worker-9")])
    assert errors == [ErrorCode.fenced_instance_id, ErrorCode.unknown_member_id]
    _, errors = group.leave([("", "worker-1")])  # a leave by instance id alone
    assert errors == [ErrorCode.none]
    assert member not in group.members


async def test_stale_generation_is_refused():
    group, _, (first, _) = await stable_group(2)
    generation = group.generation_id
    assert group.heartbeat(first, None, generation - 1) is ErrorCode.illegal_generation
    assert (await sync(group, first, generation - 1)).error is ErrorCode.illegal_generation
    assert group.validate_offset_commit(first, None, generation - 1) is ErrorCode.illegal_generation
    assert group.validate_offset_commit(first, None, generation) is ErrorCode.none
    # A non-member without a generation may not commit to a group that has members.
    assert group.validate_offset_commit("", None, -1) is ErrorCode.unknown_member_id


async def test_unknown_members_are_refused():
    group, _, _ = await stable_group(1)
    assert group.heartbeat("stranger", None, 1) is ErrorCode.unknown_member_id
    assert (await sync(group, "stranger", 1)).error is ErrorCode.unknown_member_id
    assert (await join(group, "stranger")).error is ErrorCode.unknown_member_id
    assert group.validate_offset_commit("stranger", None, 1) is ErrorCode.unknown_member_id
    empty, _ = make_group()
    assert empty.validate_offset_commit("", None, -1) is ErrorCode.none  # assign()-style commits
    assert empty.heartbeat("stranger", None, 0) is ErrorCode.unknown_member_id


async def test_group_max_size():
    group, _ = make_group(max_size=1)
    member = (await join(group)).member_id
    assert (await join(group)).error is ErrorCode.group_max_size_reached
    assert (await join(group, v4=True)).error is ErrorCode.group_max_size_reached
    assert list(group.members) == [member]


async def test_inconsistent_protocols_are_refused():
    group, _, (member,) = await stable_group(1)
    assert (await join(group, protocol_type="connect")).error is ErrorCode.inconsistent_group_protocol
    assert (await join(group, protocols=[("sticky", b"")])).error is ErrorCode.inconsistent_group_protocol
    empty, _ = make_group()
    assert (await join(empty, protocols=[])).error is ErrorCode.inconsistent_group_protocol
    assert (await join(empty, protocol_type="")).error is ErrorCode.inconsistent_group_protocol
    wrong_name = await sync(group, member, 1, protocol_type="consumer", protocol_name="roundrobin")
    assert wrong_name.error is ErrorCode.inconsistent_group_protocol
    wrong_type = await sync(group, member, 1, protocol_type="connect")
    assert wrong_type.error is ErrorCode.inconsistent_group_protocol


async def test_protocol_is_chosen_by_the_members_votes():
    group, _ = make_group(initial_rebalance_delay_ms=200)
    preferences = [
        [("range", b"r"), ("roundrobin", b"rr")],
        [("roundrobin", b"rr"), ("range", b"r"), ("sticky", b"s")],
        [("sticky", b"s"), ("roundrobin", b"rr"), ("range", b"r")],
    ]
    results = await asyncio.gather(*(join(group, protocols=p) for p in preferences))
    assert {r.protocol_name for r in results} == {"roundrobin"}
    assert {r.generation_id for r in results} == {1}  # one rebalance for all, thanks to the delay


async def test_session_timeout_bounds():
    group, _ = make_group(min_session_timeout_ms=1000, max_session_timeout_ms=5000)
    assert (await join(group, session_ms=999)).error is ErrorCode.invalid_session_timeout
    assert (await join(group, session_ms=5001)).error is ErrorCode.invalid_session_timeout
    assert (await join(group, session_ms=5000)).error is ErrorCode.none


async def test_a_failed_persist_reaches_every_member_and_restarts_the_rebalance():
    group, store, (first, second) = await stable_group(2)
    rejoin = [join(group, first), join(group, second)]
    generation = (await asyncio.gather(*rejoin))[0].generation_id
    store.error = ErrorCode.coordinator_not_available
    follower = sync(group, second, generation)
    leader = sync(group, first, generation, {first: b"a", second: b"b"})
    assert (await leader).error is ErrorCode.coordinator_not_available
    assert (await follower).error is ErrorCode.coordinator_not_available
    assert group.state is GroupState.PREPARING_REBALANCE


async def test_member_leaving_during_sync_restarts_the_rebalance():
    group, _, (first, second) = await stable_group(2)
    generation = (await asyncio.gather(join(group, first), join(group, second)))[0].generation_id
    follower = sync(group, second, generation)
    await asyncio.sleep(0)
    group.leave([(first, None)])
    assert (await follower).error is ErrorCode.rebalance_in_progress
    assert group.validate_offset_commit(second, None, generation) is ErrorCode.none  # still a member


def subscription(*topics: str) -> bytes:
    return encode_subscription(Subscription(topics=topics))


async def test_subscribed_topics_and_snapshot_restore():
    group, store = make_group()
    assert group.subscribed_topics() == set()
    a = join(group, protocols=[("range", subscription("clicks", "views"))])
    await wait_until(lambda: group.state is GroupState.COMPLETING_REBALANCE)
    a_id = (await a).member_id
    b = join(group, protocols=[("range", subscription("views", "orders"))], instance="b")
    await wait_until(lambda: group.state is GroupState.PREPARING_REBALANCE)
    await join(group, a_id, protocols=[("range", subscription("clicks", "views"))])
    b_id = (await b).member_id
    await asyncio.gather(sync(group, a_id, 2, {a_id: b"A", b_id: b"B"}), sync(group, b_id, 2))
    assert group.subscribed_topics() == {"clicks", "views", "orders"}
    assert subscription_topics(b"\x00") is None

    restored = Group.restore(store.snapshots[-1], group.config, store.persist, group_id="g")
    assert restored.state is GroupState.STABLE and restored.generation_id == 2
    assert restored.subscribed_topics() == {"clicks", "views", "orders"}
    assert restored.heartbeat(b_id, "b", 2) is ErrorCode.none
    assert (await sync(restored, a_id, 2)).assignment == b"A"
    described = restored.describe()
    assert (described.state, described.protocol_type, described.protocol_name) == (
        GroupState.STABLE,
        "consumer",
        "range",
    )
    assert {(m.member_id, m.assignment) for m in described.members} == {(a_id, b"A"), (b_id, b"B")}
    restored.shutdown()
    group.shutdown()


async def test_shutdown_answers_waiting_requests_and_dead_groups_refuse():
    group, _, (first, second) = await stable_group(2)
    waiting = join(group, first)
    await wait_until(lambda: group.state is GroupState.PREPARING_REBALANCE)
    group.shutdown()
    assert (await waiting).error is ErrorCode.not_coordinator
    assert group.state is GroupState.DEAD
    assert (await join(group)).error is ErrorCode.coordinator_not_available
    assert group.heartbeat(second, None, 2) is ErrorCode.coordinator_not_available
    assert group.leave([(second, None)])[0] is ErrorCode.coordinator_not_available
    assert group.validate_offset_commit(second, None, 2) is ErrorCode.coordinator_not_available
    assert group.describe().members == []


async def test_an_emptied_group_keeps_its_protocol_type_and_is_stored_empty():
    group, store, (member,) = await stable_group(1)
    group.leave([(member, None)])
    assert group.state is GroupState.EMPTY
    await wait_until(lambda: store.snapshots[-1].members == [])
    stored = store.snapshots[-1]
    assert (stored.protocol_type, stored.protocol_name, stored.generation_id) == ("consumer", None, 2)
    assert group.describe().protocol_type == "consumer"
    assert group.validate_offset_commit("", None, -1) is ErrorCode.none


async def test_a_static_replacement_that_cannot_be_stored_is_undone():
    group, store, (member,) = await stable_group(1, instance="worker-1")
    store.error = ErrorCode.not_coordinator
    failed = await join(group, instance="worker-1")
    assert failed.error is ErrorCode.not_coordinator
    assert list(group.members) == [member] and group.leader_id == member
    assert group.heartbeat(member, "worker-1", 1) is ErrorCode.none
    assert group.state is GroupState.STABLE


async def test_a_leader_that_never_syncs_is_dropped_after_the_rebalance_timeout():
    group, _, (leader, follower) = await stable_group(2, rebalance_ms=400)
    rejoined = await asyncio.gather(
        join(group, leader, rebalance_ms=400), join(group, follower, rebalance_ms=400)
    )
    generation = rejoined[0].generation_id
    waiting = await sync(group, follower, generation)  # the leader keeps its assignment to itself
    assert waiting.error is ErrorCode.rebalance_in_progress
    assert leader not in group.members and follower in group.members
    assert group.state is GroupState.PREPARING_REBALANCE
