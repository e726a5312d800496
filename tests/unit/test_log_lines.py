"""Log lines are `event=<name> key=value ...`, so they can be searched and parsed; checked over the source of
the rooms that follow the rule (a room joins by being named here)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
ROOMS = ("client", "wire")
LEVELS = {"debug", "info", "warning", "error", "exception", "critical"}


def prose_lines(source: str) -> list[int]:
    """Lines of `log.<level>(...)` calls whose message does not start with `event=`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr not in LEVELS or not (
            isinstance(node.func.value, ast.Name) and node.func.value.id == "log"
        ):
            continue
        first = node.args[0] if node.args else None
        text = first.value if isinstance(first, ast.Constant) else ""
        if not (isinstance(text, str) and text.startswith("event=")):
            found.append(node.lineno)
    return found


@pytest.mark.parametrize("room", ROOMS)
def test_every_log_line_of_the_room_names_its_event(room: str) -> None:
    prose = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sorted((ROOT / "backbone" / room).rglob("*.py"))
        for line in prose_lines(path.read_text())
    ]
    assert prose == []


def test_prose_is_caught() -> None:
    assert prose_lines('log.info("joined group=%s", g)\nlog.info("event=group_joined group=%s", g)\n') == [1]
    assert prose_lines('log.warning(f"event={name}")\nlogger.info("not ours")\n') == [1]
