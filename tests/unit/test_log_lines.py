"""Log lines are one event each, `event=name key=value ...` (the design guide's convention), checked in the
rooms that follow it so a prose message cannot creep back in."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.helpers.python_source import parse

pytestmark = pytest.mark.unit

PACKAGE = Path(__file__).parents[2] / "backbone"
ROOMS = [
    "broker",
    "cli",
    "client",
    "console",
    "consumer_groups",
    "coordination",
    "dev",
    "log",
    "mirror",
    "protocol",
    "schema_registry",
    "tracking",
    "wire",
]
LEVELS = {"debug", "info", "warning", "error", "exception", "critical"}
# The event's name may be completed by an argument (`event=broker_%s`); a bare `%s` field is a group of
# key=value fields formatted beforehand.
EVENT_LINE = re.compile(r"event=[a-z%][a-z0-9_%]*( ([a-z][a-z0-9_.]*=\S+|%s))*$")


def string_constants(module: ast.Module) -> dict[str, str]:
    """The module's top-level `NAME = "text"` assignments."""
    return {
        target.id: statement.value.value
        for statement in module.body
        if isinstance(statement, ast.Assign)
        and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, str)
        for target in statement.targets
        if isinstance(target, ast.Name)
    }


def message_of(call: ast.Call, constants: dict[str, str]) -> str | None:
    """The format string of a `log.<level>(...)` call, with implicit concatenation joined and a leading `%s`
    filled in when its argument is a module constant (`log.info("%s url=%s", READY_LINE, url)`); None if
    the call is not a log call."""
    function = call.func
    if not (isinstance(function, ast.Attribute) and function.attr in LEVELS and call.args):
        return None
    if not (isinstance(function.value, ast.Name) and function.value.id in {"log", "logger"}):
        return None
    first = call.args[0]
    if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
        return "<not a literal>"
    message = first.value
    if message.startswith("%s") and len(call.args) > 1:
        named = call.args[1]
        if isinstance(named, ast.Name) and named.id in constants:
            message = constants[named.id] + message[2:]
    return message


def prose_lines(source: str) -> list[tuple[int, str]]:
    """(line, message) of every log call whose message is not an `event=... key=value` line."""
    found = []
    module = parse(source)
    constants = string_constants(module)
    for node in ast.walk(module):
        message = message_of(node, constants) if isinstance(node, ast.Call) else None
        # Quoted values may hold spaces: drop them before matching the key=value shape.
        if message is not None and not EVENT_LINE.match(re.sub(r"'[^']*'", "q", message)):
            found.append((node.lineno, message))
    return found


@pytest.mark.parametrize("room", ROOMS)
def test_every_log_line_in_the_room_is_an_event(room: str) -> None:
    modules = sorted((PACKAGE / room).rglob("*.py"))
    assert modules
    prose = [
        f"{path.relative_to(PACKAGE)}:{line}: {message}"
        for path in modules
        for line, message in prose_lines(path.read_text())
    ]
    assert prose == []


@pytest.mark.parametrize(
    ("source", "flagged"),
    [
        ('log.info("event=topic_created topic=%s partitions=%d", t, n)', False),
        ("log.warning(\"event=zookeeper_killed pid=%d reason='did not stop'\", p)", False),
        ('log.info("event=broker_%s broker_id=%d %s", what, b, fields)', False),
        ('READY = "event=started"\nlog.info("%s url=%s", READY, url)', False),
        ('log.info("%s url=%s", ready, url)', True),  # not a module constant: cannot be checked
        ('log.info("topic created topic=%s", t)', True),
        ('log.info("event=topic_created and more", t)', True),
        ('log.info("event=x " + detail)', True),  # not a literal: cannot be checked, so refused
        ('print("topic created")', False),  # not a log call
    ],
)
def test_prose_lines_tells_events_from_prose(source: str, flagged: bool) -> None:
    assert bool(prose_lines(source)) == flagged
