"""The rooms' import rules, read from the rooms table of docs/architecture.md, the one place they are
written: every module of `backbone/` and `spark/` may import only its own room and those its row names."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.helpers.python_source import parse

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "docs" / "architecture.md"
ROW = re.compile(r"^\| `(?P<path>[^`]+)` \|.*\| (?P<allowed>[^|]+) \|$")


def allowed_arrows(text: str) -> dict[str, set[str]]:
    """{room: rooms it may import} from the "## Rooms" table's rows."""
    section = text.split("## Rooms", 1)[1].split("\n## ", 1)[0]
    arrows = {}
    for line in section.splitlines():
        match = ROW.match(line)
        if match:
            arrows[room_of_path(match["path"])] = set(re.findall(r"`([a-z_]+)`", match["allowed"]))
    return arrows


def room_of_path(path: str) -> str:
    """`backbone/protocol/` -> protocol, `backbone/properties.py` -> properties, `spark/` -> spark."""
    if path.startswith("spark"):
        return "spark"
    room = path.removeprefix("backbone/").split("/")[0].removesuffix(".py")
    return "cli" if room == "__main__" else room


def room_of_module(module: str) -> str | None:
    """The room a dotted module name belongs to; None for the `backbone` package itself and for others."""
    parts = module.split(".")
    if parts[0] != "backbone" or len(parts) == 1 or parts[1] == "__version__":
        return None
    return "cli" if parts[1] == "__main__" else parts[1]


def imported_rooms(source: str, module: str) -> list[tuple[int, str]]:
    """(line, room) of every backbone room `source` imports, deferred and type-checking imports included."""
    found = []
    for node in ast.walk(parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                package = module.split(".")[: -node.level]
                base = ".".join([*package, base] if base else package)
            names = [base] if base != "backbone" else [f"backbone.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            room = room_of_module(name)
            if room is not None:
                found.append((node.lineno, room))
    return found


def violations(arrows: dict[str, set[str]], files: dict[str, str]) -> list[str]:
    """Every import of a room its importer may not import, as `path:line: room -> room`."""
    wrong = []
    for path, source in sorted(files.items()):
        own = room_of_path(path)
        module = path.removesuffix(".py").replace("/", ".")
        for line, room in imported_rooms(source, module):
            if room != own and room not in arrows[own]:
                wrong.append(f"{path}:{line}: {own} -> {room}")
    return wrong


def sources() -> dict[str, str]:
    paths = [*ROOT.glob("backbone/**/*.py"), *ROOT.glob("spark/**/*.py")]
    top = ROOT / "backbone" / "__init__.py"  # the package itself: its version, no room
    return {str(p.relative_to(ROOT)): p.read_text() for p in paths if p != top}


def test_the_table_names_every_room_and_only_rooms_that_exist() -> None:
    arrows = allowed_arrows(TABLE.read_text())
    rooms = {room_of_path(path) for path in sources()}
    assert rooms == set(arrows), f"rooms without a row, or rows without a room: {sorted(rooms ^ set(arrows))}"
    assert all(allowed <= set(arrows) for allowed in arrows.values())


def test_no_room_imports_one_its_row_does_not_name() -> None:
    arrows = allowed_arrows(TABLE.read_text())
    assert violations(arrows, sources()) == []


def test_a_lower_room_importing_a_higher_one_is_caught() -> None:
    arrows = allowed_arrows(TABLE.read_text())
    climbing = {
        "backbone/wire/connection.py": "from backbone.client.structs import TopicPartition\n",
        "backbone/broker/fetcher.py": "def later():\n    import backbone.client.producer\n",
        "backbone/protocol/codec.py": "from backbone import wire\n",
        "backbone/client/admin/groups.py": "from ...consumer_groups import coordinator\n",
    }
    assert violations(arrows, climbing) == [
        "backbone/broker/fetcher.py:2: broker -> client",
        "backbone/client/admin/groups.py:1: client -> consumer_groups",
        "backbone/protocol/codec.py:1: protocol -> wire",
        "backbone/wire/connection.py:1: wire -> client",
    ]
