"""Writing benchmark figures into docs/benchmarks.md, and the facts that go with every figure.

Each benchmark owns one block of the file, between `<!-- bench:NAME -->` and `<!-- /bench:NAME -->`, inside
its `## ` section. `--write` replaces that block and nothing else, so the hand-written explanation around
it stays as it is. Without the markers the block goes right under the section's heading (nothing is
deleted); without the heading, a new section holding the block is appended.

The block starts with the run's facts: the exact command, when it ran and under what load (the machine is
shared), and the machine itself.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import platform
import shlex
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "benchmarks.md"
LINE_WIDTH = 110  # as the rest of docs/benchmarks.md


def start_marker(name: str) -> str:
    return f"<!-- bench:{name} -->"


def end_marker(name: str) -> str:
    return f"<!-- /bench:{name} -->"


def replace_block(text: str, name: str, heading: str, body: str) -> str:
    """`text` with benchmark `name`'s block holding `body` (see the module's docstring for where it goes)."""
    block = f"{start_marker(name)}\n\n{body.strip()}\n\n{end_marker(name)}\n"
    start, end = text.find(start_marker(name)), text.find(end_marker(name))
    if 0 <= start < end:
        return text[:start] + block + text[end + len(end_marker(name)) :].removeprefix("\n")
    found = text.find(heading + "\n")
    if found >= 0:
        after_heading = found + len(heading) + 1
        return text[:after_heading] + "\n" + block + text[after_heading:]
    return text.rstrip("\n") + f"\n\n{heading}\n\n{block}"


def write_block(name: str, heading: str, body: str, path: Path = DOCS) -> None:
    """Put `body` into benchmark `name`'s block of docs/benchmarks.md."""
    text = path.read_text(encoding="utf-8")  # read just before writing: others edit this file too
    path.write_text(replace_block(text, name, heading, body), encoding="utf-8")
    print(f"wrote the {name!r} figures to {path}", file=sys.stderr)


def figures(
    script: str, when: str, about: str, header: Sequence[str], rows: Sequence[Sequence[object]]
) -> str:
    """A benchmark's usual block: how and where it ran, what it measured (`about`), its table."""
    return "\n".join([run_facts(command(script), when), "", wrap(about), "", table(header, rows)])


def publish(name: str, heading: str, body: str, write: bool) -> None:
    """Print a benchmark's figures, and with `write` (its `--write` flag) put them into docs/benchmarks.md."""
    print(body)
    if write:
        write_block(name, heading, body)


def command(script: str, argv: Sequence[str] | None = None) -> str:
    """The command line that reproduces this run, from the repository root."""
    return shlex.join(["python", f"ops/bench/{script}", *(sys.argv[1:] if argv is None else argv)])


def started() -> str:
    """Now, with the load average: figures on a shared machine mean little without it."""
    now = datetime.datetime.now(datetime.UTC)
    return f"{now:%Y-%m-%d %H:%M} UTC, load average {os.getloadavg()[0]:.1f}"


def machine() -> str:
    """Cores, CPU model, memory, kernel and Python version."""
    cpu = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{os.cpu_count()} virtual cores ({cpu}), {memory:.0f} GiB of memory, "
        f"{platform.system()} {platform.release()}, Python {platform.python_version()}"
    )


def run_facts(command_line: str, when: str, extra: str = "") -> str:
    """The paragraph that opens a block: command, date and load, machine (and `extra` facts)."""
    machine_facts = machine() + (f"; {extra}" if extra else "")
    return wrap(f"Command: `{command_line}` ({when}). {machine_facts}.")


def wrap(paragraph: str) -> str:
    return textwrap.fill(paragraph, width=LINE_WIDTH, break_long_words=False, break_on_hyphens=False)


def table(header: Sequence[str], rows: Sequence[Sequence[object]], align: str = "") -> str:
    """A markdown table; `align` has one letter per column, `l` or `r` (default: first left, rest right)."""
    align = align or "l" + "r" * (len(header) - 1)
    rule = ["---" if side == "l" else "---:" for side in align]
    lines = [header, rule, *rows]
    return "\n".join("| " + " | ".join(str(cell) for cell in line) + " |" for line in lines)
