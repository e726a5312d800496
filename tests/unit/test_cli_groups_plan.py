"""`backbone groups` without a cluster: argument handling, the reset-offsets plan, the lag arithmetic and
the tables (backbone/cli/groups.py, backbone/cli/group_reset.py, backbone/wire/groups/lag.py)."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

import pytest

from backbone.cli import UsageError, build_parser
from backbone.cli.connect import CommandFailed
from backbone.cli.group_reset import (
    PlannedReset,
    ResetTarget,
    format_plan,
    parse_topic_partitions,
    plan_reset,
    reset_target,
)
from backbone.cli.groups import LAG_HEADER, lag_row, print_table
from backbone.client import GroupDescription, MemberDescription, TopicPartition
from backbone.client.admin.groups import decode_assigned_partitions
from backbone.wire.groups.consumer_protocol import Assignment, encode_assignment
from backbone.wire.groups.lag import MemberInfo, PartitionLag, group_lag, partition_lag, total_lag

pytestmark = pytest.mark.unit

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["groups", *argv])


def usage_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exit_info:
        parse(*argv)
    assert exit_info.value.code == 2
    return capsys.readouterr().err


# -- arguments -----------------------------------------------------------------------------------------


def test_reset_offsets_defaults_to_a_dry_run() -> None:
    args = parse("reset-offsets", "--group", "g", "--topic", "a", "--to-earliest")
    assert (args.group, args.topic, args.all_topics) == ("g", ["a"], False)
    assert not args.execute
    assert reset_target(args) == ResetTarget("earliest")


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        (["--to-earliest"], ResetTarget("earliest")),
        (["--to-latest"], ResetTarget("latest")),
        (["--to-offset", "42"], ResetTarget("offset", 42)),
        (["--shift-by", "-5"], ResetTarget("shift", -5)),
        (["--to-datetime", "1700000000000"], ResetTarget("datetime", 1_700_000_000_000)),
        (
            ["--to-datetime", "2024-05-01T12:00:00Z"],
            ResetTarget("datetime", int(datetime(2024, 5, 1, 12, tzinfo=UTC).timestamp() * 1000)),
        ),
    ],
)
def test_each_target_option_names_its_target(option: list[str], expected: ResetTarget) -> None:
    args = parse("reset-offsets", "--group", "g", "--all-topics", *option, "--execute")
    assert args.execute
    assert reset_target(args) == expected


def test_a_bad_datetime_is_a_usage_error_naming_the_option() -> None:
    args = parse("reset-offsets", "--group", "g", "--all-topics", "--to-datetime", "yesterday")
    with pytest.raises(UsageError, match=r"--to-datetime takes ISO 8601.*'yesterday'"):
        reset_target(args)


@pytest.mark.parametrize(
    "argv",
    [
        ["reset-offsets", "--group", "g", "--topic", "a"],  # no target
        ["reset-offsets", "--group", "g", "--to-latest"],  # no scope
        ["reset-offsets", "--group", "g", "--topic", "a", "--all-topics", "--to-latest"],
        ["reset-offsets", "--group", "g", "--topic", "a", "--to-latest", "--to-earliest"],
        ["reset-offsets", "--group", "g", "--topic", "a", "--to-latest", "--dry-run", "--execute"],
        ["reset-offsets", "--group", "g", "--topic", "a", "--to-offset", "x"],
        ["reset-offsets", "--topic", "a", "--to-latest"],  # no group
        ["describe"],  # neither --group nor --all-groups
        ["describe", "--group", "g", "--members", "--state"],
        ["delete"],
    ],
)
def test_incomplete_or_contradictory_arguments_are_usage_errors(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    assert "error:" in usage_error(capsys, *argv)


def test_list_state_option_is_optional_with_an_optional_filter() -> None:
    assert parse("list").state is None
    assert parse("list", "--state").state == ""
    assert parse("list", "--state", "Stable,Empty").state == "Stable,Empty"


def test_describe_and_delete_take_several_groups() -> None:
    args = parse("describe", "--group", "g1", "--group", "g2", "--members", "--verbose")
    assert (args.group, args.members, args.verbose) == (["g1", "g2"], True, True)
    args = parse("delete", "--group", "g", "--topic", "a:0,1", "--topic", "b")
    assert (args.group, args.topic) == (["g"], ["a:0,1", "b"])


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("a", ("a", None)),
        ("a:1", ("a", [1])),
        ("a:2,0,2", ("a", [0, 2])),
        ("my.topic-1:0", ("my.topic-1", [0])),
    ],
)
def test_topic_partition_specs(spec: str, expected: tuple[str, list[int] | None]) -> None:
    assert parse_topic_partitions(spec) == expected


@pytest.mark.parametrize("spec", [":0", "a:", "a:x", "a:0,,1", "a:-1"])
def test_bad_topic_partition_specs_say_what_is_expected(spec: str) -> None:
    with pytest.raises(UsageError, match=r"--topic|partitions"):
        parse_topic_partitions(spec)


# -- the plan ------------------------------------------------------------------------------------------

START = {A0: 10, A1: 0, B0: 5}
END = {A0: 100, A1: 50, B0: 5}


def plan(target: ResetTarget, committed: dict, by_time: dict | None = None) -> dict[TopicPartition, int]:
    steps = plan_reset(target, [B0, A1, A0], committed, START, END, by_time)
    assert [(s.topic, s.partition) for s in steps] == [A0, A1, B0], "sorted by topic and partition"
    for step in steps:
        assert step.current == committed.get((step.topic, step.partition))
    return {TopicPartition(s.topic, s.partition): s.new for s in steps}


def test_earliest_and_latest_are_the_log_bounds() -> None:
    assert plan(ResetTarget("earliest"), {A0: 60}) == {A0: 10, A1: 0, B0: 5}
    assert plan(ResetTarget("latest"), {A0: 60}) == {A0: 100, A1: 50, B0: 5}


def test_an_offset_is_clamped_to_each_partition_log() -> None:
    assert plan(ResetTarget("offset", 30), {}) == {A0: 30, A1: 30, B0: 5}
    assert plan(ResetTarget("offset", 0), {}) == {A0: 10, A1: 0, B0: 5}
    assert plan(ResetTarget("offset", 10_000), {}) == {A0: 100, A1: 50, B0: 5}


def test_shift_moves_from_the_committed_offset_within_the_log() -> None:
    committed = {A0: 60, A1: 45, B0: 5}
    assert plan(ResetTarget("shift", -20), committed) == {A0: 40, A1: 25, B0: 5}
    assert plan(ResetTarget("shift", 10), committed) == {A0: 70, A1: 50, B0: 5}
    assert plan(ResetTarget("shift", -1000), committed) == {A0: 10, A1: 0, B0: 5}


def test_shifting_a_partition_without_a_committed_offset_names_it() -> None:
    with pytest.raises(CommandFailed, match=r"cannot shift a-1, b-0: the group has no committed offset"):
        plan(ResetTarget("shift", 1), {A0: 60})


def test_datetime_takes_the_offset_found_and_the_log_end_when_none_is() -> None:
    found = {A0: 70, A1: -1, B0: 5}
    assert plan(ResetTarget("datetime", 1_700_000_000_000), {}, found) == {A0: 70, A1: 50, B0: 5}


def test_the_plan_table() -> None:
    rows = format_plan("g", [PlannedReset("a", 0, None, 10), PlannedReset("a", 1, 7, 3)])
    assert rows == [
        ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"],
        ["g", "a", "0", "-", "10"],
        ["g", "a", "1", "7", "3"],
    ]


# -- lag -----------------------------------------------------------------------------------------------


def test_partition_lag_is_end_minus_committed_and_unknown_without_either() -> None:
    assert partition_lag(40, 100) == 60
    assert partition_lag(100, 100) == 0
    assert partition_lag(120, 100) == -20, "a committed offset past the log end shows as it is"
    assert partition_lag(None, 100) is None
    assert partition_lag(-1, 100) is None
    assert partition_lag(40, None) is None
    assert partition_lag(40, -1) is None


def test_group_lag_covers_committed_and_assigned_partitions() -> None:
    owner = MemberInfo("m-1", "client-1", "/10.0.0.1")
    rows = group_lag("g", {A1: 30, B0: -1}, {A0: 100, A1: 50}, {A0: owner, A1: owner})
    assert rows == [
        PartitionLag("g", "a", 0, None, 100, None, owner),  # assigned, nothing committed yet
        PartitionLag("g", "a", 1, 30, 50, 20, owner),
        PartitionLag("g", "b", 0, None, None, None, None),  # -1: no offset; end unknown
    ]
    assert total_lag(rows) == 20
    assert total_lag([]) == 0


def test_lag_rows_print_missing_values_as_dashes() -> None:
    owner = MemberInfo("m-1", "client-1", "/10.0.0.1")
    assert lag_row(PartitionLag("g", "a", 1, 30, 50, 20, owner)) == [
        "g",
        "a",
        "1",
        "30",
        "50",
        "20",
        "m-1",
        "/10.0.0.1",
        "client-1",
    ]
    assert lag_row(PartitionLag("g", "a", 0, None, 100, None)) == [
        "g",
        "a",
        "0",
        "-",
        "100",
        "-",
        "-",
        "-",
        "-",
    ]
    assert len(LAG_HEADER) == 9


def test_tables_align_columns(capsys: pytest.CaptureFixture[str]) -> None:
    print_table([["GROUP", "LAG"], ["a-long-group", "5"], ["g", "12345"]])
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["GROUP         LAG", "a-long-group  5", "g             12345"]
    assert [line.split() for line in lines] == [["GROUP", "LAG"], ["a-long-group", "5"], ["g", "12345"]]


def test_a_group_is_active_while_it_has_members_or_is_rebalancing() -> None:
    member = MemberDescription("m", None, "c", "/h", (A0,))
    assert GroupDescription("g", "Stable", "consumer", "range", [member], 1).is_active
    assert GroupDescription("g", "PreparingRebalance", "consumer", "", [], 1).is_active
    assert not GroupDescription("g", "Empty", "consumer", "", [], 1).is_active
    assert not GroupDescription("g", "Dead", "", "", [], 1).is_active


def test_member_assignments_are_decoded_and_unreadable_ones_are_empty() -> None:
    for version in range(4):
        data = encode_assignment(Assignment((("b", 0), ("a", 1), ("a", 0))), version)
        assert decode_assigned_partitions(data) == (A0, A1, B0)
    assert decode_assigned_partitions(b"") == ()
    assert decode_assigned_partitions(b"\x00\x00\xff") == (), "a truncated assignment"
