"""The console's pure parts: its configuration file, Burrow's rules, charts, and its history store's
refusal of a database it cannot use."""

from __future__ import annotations

from pathlib import Path

import pytest

from backbone.client import KafkaClientError
from backbone.console.actions import _failure
from backbone.console.burrow import ERR, OK, WARN, Observation, evaluate_partition
from backbone.console.charts import line_chart
from backbone.console.config import ConfigError, load, parse
from backbone.console.history import HistoryStore, HistoryUnavailable
from backbone.console.sampler import _refuses_connections
from backbone.console.snapshot import PartitionState
from backbone.protocol.errors import TopicAuthorizationFailedError

pytestmark = pytest.mark.unit

HASH = "$argon2id$v=19$m=65536,t=3,p=4$c2FsdHNhbHQ$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"


def test_a_config_file_names_clusters_mirrors_users_and_settings(tmp_path: Path) -> None:
    path = tmp_path / "console.toml"
    path.write_text(
        f"""
listeners = "http://127.0.0.1:9999"
sampling.interval.ms = 500
history.url = "sqlite:///{tmp_path}/h.db"
[[clusters]]
name = "dc1"
bootstrap.servers = "127.0.0.1:9092"
[[clusters]]
name = "aggregate"
bootstrap.servers = "127.0.0.1:9292"
role = "aggregate"
[[mirrors]]
source = "dc1"
target = "aggregate"
[[users]]
name = "alice"
role = "operator"
password.hash = "{HASH}"
[[webhooks]]
url = "http://127.0.0.1:1/hook"
"""
    )
    config = load(path)
    assert [(c.name, c.role) for c in config.clusters] == [("dc1", "datacenter"), ("aggregate", "aggregate")]
    assert config.mirrors[0].group == "mirror-dc1-aggregate"
    assert (config.host, config.port, config.interval_ms) == ("127.0.0.1", 9999, 500)
    assert config.user("alice").role == "operator"
    assert config.webhooks == ("http://127.0.0.1:1/hook",)


def test_a_properties_file_reads_as_its_toml_twin(tmp_path: Path) -> None:
    path = tmp_path / "console.properties"
    path.write_text(
        f"""
# Kafka-style names, one per line
listeners=http://127.0.0.1:9999
sampling.interval.ms = 500
history.url: sqlite:///{tmp_path}/h.db
clusters.dc1.bootstrap.servers=127.0.0.1:9092
clusters.aggregate.bootstrap.servers=127.0.0.1:9292
clusters.aggregate.role=aggregate
mirrors.dc1-up.source=dc1
mirrors.dc1-up.target=aggregate
users.alice.role=operator
users.alice.password.hash={HASH}
webhooks.alerts.url=http://127.0.0.1:1/hook
"""
    )
    config = load(path)
    assert [(c.name, c.role, c.bootstrap_servers) for c in config.clusters] == [
        ("dc1", "datacenter", "127.0.0.1:9092"),
        ("aggregate", "aggregate", "127.0.0.1:9292"),
    ]
    assert (config.mirrors[0].source, config.mirrors[0].group) == ("dc1", "mirror-dc1-aggregate")
    assert (config.host, config.port, config.interval_ms) == ("127.0.0.1", 9999, 500)
    assert config.history_url == f"sqlite:///{tmp_path}/h.db"
    assert (config.user("alice").role, config.user("alice").password_hash) == ("operator", HASH)
    assert config.webhooks == ("http://127.0.0.1:1/hook",)
    for line, said in [
        ("clusters.dc1=x", "write clusters.LABEL.SETTING=value"),
        ("listeners", "write key=value"),
        ("clusters.a.bootstrap.servers=h:1\nsampling.interval.ms=x", "sampling.interval.ms must be a whole"),
    ]:
        path.write_text(line + "\n")
        with pytest.raises(ConfigError, match=said):
            load(path)


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ({}, "name at least one cluster"),
        ({"clusters": [{"name": "a b", "bootstrap": {"servers": "x:1"}}]}, "may hold only"),
        ({"clusters": [{"name": "a"}]}, "bootstrap.servers"),
        ({"clusters": [{"name": "a", "bootstrap": {"servers": "x:1"}, "role": "hub"}]}, "role 'hub'"),
        (
            {
                "clusters": [{"name": "a", "bootstrap": {"servers": "x:1"}}],
                "mirrors": [{"source": "a", "target": "b"}],
            },
            "cluster 'b' is not among",
        ),
        (
            {
                "clusters": [{"name": "a", "bootstrap": {"servers": "x:1"}}],
                "users": [{"name": "u", "role": "admin"}],
            },
            "role 'admin'",
        ),
        (
            {
                "clusters": [{"name": "a", "bootstrap": {"servers": "x:1"}}],
                "users": [{"name": "u", "role": "viewer", "password": {"hash": "plain"}}],
            },
            "argon2 hash",
        ),
        (
            {
                "clusters": [{"name": "a", "bootstrap": {"servers": "x:1"}}],
                "sampling": {"interval": {"ms": 5}},
            },
            "100 to",
        ),
    ],
)
def test_a_wrong_config_says_what_to_write(data: dict, said: str) -> None:
    with pytest.raises(ConfigError, match=said):
        parse(data)


