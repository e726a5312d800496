"""Group membership on a real broker: kafka-python consumers in one group share a topic's partitions, a member
that closes hands its partitions to the others, DescribeGroups and ListGroups show the group, and bad
JoinGroup, SyncGroup, Heartbeat and LeaveGroup requests get Kafka's error codes."""

from __future__ import annotations

import datetime
import importlib
import threading
from typing import Any

import pytest
from kafka import ConsumerRebalanceListener, KafkaAdminClient, KafkaConsumer
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta

from backbone.broker.handlers.common import build
from backbone.client import Admin, NewTopic
from backbone.dev.processes import BrokerProcess
from tests.helpers.names import unique_name
from tests.helpers.wire import RawConnection

pytestmark = pytest.mark.integration

PARTITIONS = 6
GROUP_BROKER = {
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 1000,
    "offsets.topic.replication.factor": 1,
    "offsets.topic.num.partitions": 3,
    "num.partitions": PARTITIONS,
}
RETRIABLE = {
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.not_coordinator,
    ErrorCode.coordinator_not_available,
}


@pytest.fixture
def broker(broker_factory) -> BrokerProcess:
    return broker_factory(1, **GROUP_BROKER)


@pytest.fixture
def topic(broker: BrokerProcess, wait_for) -> str:
    name = unique_name("membership")
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        admin.create_topics([NewTopic(name, PARTITIONS, 1)])

        # kafka-python's group leader assigns from the metadata it holds: a topic the broker's metadata does
        # not show yet gets no assignment until the leader's next refresh (metadata.max.age.ms, 5 minutes).
        def led() -> bool:
            partitions = admin.describe_topics([name])[name].partitions
            return len(partitions) == PARTITIONS and all(p.leader >= 0 for p in partitions)

        wait_for(led, what=f"{name}'s partitions led")
    return name


class Member:
    """A kafka-python consumer polling in its own thread (it is not thread-safe); its share copied out."""

    def __init__(
        self, bootstrap: str, group: str, topic: str, instance: str | None = None, session_ms: int = 6000
    ) -> None:
        self.consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            group_instance_id=instance,
            session_timeout_ms=session_ms,
            heartbeat_interval_ms=500,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=100,
        )
        self.assignments = 0  # how many times the group gave this member partitions (one per rebalance)
        self.consumer.subscribe([topic], listener=CountAssignments(self))
        self.owned: frozenset[int] = frozenset()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.consumer.poll(timeout_ms=100)
                self.owned = frozenset(tp.partition for tp in self.consumer.assignment())
        finally:
            self.consumer.close()  # leaves the group (LeaveGroup), as a closing application does

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        assert not self._thread.is_alive(), "consumer did not close"


class CountAssignments(ConsumerRebalanceListener):
    def __init__(self, member: Member) -> None:
        self.member = member

    def on_partitions_revoked(self, revoked: Any) -> None:
        pass

    def on_partitions_assigned(self, assigned: Any) -> None:
        self.member.assignments += 1


def split_evenly(members: list[Member]) -> bool:
    """Every partition owned by exactly one member, and the members' shares differ by at most one."""
    shares = [m.owned for m in members]
    owned = [p for share in shares for p in share]
    sizes = [len(share) for share in shares]
    return sorted(owned) == list(range(PARTITIONS)) and max(sizes) - min(sizes) <= 1


