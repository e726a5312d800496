"""Client quotas on a live broker: kafka-python sets and describes them with Kafka's admin APIs, the
`backbone quotas` command writes and shows the same ZooKeeper entities, bad requests get Kafka's error codes,
and a producer limited to a rate is held to it (throttle_time_ms in its answers, its connection muted)."""

from __future__ import annotations

import time

import pytest
from cli_support import run, run_ok
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.protocol.admin.client_quotas import AlterClientQuotasRequest, DescribeClientQuotasRequest
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from backbone.client import Admin, NewTopic
from backbone.coordination import find_free_port
from backbone.coordination.quotas import CLIENT_ID
from backbone.protocol.errors import ErrorCode
from tests.helpers.batches import batch_of_size
from tests.helpers.requests import produce_request
from tests.helpers.wire import RawConnection
from tests.integration.test_broker_metrics import scrape, value
from tests.integration.test_security_acls import acl_broker, sasl  # noqa: F401 - acl_broker is a fixture

pytestmark = pytest.mark.integration

INVALID_REQUEST = int(ErrorCode.invalid_request)
Entity = list[tuple[str, str | None]]


def alter(
    admin: KafkaAdminClient, *entries: tuple[Entity, dict[str, float | None]], validate_only: bool = False
):
    """AlterClientQuotas with kafka-python; a value None removes the key. Answers [(error, message)]."""
    request = AlterClientQuotasRequest(
        entries=[
            AlterClientQuotasRequest.EntryData(
                entity=[
                    AlterClientQuotasRequest.EntryData.EntityData(entity_type=t, entity_name=n)
                    for t, n in entity
                ],
                ops=[
                    AlterClientQuotasRequest.EntryData.OpData(key=k, value=v or 0.0, remove=v is None)
                    for k, v in ops.items()
                ],
            )
            for entity, ops in entries
        ],
        validate_only=validate_only,
    )
    response = admin._manager.run(admin._manager.send, request)
    return [(e.error_code, e.error_message) for e in response.entries]


def describe(admin: KafkaAdminClient, *components: tuple[str, int, str | None], strict: bool = False):
    """DescribeClientQuotas with kafka-python: (error code, {entity: {key: value}})."""
    request = DescribeClientQuotasRequest(
        components=[
            DescribeClientQuotasRequest.ComponentData(entity_type=t, match_type=m, match=n)
            for t, m, n in components
        ],
        strict=strict,
    )
    response = admin._manager.run(admin._manager.send, request)
    found = {
        tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry.values}
        for entry in response.entries or []
    }
    return response.error_code, found


@pytest.fixture
def kafka_admin(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10_000)
    try:
        yield admin
    finally:
        admin.close()


