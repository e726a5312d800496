"""Every unit test module carries the `unit` marker, so `pytest -m unit` selects all of them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.helpers.python_source import parse

pytestmark = pytest.mark.unit

UNIT_DIR = Path(__file__).parent


def module_markers(source: str) -> set[str]:
    """The names of the `pytest.mark.X` markers in a module's top-level `pytestmark` assignment."""
    markers: set[str] = set()
    for statement in parse(source).body:
        if isinstance(statement, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "pytestmark" for target in statement.targets
        ):
            for node in ast.walk(statement.value):
                if (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Attribute)
                    and node.value.attr == "mark"
                ):
                    markers.add(node.attr)
    return markers


def test_every_unit_module_is_marked_unit() -> None:
    modules = sorted(UNIT_DIR.glob("test_*.py"))
    assert len(modules) > 50  # the glob found the unit tests, not an empty directory
    unmarked = [path.name for path in modules if "unit" not in module_markers(path.read_text())]
    assert unmarked == [], f"add `pytestmark = pytest.mark.unit` to {unmarked}"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("pytestmark = pytest.mark.unit\n", {"unit"}),
        ('pytestmark = [pytest.mark.unit, pytest.mark.fake_topic("t", 2)]\n', {"unit", "fake_topic"}),
        ("import pytest\n\ndef test_x():\n    pass\n", set()),
        ("@pytest.mark.unit\ndef test_x():\n    pass\n", set()),  # a test-level marker is not the module's
    ],
)
def test_module_markers_reads_the_module_level_assignment(source: str, expected: set[str]) -> None:
    assert module_markers(source) == expected