def test_consumers_split_partitions_and_take_over_a_closed_members_share(broker, topic, wait_for):
    group = unique_name("group")
    members = [Member(broker.bootstrap, group, topic) for _ in range(3)]
    try:
        wait_for(lambda: split_evenly(members), timeout=90, what="three members sharing six partitions")
        assert all(len(m.owned) == 2 for m in members)

        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            descriptions: list[dict] = []

            def described_stable() -> bool:
                descriptions.append(admin.describe_groups([group])[group])
                return descriptions[-1]["group_state"] == "Stable"

            # A kafka-python leader may rejoin once its metadata settles (a rebalance); wait for it to end.
            wait_for(described_stable, timeout=60, what="the group described as Stable")
            described = descriptions[-1]
            assert (described["error"], described["protocol_type"]) == (None, "consumer")
            assert len(described["members"]) == 3
            listed = {g["group_id"]: g for g in admin.list_groups()}
            assert listed[group]["protocol_type"] == "consumer"
            assert [g["group_id"] for g in admin.list_groups(states_filter=["Stable"])].count(group) == 1
            assert group not in [g["group_id"] for g in admin.list_groups(states_filter=["Empty"])]

            leaving = members.pop(0)
            taken_before = leaving.owned
            leaving.close()
            wait_for(lambda: split_evenly(members), timeout=90, what="two members sharing six partitions")
            assert all(len(m.owned) == 3 for m in members)
            assert taken_before <= members[0].owned | members[1].owned

            wait_for(
                lambda: len(admin.describe_groups([group])[group]["members"]) == 2,
                timeout=30,
                what="the group described with two members",
            )
        finally:
            admin.close()
    finally:
        for member in members:
            member.close()

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        wait_for(
            lambda: admin.describe_groups([group])[group]["group_state"] == "Empty",
            timeout=30,
            what="the group empty after every member closed",
        )
        assert group in [g["group_id"] for g in admin.list_groups(states_filter=["empty"])]
    finally:
        admin.close()


def test_a_restarted_static_member_takes_its_place_without_a_rebalance(broker, topic, wait_for):
    group = unique_name("static")
    # A long session: the restart must come back long before the coordinator would give up on it.
    session_ms = 60_000
    # The first member leads. The restarted one is a follower: a restarted leader recomputes the assignment
    # as soon as its metadata arrives and rejoins, and a leader rejoining rebalances (as in Kafka).
    leader = Member(broker.bootstrap, group, topic, instance="leader", session_ms=session_ms)
    members = [leader]
    try:
        wait_for(lambda: len(leader.owned) == PARTITIONS, timeout=90, what="the leader owning all")
        members.append(Member(broker.bootstrap, group, topic, instance="follower", session_ms=session_ms))
        wait_for(lambda: split_evenly(members), timeout=90, what="two static members sharing partitions")
        follower = members.pop()
        share, assignments = follower.owned, leader.assignments
        follower.close()  # a static member does not leave the group when it closes
        restarted = Member(broker.bootstrap, group, topic, instance="follower", session_ms=session_ms)
        members.append(restarted)
        wait_for(lambda: restarted.owned == share, timeout=60, what="the restarted member owning its share")
        assert leader.assignments == assignments  # the leader saw no rebalance
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            described = admin.describe_groups([group])[group]
            assert described["group_state"] == "Stable"
            assert sorted(m["group_instance_id"] for m in described["members"]) == ["follower", "leader"]
        finally:
            admin.close()
    finally:
        for member in members:
            member.close()


# -- raw requests -------------------------------------------------------------------------------------


def request_module(api: str, version: int) -> Any:
    return importlib.import_module(f"kio.schema.{api}.v{version}.request")


def served(connection: RawConnection, request: Any, wait_for) -> Any:
    """The answer once the coordinator is found and loaded (retriable coordinator errors are retried)."""
    answers: list[Any] = []

    def attempt() -> bool:
        answers.append(connection.request(request))
        return getattr(answers[-1], "error_code", ErrorCode.none) not in RETRIABLE

    wait_for(attempt, timeout=60, interval=0.2, what="the group coordinator")
    return answers[-1]


def find_coordinator(connection: RawConnection, group: str, wait_for) -> None:
    module = request_module("find_coordinator", 3)
    served(connection, module.FindCoordinatorRequest(key=group, key_type=0), wait_for)