def observations(pairs: list[tuple[int, int]]) -> list[Observation]:
    return [Observation(1000 * i, offset, lag) for i, (offset, lag) in enumerate(pairs)]


def test_burrow_ok_when_lag_is_zero_now_or_was_zero_in_the_window() -> None:
    assert evaluate_partition("p0", observations([(1, 5), (2, 9), (3, 0)]), True, 10).status == OK
    assert evaluate_partition("p0", observations([(1, 0), (2, 9), (3, 12)]), True, 10).status == OK


def test_burrow_stop_when_offsets_stand_still_and_nobody_consumes() -> None:
    verdict = evaluate_partition("t partition 3", observations([(7, 120), (7, 900), (7, 4000)]), False, 10)
    assert (verdict.status, verdict.condition) == (ERR, "STOP")
    assert "t partition 3: offset 7 has not moved for 3 samples" in verdict.rule
    assert "4,000" in verdict.rule and "120" in verdict.rule


def test_burrow_stall_when_members_are_there_but_offsets_do_not_move() -> None:
    verdict = evaluate_partition("p3", observations([(7, 120), (7, 900), (7, 4000)]), True, 10)
    assert (verdict.status, verdict.condition) == (ERR, "STALL")
    assert verdict.rule == "p3: offsets have not moved for 3 samples while lag grew from 120 to 4,000"


def test_burrow_rewind_when_the_committed_offset_goes_back() -> None:
    verdict = evaluate_partition("p1", observations([(50, 3), (60, 4), (20, 40)]), True, 10)
    assert (verdict.status, verdict.condition) == (ERR, "REWIND")
    assert "from 60 to 20" in verdict.rule


def test_burrow_warn_when_offsets_move_but_lag_grows_every_time() -> None:
    verdict = evaluate_partition("p2", observations([(10, 5), (12, 8), (14, 20), (16, 31)]), True, 10)
    assert (verdict.status, verdict.condition) == (WARN, "WARN")
    assert "lag grew in each of the last 3 intervals, from 5 to 31" in verdict.rule
    moving_and_shrinking = observations([(10, 5), (12, 8), (20, 6), (22, 9)])
    assert evaluate_partition("p2", moving_and_shrinking, True, 10).status == OK


def test_burrow_looks_only_at_the_window() -> None:
    old_zero_then_stuck = observations([(1, 0)] + [(5, 10 + i) for i in range(5)])
    assert evaluate_partition("p", old_zero_then_stuck, True, 3).condition == "STALL"
    assert evaluate_partition("p", old_zero_then_stuck, True, 10).status == OK