def test_kafka_python_sets_and_describes_quotas_and_the_cli_sees_them(
    broker, kafka_admin, zookeeper, chroot: str, wait_for
) -> None:
    alice_app = [("user", "alice"), ("client-id", "app")]
    assert (
        alter(
            kafka_admin,
            (alice_app, {"producer_byte_rate": 1048576, "request_percentage": 50.5}),
            ([("client-id", None)], {"consumer_byte_rate": 2000000}),
            ([("user", "CN=bob,O=x")], {"producer_byte_rate": 1000}),
        )
        == [(0, None)] * 3
    )
    error, everything = describe(kafka_admin)
    assert error == 0
    assert everything == {
        (("user", "alice"), ("client-id", "app")): {
            "producer_byte_rate": 1048576.0,
            "request_percentage": 50.5,
        },
        (("client-id", None),): {"consumer_byte_rate": 2000000.0},
        (("user", "CN=bob,O=x"),): {"producer_byte_rate": 1000.0},
    }
    assert describe(kafka_admin, ("user", 0, "alice"), strict=True)[1] == {}  # alice has no user-only quota
    assert list(describe(kafka_admin, ("user", 0, "alice"))[1]) == [(("user", "alice"), ("client-id", "app"))]
    assert list(describe(kafka_admin, ("client-id", 1, None), strict=True)[1]) == [(("client-id", None),)]
    assert list(describe(kafka_admin, ("user", 2, None), strict=True)[1]) == [(("user", "CN=bob,O=x"),)]

    zk = ["--zookeeper", zookeeper.connect_string + chroot]
    shown = run_ok("quotas", "describe", *zk).decode()
    assert "user=alice client-id=app\tproducer_byte_rate=1048576,request_percentage=50.5" in shown
    assert "client-id=<default>\tconsumer_byte_rate=2000000" in shown
    run_ok("quotas", "alter", "--user-default", "--add", "request_percentage=25", *zk)
    run_ok("quotas", "alter", "--user", "alice", "--client-id", "app", "--delete", "request_percentage", *zk)
    wait_for(
        lambda: (
            describe(kafka_admin, ("user", 1, None))[1] == {(("user", None),): {"request_percentage": 25.0}}
        ),
        what="the CLI's default-user quota described by the broker",
    )
    assert describe(kafka_admin, ("user", 0, "alice"))[1] == {
        (("user", "alice"), ("client-id", "app")): {"producer_byte_rate": 1048576.0}
    }
    assert alter(kafka_admin, (alice_app, {"producer_byte_rate": None})) == [(0, None)]
    assert describe(kafka_admin, ("user", 0, "alice"))[1] == {}

    bad = run("quotas", "alter", "--user", "alice", "--add", "producer_byte_rate=1.5", *zk)
    assert bad.returncode == 2 and b"must be a Long" in bad.stderr
    bad = run("quotas", "alter", "--add", "producer_byte_rate=100", *zk)
    assert bad.returncode == 2 and b"--user NAME" in bad.stderr


def test_the_quota_apis_are_advertised(broker) -> None:
    with RawConnection(broker.bootstrap) as raw:
        answer = raw.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    versions = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in answer.api_keys}
    assert versions[48] == (0, 1) and versions[49] == (0, 1)  # DescribeClientQuotas, AlterClientQuotas


def test_bad_quota_requests_get_kafkas_error_codes(kafka_admin) -> None:
    answers = alter(
        kafka_admin,
        ([("user", "ok")], {"producer_byte_rate": 100}),
        ([("user", "x")], {"SCRAM-SHA-256": 1}),
        ([("user", "x")], {"producer_byte_rate": 10.5}),
        ([("user", "x")], {"consumer_byte_rate": -1}),
        ([("user", "a"), ("user", "b")], {"producer_byte_rate": 1}),
        ([("group", "g")], {"producer_byte_rate": 1}),
        ([("user", "")], {"producer_byte_rate": 1}),
        ([], {"producer_byte_rate": 1}),
    )
    assert [code for code, _ in answers] == [0] + [INVALID_REQUEST] * 7
    assert "Invalid configuration key SCRAM-SHA-256" in answers[1][1]
    assert "must be a Long" in answers[2][1]
    assert alter(kafka_admin, ([("user", "dry")], {"producer_byte_rate": 5}), validate_only=True) == [
        (0, None)
    ]
    assert set(describe(kafka_admin)[1]) == {(("user", "ok"),)}  # neither the refused nor the dry run
    for components in ([("group", 2, None)], [("user", 2, None), ("user", 1, None)], [("user", 9, None)]):
        error, _ = describe(kafka_admin, *components)
        assert error == INVALID_REQUEST, components


