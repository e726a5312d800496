"""The tests' source parser works around CPython gh-106905 and nothing else."""

from __future__ import annotations

import ast
from typing import Any

import pytest

from tests.helpers import python_source

pytestmark = pytest.mark.unit


def test_a_spurious_recursion_depth_mismatch_is_parsed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    real_parse = ast.parse
    calls = []

    def flaky(source: str, *args: Any, **kwargs: Any) -> ast.Module:
        calls.append(source)
        if len(calls) == 1:
            raise SystemError("AST constructor recursion depth mismatch (before=144, after=194)")
        return real_parse(source, *args, **kwargs)

    monkeypatch.setattr(python_source.ast, "parse", flaky)
    module = python_source.parse("x = 1\n")
    assert isinstance(module.body[0], ast.Assign)
    assert len(calls) == 2


def test_other_errors_and_a_lasting_mismatch_are_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SyntaxError):
        python_source.parse("def (:\n")

    def always(source: str, *args: Any, **kwargs: Any) -> ast.Module:
        raise SystemError("AST constructor recursion depth mismatch (before=1, after=2)")

    monkeypatch.setattr(python_source.ast, "parse", always)
    with pytest.raises(SystemError, match="recursion depth mismatch"):
        python_source.parse("x = 1\n")