def test_an_unusable_history_database_is_named_without_its_password() -> None:
    with pytest.raises(HistoryUnavailable) as raised:
        HistoryStore("postgresql+psycopg://console:secret@127.0.0.1:1/history")
    assert "postgresql+psycopg://console:***@127.0.0.1:1/history" in str(raised.value)
    assert "secret" not in str(raised.value)


def test_charts_escape_names_and_say_when_there_is_no_history() -> None:
    svg = line_chart([("<b>t</b>/0", [(0, 1), (1000, 5)])], "lag <of> g")
    assert "<b>t</b>" not in svg and "&lt;b&gt;t&lt;/b&gt;/0" in svg
    assert svg.count("<polyline") == 1
    assert "no history yet" in line_chart([("x", [])], "t")


def test_a_replica_on_a_down_broker_makes_its_partition_under_replicated_before_the_isr_shrinks() -> None:
    healthy = PartitionState(0, leader=1, replicas=(1, 2), isr=(1, 2))
    on_dead_broker = PartitionState(1, leader=1, replicas=(1, 2), isr=(1, 2), down=(2,))
    shrunk = PartitionState(2, leader=1, replicas=(1, 2), isr=(1,))
    led_by_the_dead = PartitionState(3, leader=2, replicas=(2, 1), isr=(2, 1), down=(2,))
    assert not healthy.under_replicated and not healthy.offline
    assert led_by_the_dead.offline and not on_dead_broker.offline  # no live leader until the next election
    assert on_dead_broker.under_replicated and on_dead_broker.out_of_sync == ()
    assert shrunk.under_replicated and shrunk.out_of_sync == (2,)


async def test_a_port_nobody_listens_on_refuses_and_a_listening_one_does_not() -> None:
    import asyncio

    server = await asyncio.start_server(lambda reader, writer: writer.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        assert await _refuses_connections("127.0.0.1", port) is False
    finally:
        server.close()
        await server.wait_closed()
    assert await _refuses_connections("127.0.0.1", port) is True  # closed now: nothing listens
    assert await _refuses_connections(None, None) is False  # an address not known says nothing


def test_a_down_broker_and_what_it_leaves_behind_read_as_one_sentence() -> None:
    from backbone.console.problems import problems
    from backbone.console.snapshot import BrokerState, ClusterSnapshot, TopicState

    partitions = [PartitionState(p, leader=1, replicas=(1, 2), isr=(1, 2), down=(2,)) for p in range(12)]
    down = ClusterSnapshot(
        "dc1",
        "datacenter",
        taken_ms=1,
        brokers={1: BrokerState(1, "h", 1, None, True), 2: BrokerState(2, "h", 2, None, False, 0)},
        topics={"events": TopicState("events", False, partitions)},
    )
    assert [p.text for p in problems(down)] == ["dc1: broker 2 down since -; 12 partitions under-replicated"]
    assert problems(down)[0].severity == ERR

    shrunk = [PartitionState(0, leader=1, replicas=(1, 2), isr=(1,))]
    alone = ClusterSnapshot(
        "dc2", "datacenter", taken_ms=1, topics={"events": TopicState("events", False, shrunk)}
    )
    assert [(p.severity, p.text) for p in problems(alone)] == [(WARN, "dc2: 1 partition under-replicated")]


def test_a_refused_action_is_a_400_and_an_unanswered_one_a_503() -> None:
    refusal = TopicAuthorizationFailedError("not allowed")
    assert _failure(refusal, "dc1") == (f"failed: TopicAuthorizationFailedError: {refusal}", False, 400)
    for unanswered in (KafkaClientError("closed"), OSError("refused"), TimeoutError("slow")):
        expected = f"failed: cluster dc1 did not answer: {unanswered}"
        assert _failure(unanswered, "dc1") == (expected, False, 503)
