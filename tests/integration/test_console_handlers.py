"""The console's handlers through aiohttp's test client, against a real broker (and a cluster that is
down): login, roles, CSRF, 404s and 400s with reasons, the pages, the API, /metrics and the actions."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from backbone.client import (
    AsyncAdmin,
    AsyncConsumer,
    AsyncProducer,
    ConfigResource,
    ConfigResourceType,
    NewTopic,
)
from backbone.console.app import STATE, build_app
from backbone.console.auth import hash_password
from backbone.console.config import parse
from backbone.console.history import HistoryStore
from backbone.coordination import find_free_port

pytestmark = pytest.mark.integration

PASSWORDS = {"olga": "operator-secret", "vic": "viewer-secret"}


@pytest.fixture
async def console(broker, tmp_path: Path) -> AsyncIterator[TestClient]:
    config = parse(
        {
            "sampling": {"interval": {"ms": 300}},
            "status": {"window": {"samples": 3}},
            "clusters": [
                {"name": "dc1", "bootstrap": {"servers": broker.bootstrap}},
                {"name": "gone", "bootstrap": {"servers": f"127.0.0.1:{find_free_port('127.0.0.1')}"}},
            ],
            "users": [
                {"name": "olga", "role": "operator", "password": {"hash": hash_password(PASSWORDS["olga"])}},
                {"name": "vic", "role": "viewer", "password": {"hash": hash_password(PASSWORDS["vic"])}},
            ],
        }
    )
    app = build_app(config, HistoryStore(f"sqlite:///{tmp_path}/history.db"))
    async with TestClient(TestServer(app)) as client:
        yield client


def form_token(page: str) -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)


async def login_form(client: TestClient, user: str, password: str) -> dict[str, str]:
    """The login form filled in, with the token the login page gave this client."""
    token = form_token(await (await client.get("/login")).text())
    return {"user": user, "password": password, "next": "/", "csrf_token": token}


async def log_in(client: TestClient, user: str) -> str:
    """Log in; returns the session's CSRF token, read from a page's form as a browser would."""
    answer = await client.post("/login", data=await login_form(client, user, PASSWORDS[user]))
    assert answer.status == 200 and answer.url.path == "/"
    return form_token(await answer.text())


async def sampled(client: TestClient, condition, what: str, timeout: float = 20.0):
    """Wait until the dc1 sampler's snapshot satisfies `condition` (returns the snapshot)."""
    sampler = client.app[STATE].samplers["dc1"]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sampler.snapshot.taken_ms and condition(sampler.snapshot):
            return sampler.snapshot
        await asyncio.sleep(0.05)
    pytest.fail(f"the console never saw {what}; last error: {sampler.snapshot.error}")


async def test_login_is_required_and_roles_and_csrf_are_enforced(console: TestClient) -> None:
    answer = await console.get("/clusters/dc1", allow_redirects=False)
    assert answer.status == 303 and answer.headers["Location"] == "/login?next=/clusters/dc1"
    assert (await console.get("/api/clusters")).status == 401
    forged = await console.post("/login", data={"user": "olga", "password": PASSWORDS["olga"]})
    assert forged.status == 403 and "CSRF token is missing or wrong" in await forged.text()
    wrong = await console.post("/login", data=await login_form(console, "olga", "nope"))
    assert wrong.status == 401 and "Wrong user name or password" in await wrong.text()
    answer = await console.post(
        "/login", data=await login_form(console, "vic", PASSWORDS["vic"]), allow_redirects=False
    )
    cookie = answer.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    csrf = await log_in(console, "vic")
    refused = await console.post(
        "/clusters/dc1/topics", data={"csrf_token": csrf, "name": "x", "partitions": "1"}
    )
    assert refused.status == 403 and "vic is a viewer" in await refused.text()
    assert (await console.post("/clusters/dc1/elect", data={"csrf_token": csrf})).status == 403

    csrf = await log_in(console, "olga")
    for token in ({}, {"csrf_token": "forged"}):
        forged = await console.post("/clusters/dc1/topics", data={"name": "x", "partitions": "1", **token})
        assert forged.status == 403 and "CSRF token" in await forged.text()
    await console.post("/logout", data={"csrf_token": csrf})
    assert (await console.get("/", allow_redirects=False)).status == 303


