"""What trips a newcomer in the first hour, run as a user would against a real broker: an oversize line
refused by number while the rest goes on, `consume --group` committing as it goes, a topic too large for
ZooKeeper refused up front, quiet summaries, warnings before creating a group by mistake."""

from __future__ import annotations

import pytest
from cli_support import run, run_ok

from backbone.cli.produce import MAX_LINE_BYTES
from backbone.client import Admin
from tests.helpers.names import unique_name

pytestmark = pytest.mark.integration

GROUPS = {"group_initial_rebalance_delay_ms": 0, "offsets_topic_num_partitions": 2}


@pytest.fixture
def bootstrap(broker_factory) -> str:
    return broker_factory(1, **GROUPS).bootstrap


def test_an_oversize_line_is_reported_by_number_and_the_others_are_sent(bootstrap) -> None:
    topic = unique_name("lines")
    run_ok("topics", "create", topic, "--bootstrap-server", bootstrap)
    lines = b"first\n" + b"x" * (MAX_LINE_BYTES + 10) + b"\nthird\n"
    done = run("produce", topic, "--bootstrap-server", bootstrap, stdin=lines)
    err = done.stderr.decode()
    assert done.returncode == 1, err
    assert "line 2 refused (going on)" in err and "1 line refused" in err
    assert f"sent 2 records to {topic!r}" in err
    out = run_ok("consume", topic, "--bootstrap-server", bootstrap, "--from-beginning", "--max-messages", "2")
    assert out == b"first\nthird\n"
    one = run("produce", topic, "--bootstrap-server", bootstrap, stdin=b"one\n")
    assert one.returncode == 0 and f"sent 1 record to {topic!r}" in one.stderr.decode()


def test_consume_with_a_group_commits_as_it_goes_and_resumes_there(bootstrap) -> None:
    topic = unique_name("etl")
    run_ok("topics", "create", topic, "--bootstrap-server", bootstrap)
    run_ok("produce", topic, "--bootstrap-server", bootstrap, stdin=b"1\n2\n3\n4\n5\n")
    first = run_ok(
        "consume", topic, "--group", "etl", "--from-beginning", "--max-messages", "3",
        "--bootstrap-server", bootstrap,
    )  # fmt: skip
    assert first == b"1\n2\n3\n"
    with Admin(bootstrap_servers=bootstrap) as admin:
        assert sum(o.offset for o in admin.list_consumer_group_offsets("etl").values()) == 3
        [row] = admin.consumer_group_lag("etl")["etl"]  # one group id as a plain string
        assert row.lag == 2
    rest = run_ok(
        "consume", topic, "--group", "etl", "--max-messages", "2", "--timeout-ms", "20000",
        "--bootstrap-server", bootstrap,
    )  # fmt: skip
    assert rest == b"4\n5\n"

    elected = run("leaders", "elect", "--all-topic-partitions", "--bootstrap-server", bootstrap)
    out = elected.stdout.decode()
    assert "__consumer_offsets-" not in out and "2 internal partitions (__*): election not needed" in out

    unknown = run(
        "groups", "reset-offsets", "--group", "no-such-group", "--topic", topic, "--to-earliest",
        "--execute", "--bootstrap-server", bootstrap,
    )  # fmt: skip
    assert unknown.returncode == 0
    assert "group 'no-such-group' has no committed offsets (is the name right?)" in unknown.stderr.decode()


def test_a_topic_too_large_for_zookeeper_is_refused_naming_the_limit(bootstrap) -> None:
    done = run("topics", "create", "huge", "--partitions", "100000", "--bootstrap-server", bootstrap)
    assert done.returncode == 1
    assert "jute.maxbuffer" in done.stderr.decode()
    run_ok("topics", "create", "fine", "--partitions", "2", "--bootstrap-server", bootstrap)  # still healthy
    assert "huge" not in run_ok("topics", "list", "--bootstrap-server", bootstrap).decode()
