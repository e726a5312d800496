"""The figures a conformance runner writes (docs/conformance/*.json; the format is in docs/compatibility.md),
and merging a run of some tests into an earlier run's figures, so that enabling or fixing a few tests need
not run the whole suite again."""

from __future__ import annotations

import re
from typing import Any

# A test's number and the name after it: `0142_reauthentication[sub] on x` and `0142[sub] on x` (the name a
# runner gives an outcome when the test's own summary is missing) are the same test.
_TEST_NAME = re.compile(r"^(\d{4})\w*")


def _key(test: str) -> str:
    return _TEST_NAME.sub(r"\1", test)


def merge(earlier: dict[str, Any], later: dict[str, Any], numbers: set[str]) -> dict[str, Any]:
    """`earlier`'s figures with `later`'s, a run of the test numbers `numbers`, in place of what `earlier`
    said of them: its left-out entries of those numbers and its outcomes of the tests `later` ran go.
    Passed tests are known by name from `passed_tests`; a file written before that field counted its passed
    tests only, so a test `later` ran that it counted as passed would be counted twice: `later` must then
    run only tests that file did not pass (its failures and left-out tests, or new ones)."""
    ran = {_key(item["test"]) for key in ("failures", "left_out") for item in later[key]}
    ran |= {_key(name) for name in later["passed_tests"]}
    earlier_passed = earlier.get("passed_tests", [])
    kept_passed = [name for name in earlier_passed if _key(name) not in ran]
    failures = [f for f in earlier.get("failures", []) if _key(f["test"]) not in ran] + later["failures"]
    left_out = [e for e in earlier["left_out"] if e["test"][:4] not in numbers and _key(e["test"]) not in ran]
    left_out += later["left_out"]
    return {
        **earlier,
        "command": f"{earlier['command']}, then {later['command']}",
        "seconds": earlier["seconds"] + later["seconds"],
        "passed": earlier["passed"] - (len(earlier_passed) - len(kept_passed)) + len(later["passed_tests"]),
        "failed": len(failures),
        "skipped": len(left_out),
        "failures": failures,
        "left_out": left_out,
        "passed_tests": kept_passed + later["passed_tests"],
    }