async def test_unknown_names_are_404_with_a_message_and_a_down_cluster_says_so(
    console: TestClient, broker
) -> None:
    await log_in(console, "vic")
    await sampled(console, lambda s: True, "a first sample")
    for path, said in [
        ("/clusters/nowhere", "no cluster named &#39;nowhere&#39;"),
        ("/clusters/dc1/topics/missing", "no topic named &#39;missing&#39;"),
        ("/clusters/dc1/groups/missing", "no consumer group named &#39;missing&#39;"),
    ]:
        answer = await console.get(path)
        assert answer.status == 404 and said in await answer.text(), path
    api = await console.get("/api/clusters/dc1/topics/missing")
    assert api.status == 404 and (await api.json())["error"] == "cluster dc1 has no topic named 'missing'"

    gone = console.app[STATE].samplers["gone"]
    deadline = time.monotonic() + 30
    while gone.snapshot.error is None and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    overview = await (await console.get("/")).text()
    assert "gone: cannot be reached" in overview
    assert re.search(r">dc1</a></td>\s*<td>datacenter</td>\s*<td>1 / 1</td>", overview), "dc1 still renders"
    assert "gone: cannot be reached" in await (await console.get("/clusters/gone")).text()


async def test_an_operator_creates_alters_and_deletes_a_topic_with_plans_and_a_log(
    console: TestClient, broker
) -> None:
    csrf = await log_in(console, "olga")
    form = {
        "csrf_token": csrf,
        "name": "orders",
        "partitions": "2",
        "replication_factor": "1",
        "retention_ms": "",
    }
    for bad, said in [
        ({"name": "no spaces"}, "a topic name is 1 to 249"),
        ({"partitions": "0"}, "partitions must be from 1 to 10000"),
        ({"partitions": "many"}, "partitions must be a whole number"),
        ({"replication_factor": "5"}, "replication_factor must be from 1 to 1"),
    ]:
        answer = await console.post("/clusters/dc1/topics", data={**form, **bad})
        assert answer.status == 400 and said in await answer.text(), bad
    plan = await console.post("/clusters/dc1/topics", data=form)
    assert "Create topic orders on dc1 with 2 partitions" in await plan.text()
    done = await console.post("/clusters/dc1/topics", data={**form, "confirmed": "yes"})
    assert done.status == 200 and "ok: done" in await done.text()
    await sampled(console, lambda s: "orders" in s.topics, "the new topic")

    config = {"csrf_token": csrf, "name": "retention.ms", "value": "3600000", "confirmed": "yes"}
    assert (
        await console.post("/clusters/dc1/topics/orders/configs", data={**config, "value": "soon"})
    ).status == 400
    assert (await console.post("/clusters/dc1/topics/orders/configs", data=config)).status == 200
    async with AsyncAdmin(bootstrap_servers=broker.bootstrap) as admin:
        resource = ConfigResource(ConfigResourceType.TOPIC, "orders")
        described = await admin.describe_configs([resource])
    assert described[resource]["retention.ms"].value == "3600000"

    grow = {"csrf_token": csrf, "count": "1", "confirmed": "yes"}
    assert (
        "count must be from 3"
        in await (await console.post("/clusters/dc1/topics/orders/partitions", data=grow)).text()
    )
    assert (
        await console.post("/clusters/dc1/topics/orders/partitions", data={**grow, "count": "3"})
    ).status == 200
    topic = await sampled(console, lambda s: len(s.topics["orders"].partitions) == 3, "three partitions")
    assert topic.topics["orders"].retention_ms == 3600000

    wrong = await console.post(
        "/clusters/dc1/topics/orders/delete", data={"csrf_token": csrf, "confirm": "order"}
    )
    assert wrong.status == 400 and "type its name (orders) exactly" in await wrong.text()
    assert (
        await console.post(
            "/clusters/dc1/topics/orders/delete", data={"csrf_token": csrf, "confirm": "orders"}
        )
    ).status == 200
    await sampled(console, lambda s: "orders" not in s.topics, "the topic gone")

    log = await (await console.get("/api/actions")).json()
    assert [(a["action"], a["user"], a["result"]) for a in reversed(log)] == [
        ("create topic", "olga", "ok: done"),
        ("alter config", "olga", "ok: done"),
        ("add partitions", "olga", "ok: done"),
        ("delete topic", "olga", "ok: done"),
    ]
    assert "alter config" in await (await console.get("/actions")).text()


