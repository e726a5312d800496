"""Merging a run of some tests into an earlier run's figures (ops/client_suites/results.py, `--update`)."""

from __future__ import annotations

import pytest

from ops.client_suites.results import merge

pytestmark = pytest.mark.unit


def figures(passed: list[str], failures: list[str], left_out: list[str], *, named: bool = True) -> dict:
    result = {
        "client": "librdkafka",
        "command": "run",
        "seconds": 100,
        "passed": len(passed),
        "failed": len(failures),
        "skipped": len(left_out),
        "failures": [{"test": t, "reason": "broke"} for t in failures],
        "left_out": [{"test": t, "reason": "needs X"} for t in left_out],
    }
    if named:
        result["passed_tests"] = passed
    return result


def test_a_rerun_replaces_what_the_earlier_run_said_of_its_tests() -> None:
    earlier = figures(["0001", "0002", "0081[a]"], ["0003", "0081[b]"], ["0097", "0081 (other sub-tests)"])
    rerun_passed = ["0097 on sasl_ssl", "0003", "0081[c] on authorizer"]
    later = figures(rerun_passed, ["0002"], ["0081 (other sub-tests)"])
    later["command"], later["seconds"] = "run --tests 0002,0003,0081,0097", 20
    merged = merge(earlier, later, {"0002", "0003", "0081", "0097"})
    assert merged["passed_tests"] == ["0001", "0081[a]", "0097 on sasl_ssl", "0003", "0081[c] on authorizer"]
    assert merged["passed"] == 5
    # 0003 passes now; 0002 fails now; 0081[b] was not rerun, so its failure stands.
    assert [f["test"] for f in merged["failures"]] == ["0081[b]", "0002"]
    assert merged["failed"] == 2
    # 0097 is no longer left out; 0081's entry is the later run's.
    assert merged["left_out"] == later["left_out"] and merged["skipped"] == 1
    assert merged["seconds"] == 120
    assert merged["command"] == "run, then run --tests 0002,0003,0081,0097"


def test_an_earlier_file_without_passed_names_keeps_its_count_for_tests_not_rerun() -> None:
    earlier = figures(["0001", "0002"], ["0003"], ["0097"], named=False)
    later = figures(["0097 on sasl_ssl", "0003"], [], [])
    merged = merge(earlier, later, {"0003", "0097"})
    assert (merged["passed"], merged["failed"], merged["skipped"]) == (4, 0, 0)
    assert merged["passed_tests"] == ["0097 on sasl_ssl", "0003"]


def test_a_test_is_the_same_whether_named_by_its_summary_or_by_its_number() -> None:
    # A runner that crashed has no summary line: its failure is named by the number alone.
    earlier = figures([], ["0142[do_test_consumer:] on reauth"], [])
    later = figures(["0142_reauthentication[do_test_consumer:] on reauth"], [], [])
    merged = merge(earlier, later, {"0142"})
    assert (merged["passed"], merged["failed"], merged["failures"]) == (1, 0, [])