def test_a_producer_limited_to_a_rate_is_held_to_it(broker_factory, zookeeper, chroot: str, wait_for) -> None:
    metrics_port = find_free_port()
    broker = broker_factory(1, quota_window_num=2, quota_window_size_seconds=1, metrics_port=metrics_port)
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.create_topics([NewTopic("limited", 1, 1)])
    rate = 200_000
    zk = ["--zookeeper", zookeeper.connect_string + chroot]
    run_ok("quotas", "alter", "--client-id", "tests", "--add", f"producer_byte_rate={rate}", *zk)
    run_ok("quotas", "alter", "--client-id", "greedy", "--add", f"producer_byte_rate={rate}", *zk)

    # Raw requests show Kafka's protocol: a throttled answer comes at once with throttle_time_ms, and the
    # broker reads nothing more from the connection until that time is over.
    batch = batch_of_size(150_000, record_size=10_000)
    with RawConnection(broker.bootstrap) as raw:
        last: list[tuple[int, float]] = []

        def throttled() -> bool:
            answer = raw.request(produce_request("limited", 0, batch))
            assert answer.responses[0].partition_responses[0].error_code == ErrorCode.none
            last.append((int(answer.throttle_time.total_seconds() * 1000), time.monotonic()))
            return last[-1][0] > 0

        wait_for(throttled, what="a produce answer with throttle_time_ms")
        throttle_ms, answered = last[-1]
        raw.request(produce_request("limited", 0, batch))
        assert time.monotonic() - answered >= throttle_ms / 1000 * 0.9  # read only after the throttle

    # A standard producer, as fast as it can for a few seconds, is held to the rate.
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, client_id="greedy", linger_ms=5, acks=1)
    try:
        payload = b"x" * 1000
        sent = 0
        started = time.monotonic()
        while time.monotonic() - started < 6:
            producer.send("limited", payload)
            sent += len(payload)
            if sent % 200_000 == 0:
                producer.flush()
        producer.flush()
        elapsed = time.monotonic() - started
    finally:
        producer.close()
    # The windows let a burst of one window through before the first throttle; the rest is held to the rate.
    assert sent <= rate * (elapsed + 1) * 1.1, (sent, elapsed)
    samples = scrape(metrics_port)
    assert value(samples, "backbone_broker_quota_throttled_total", quota="producer_byte_rate") > 0
    assert value(samples, "backbone_broker_quota_throttle_seconds_total", quota="producer_byte_rate") > 0


def test_a_consumer_limited_to_a_rate_is_held_to_it(broker_factory, cluster_store) -> None:
    rate = 200_000
    # Set before the broker starts: it reads every quota entity at start.
    cluster_store.alter_client_quota(((CLIENT_ID, "reader"),), {"consumer_byte_rate": rate})
    metrics_port = find_free_port()
    broker = broker_factory(1, quota_window_num=2, quota_window_size_seconds=1, metrics_port=metrics_port)
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.create_topics([NewTopic("limited", 1, 1)])
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, client_id="writer", batch_size=16_384)
    try:
        for _ in range(800):
            producer.send("limited", b"y" * 1000)
        producer.flush()
    finally:
        producer.close()
    consumer = KafkaConsumer(
        "limited",
        bootstrap_servers=broker.bootstrap,
        client_id="reader",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        fetch_max_bytes=1 << 20,
        consumer_timeout_ms=30_000,
    )
    try:
        received = 0
        started = time.monotonic()
        for message in consumer:
            received += len(message.value)
            if received >= 800_000:
                break
        elapsed = time.monotonic() - started
    finally:
        consumer.close()
    assert received == 800_000
    assert received <= rate * (elapsed + 1) * 1.1, (received, elapsed)
    samples = scrape(metrics_port)
    assert value(samples, "backbone_broker_quota_throttled_total", quota="consumer_byte_rate") > 0


def test_quota_apis_need_cluster_permissions(acl_broker) -> None:  # noqa: F811 - the fixture
    _, sasl_port = acl_broker
    refused = int(ErrorCode.cluster_authorization_failed)
    for user, expected in (("alice", refused), ("admin", 0)):  # admin is a super user
        admin = KafkaAdminClient(request_timeout_ms=10_000, **sasl(sasl_port, user))
        try:
            assert alter(admin, ([("user", "alice")], {"producer_byte_rate": 100})) == [
                (expected, "ALTER_CONFIGS on the cluster is needed" if expected else None)
            ]
            assert describe(admin)[0] == expected
        finally:
            admin.close()