async def test_messages_are_shown_escaped_as_text_json_or_hex(console: TestClient, broker) -> None:
    async with AsyncProducer(bootstrap_servers=broker.bootstrap) as producer:
        for value in (b"<script>alert(1)</script>", b'{"user": "ann", "n": 1}', b"\x00\xff"):
            await (await producer.send("clicks", value, key=b"k<1>", headers=[("src", b"<web>")]))
    await log_in(console, "vic")
    await sampled(console, lambda s: "clicks" in s.topics, "the topic")
    page = await (await console.get("/clusters/dc1/topics/clicks/messages?partition=0&offset=0")).text()
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "k&lt;1&gt;" in page and "&lt;web&gt;" in page
    as_json = await (
        await console.get("/api/clusters/dc1/topics/clicks/messages?offset=1&limit=1&format=json")
    ).json()
    assert as_json["records"][0]["value"] == '{\n  "user": "ann",\n  "n": 1\n}'
    as_hex = await (await console.get("/api/clusters/dc1/topics/clicks/messages?offset=2&format=hex")).json()
    assert [r["value"] for r in as_hex["records"]] == ["00 ff"] and as_hex["end_offset"] == 3
    wrong = [
        ("partition=7", "has no partition 7"),
        ("limit=0", "limit must be from 1"),
        ("format=html", "format must be one of"),
        ("time=yesterday", "neither epoch"),
    ]
    for query, said in wrong:
        answer = await console.get(f"/clusters/dc1/topics/clicks/messages?{query}")
        assert answer.status == 400 and said in await answer.text(), query
        assert "whole numbers" not in await answer.text() or query.startswith(("partition", "limit")), query


async def test_group_lag_status_history_metrics_and_an_offset_reset(console: TestClient, broker) -> None:
    async with AsyncProducer(bootstrap_servers=broker.bootstrap) as producer:
        for i in range(10):
            await (await producer.send("events", b"%d" % i, partition=0))
    async with AsyncConsumer(
        bootstrap_servers=broker.bootstrap,
        group_id="etl",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    ) as consumer:
        consumer.subscribe(["events"])
        taken = 0
        deadline = time.monotonic() + 30
        while taken < 4 and time.monotonic() < deadline:
            taken += sum(
                len(r) for r in (await consumer.poll(timeout_ms=500, max_records=4 - taken)).values()
            )
        await consumer.commit()
    csrf = await log_in(console, "olga")
    # Nobody consumes while 6 records wait: after a window of 3 samples Burrow's STOP rule fires.
    snapshot = await sampled(
        console, lambda s: s.groups.get("etl") and s.groups["etl"].verdict.condition == "STOP", "STOP"
    )
    assert snapshot.groups["etl"].total_lag == 6
    page = await (await console.get("/clusters/dc1/groups/etl")).text()
    assert "events partition 0: offset 4 has not moved for 3 samples and the group has no members" in page
    assert "<svg" in page and "<polyline" in page
    api = await (await console.get("/api/clusters/dc1/groups/etl?range=1h")).json()
    assert (api["status"], api["partitions"][0]["lag"], api["partitions"][0]["condition"]) == (
        "ERR",
        6,
        "STOP",
    )
    assert api["history"]["total_lag"][-1][1] == 6
    assert (await console.get("/api/clusters/dc1/groups/etl?range=forever")).status == 400
    metrics = await (await console.get("/metrics")).text()
    assert (
        'backbone_console_group_partition_lag{cluster="dc1",group="etl",partition="0",topic="events"} 6.0'
        in metrics
    )
    assert 'backbone_console_group_status{cluster="dc1",group="etl"} 2.0' in metrics
    assert 'backbone_console_cluster_reachable{cluster="gone"} 0.0' in metrics
    openapi = await (await console.get("/api/openapi.json")).json()
    group_api = openapi["paths"]["/api/clusters/{cluster}/groups/{group}"]["get"]
    assert [p["name"] for p in group_api["parameters"]] == ["cluster", "group", "range"]
    messages_api = openapi["paths"]["/api/clusters/{cluster}/topics/{topic}/messages"]["get"]
    assert {"partition", "offset", "time", "limit", "format"} <= {
        p["name"] for p in messages_api["parameters"]
    }

    reset = {"csrf_token": csrf, "topic": "events", "to": "earliest", "value": ""}
    plan = await (await console.post("/clusters/dc1/groups/etl/reset", data=reset)).text()
    assert re.search(r"<td>events</td><td>0</td><td>4</td><td>0</td>", plan), plan
    assert (
        await console.post("/clusters/dc1/groups/etl/reset", data={**reset, "to": "someday"})
    ).status == 400
    assert (
        await console.post("/clusters/dc1/groups/etl/reset", data={**reset, "confirmed": "yes"})
    ).status == 200
    await sampled(console, lambda s: s.groups["etl"].total_lag == 10, "the reset offsets")