def join_request(version: int, group: str, member: str = "", session_ms: int = 10_000, **fields: Any) -> Any:
    module = request_module("join_group", version)
    protocols = fields.pop("protocols", (("range", b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"),))
    return build(
        module.JoinGroupRequest,
        group_id=group,
        session_timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=session_ms)),
        rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
        member_id=member,
        group_instance_id=fields.pop("instance", None),
        protocol_type=fields.pop("protocol_type", "consumer"),
        protocols=tuple(module.JoinGroupRequestProtocol(name=n, metadata=m) for n, m in protocols),
        reason=None,
    )


def test_join_sync_heartbeat_and_leave_answer_bad_requests_with_kafka_codes(broker, wait_for):
    group = unique_name("raw")
    with RawConnection(broker.bootstrap, timeout=60) as connection:
        find_coordinator(connection, group, wait_for)
        # JoinGroup v4+: the member id comes first, then the real join.
        first = served(connection, join_request(9, group), wait_for)
        assert first.error_code == ErrorCode.member_id_required and first.member_id
        joined = connection.request(join_request(9, group, first.member_id))
        assert joined.error_code == ErrorCode.none
        assert (joined.generation_id, joined.leader, joined.protocol_name) == (1, first.member_id, "range")
        member, generation = joined.member_id, joined.generation_id

        sync = request_module("sync_group", 5)
        assignment = sync.SyncGroupRequestAssignment(member_id=member, assignment=b"mine")

        def sync_request(generation_id: int, member_id: str = member, **fields: Any) -> Any:
            return sync.SyncGroupRequest(
                group_id=group,
                generation_id=generation_id,
                member_id=member_id,
                group_instance_id=None,
                protocol_type=fields.get("protocol_type", "consumer"),
                protocol_name=fields.get("protocol_name", "range"),
                assignments=(assignment,),
            )

        assert connection.request(sync_request(generation + 1)).error_code == ErrorCode.illegal_generation
        wrong = connection.request(sync_request(generation, protocol_name="roundrobin"))
        assert wrong.error_code == ErrorCode.inconsistent_group_protocol
        assert (
            connection.request(sync_request(generation, "stranger")).error_code == ErrorCode.unknown_member_id
        )
        synced = connection.request(sync_request(generation))
        assert (synced.error_code, synced.assignment) == (ErrorCode.none, b"mine")

        heartbeat = request_module("heartbeat", 4)

        def beat(generation_id: int, member_id: str = member, group_id: str = group) -> ErrorCode:
            request = heartbeat.HeartbeatRequest(
                group_id=group_id, generation_id=generation_id, member_id=member_id, group_instance_id=None
            )
            return connection.request(request).error_code

        assert beat(generation) == ErrorCode.none
        assert beat(generation - 1) == ErrorCode.illegal_generation
        assert beat(generation, "stranger") == ErrorCode.unknown_member_id
        assert beat(generation, member, "") == ErrorCode.invalid_group_id

        # Bad joins: session timeout outside the broker's bounds, another protocol type, absurd group ids.
        bad_session = connection.request(join_request(5, group, session_ms=10))
        assert bad_session.error_code == ErrorCode.invalid_session_timeout
        other_type = connection.request(join_request(5, group, protocol_type="connect"))
        assert other_type.error_code == ErrorCode.inconsistent_group_protocol
        assert connection.request(join_request(5, "")).error_code == ErrorCode.invalid_group_id
        assert connection.request(join_request(5, "g" * 1000)).error_code == ErrorCode.invalid_group_id
        assert (
            connection.request(join_request(0, group, "stranger")).error_code == ErrorCode.unknown_member_id
        )

        leave = request_module("leave_group", 5)
        members = (
            leave.MemberIdentity(member_id="stranger", group_instance_id=None, reason=None),
            leave.MemberIdentity(member_id=member, group_instance_id=None, reason=None),
        )
        left = connection.request(leave.LeaveGroupRequest(group_id=group, members=members))
        assert left.error_code == ErrorCode.none
        assert [m.error_code for m in left.members] == [ErrorCode.unknown_member_id, ErrorCode.none]
        old_leave = request_module("leave_group", 0).LeaveGroupRequest(group_id=group, member_id=member)
        assert connection.request(old_leave).error_code == ErrorCode.unknown_member_id

        describe = request_module("describe_groups", 5)
        answer = connection.request(
            describe.DescribeGroupsRequest(
                groups=(group, unique_name("nobody")), include_authorized_operations=False
            )
        )
        assert [(g.error_code, g.group_state, len(g.members)) for g in answer.groups] == [
            (ErrorCode.none, "Empty", 0),
            (ErrorCode.none, "Dead", 0),
        ]
        listing = connection.request(
            request_module("list_groups", 4).ListGroupsRequest(states_filter=("EMPTY",))
        )
        assert group in [g.group_id for g in listing.groups]
    # The broker is still healthy: a new connection joins the same group again.
    with RawConnection(broker.bootstrap, timeout=60) as connection:
        rejoined = connection.request(join_request(3, group))
        assert (rejoined.error_code, rejoined.generation_id) == (ErrorCode.none, 3)


def test_every_served_version_is_answered(broker, wait_for):
    """Each version of each membership API decodes and encodes (fields come and go between versions)."""
    group = unique_name("versions")
    with RawConnection(broker.bootstrap, timeout=60) as connection:
        find_coordinator(connection, group, wait_for)
        for version in range(10):
            own_group = f"{group}-join-v{version}"
            joined = served(connection, join_request(version, own_group), wait_for)
            if version >= 4:
                assert joined.error_code == ErrorCode.member_id_required
                joined = connection.request(join_request(version, own_group, joined.member_id))
            assert (joined.error_code, joined.generation_id, joined.leader) == (
                ErrorCode.none,
                1,
                joined.member_id,
            )
            assert [m.member_id for m in joined.members] == [joined.member_id]

        joined = connection.request(join_request(0, group))
        member = joined.member_id
        for version in range(6):
            module = request_module("sync_group", version)
            request = build(
                module.SyncGroupRequest,
                group_id=group,
                generation_id=1,
                member_id=member,
                group_instance_id=None,
                protocol_type="consumer",
                protocol_name="range",
                assignments=(module.SyncGroupRequestAssignment(member_id=member, assignment=b"p"),),
            )
            synced = connection.request(request)
            assert (synced.error_code, synced.assignment) == (ErrorCode.none, b"p")
        for version in range(5):
            module = request_module("heartbeat", version)
            request = build(
                module.HeartbeatRequest,
                group_id=group,
                generation_id=1,
                member_id=member,
                group_instance_id=None,
            )
            assert connection.request(request).error_code == ErrorCode.none
        for version in range(6):
            module = request_module("describe_groups", version)
            request = build(module.DescribeGroupsRequest, groups=(group,), include_authorized_operations=True)
            (described,) = connection.request(request).groups
            assert (described.group_state, described.protocol_data) == ("Stable", "range")
            assert [(m.member_id, m.member_assignment) for m in described.members] == [(member, b"p")]
        for version in range(5):
            listing = connection.request(request_module("list_groups", version).ListGroupsRequest())
            assert group in [g.group_id for g in listing.groups]
        for version in range(6):
            module = request_module("leave_group", version)
            if version >= 3:
                identity = build(
                    module.MemberIdentity, member_id="stranger", group_instance_id=None, reason=None
                )
                left = connection.request(module.LeaveGroupRequest(group_id=group, members=(identity,)))
                assert [m.error_code for m in left.members] == [ErrorCode.unknown_member_id]
            else:
                request = module.LeaveGroupRequest(group_id=group, member_id="stranger")
                assert connection.request(request).error_code == ErrorCode.unknown_member_id


def test_a_silent_member_expires_and_the_group_empties(broker, wait_for):
    group = unique_name("silent")
    with RawConnection(broker.bootstrap, timeout=60) as connection:
        find_coordinator(connection, group, wait_for)
        joined = served(connection, join_request(3, group, session_ms=1500), wait_for)
        assert joined.error_code == ErrorCode.none
        describe = request_module("describe_groups", 5)

        def state() -> str:
            request = describe.DescribeGroupsRequest(groups=(group,), include_authorized_operations=False)
            return connection.request(request).groups[0].group_state

        assert state() == "CompletingRebalance"  # joined, never synced, never heartbeats
        wait_for(lambda: state() == "Empty", timeout=30, what="the silent member's session to expire")
        heartbeat = request_module("heartbeat", 4).HeartbeatRequest(
            group_id=group, generation_id=1, member_id=joined.member_id, group_instance_id=None
        )
        assert connection.request(heartbeat).error_code == ErrorCode.unknown_member_id