@pytest.fixture
async def two_broker_console(broker_factory, tmp_path: Path) -> AsyncIterator[tuple[TestClient, str]]:
    from broker_fixtures import wait_until_brokers_see_each_other

    brokers = [broker_factory(1), broker_factory(2)]
    await asyncio.to_thread(wait_until_brokers_see_each_other, brokers)
    bootstrap = brokers[0].bootstrap
    config = parse(
        {
            "sampling": {"interval": {"ms": 300}},
            "clusters": [{"name": "dc1", "bootstrap": {"servers": bootstrap}}],
            "users": [
                {"name": "olga", "role": "operator", "password": {"hash": hash_password(PASSWORDS["olga"])}}
            ],
        }
    )
    app = build_app(config, HistoryStore(f"sqlite:///{tmp_path}/history.db"))
    async with TestClient(TestServer(app)) as client:
        yield client, bootstrap


async def test_reassign_with_progress_elect_preferred_leaders_and_produce_a_test_record(
    two_broker_console,
) -> None:
    console, bootstrap = two_broker_console
    async with AsyncAdmin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic("moved", replica_assignment={0: [1, 2]})])
    csrf = await log_in(console, "olga")
    await sampled(
        console, lambda s: "moved" in s.topics and s.topics["moved"].partitions[0].leader == 1, "the topic"
    )

    move = {"csrf_token": csrf, "partition": "0", "replicas": "2,1"}
    wrong = [
        ({"replicas": "2,2"}, "name each new replica"),
        ({"replicas": "3"}, "brokers 3 are not live"),
        ({"replicas": "two"}, "broker ids separated by commas"),
        ({"replicas": "1,2"}, "already has replicas [1, 2]: nothing would move"),
    ]
    for bad, said in wrong:
        answer = await console.post("/clusters/dc1/topics/moved/reassign", data={**move, **bad})
        assert answer.status == 400 and said in await answer.text(), bad
    plan = await (await console.post("/clusters/dc1/topics/moved/reassign", data=move)).text()
    assert re.search(r"<td>moved</td><td>0</td><td>1,2</td><td>2,1</td>", plan)
    done = await console.post("/clusters/dc1/topics/moved/reassign", data={**move, "confirmed": "yes"})
    assert done.status == 200 and "ok: started moved/0: [1, 2] -&gt; [2, 1]" in await done.text()
    snapshot = await sampled(
        console, lambda s: s.topics["moved"].partitions[0].replicas == (2, 1), "the move"
    )
    assert "no reassignment in progress" in await (await console.get("/clusters/dc1/reassignments")).text()

    # The move kept broker 1 leading, so broker 2 (now first) is the preferred leader but does not lead.
    assert snapshot.topics["moved"].partitions[0].leader == 1
    plan = await (await console.post("/clusters/dc1/elect", data={"csrf_token": csrf})).text()
    assert re.search(r"<td>moved</td><td>0</td><td>1</td><td>2</td>", plan)
    done = await (
        await console.post("/clusters/dc1/elect", data={"csrf_token": csrf, "confirmed": "yes"})
    ).text()
    assert "1 of 1 partitions moved to their preferred leader" in done
    await sampled(console, lambda s: s.topics["moved"].partitions[0].leader_is_preferred, "the election")

    record = {"csrf_token": csrf, "key": "k", "value": "<hello>", "partition": "0"}
    assert (
        await console.post("/clusters/dc1/topics/moved/produce", data={**record, "partition": "1"})
    ).status == 400
    produced = await (await console.post("/clusters/dc1/topics/moved/produce", data=record)).text()
    assert "ok: partition 0 offset 0" in produced
    page = await (await console.get("/clusters/dc1/topics/moved/messages?partition=0&offset=0")).text()
    assert "&lt;hello&gt;" in page
    actions = [a["action"] for a in await (await console.get("/api/actions")).json()]
    assert actions == ["produce", "elect preferred leaders", "reassign"]
