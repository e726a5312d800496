"""A process that exits at start is explained by its own words: its errors and the exception that ended it,
not the tail of everything it (or a neighbour) wrote."""

from __future__ import annotations

import pytest

from backbone.dev.processes import exit_reason

pytestmark = pytest.mark.unit


def test_the_reason_is_the_error_lines_and_the_final_exception() -> None:
    output = "\n".join(
        [*(f"2026-01-01 00:00:0{i} INFO backbone.broker event=step n={i}" for i in range(20)),
         "Traceback (most recent call last):",
         '  File "server.py", line 1, in start',
         "backbone.protocol.errors.KafkaStorageError: KAFKA_STORAGE_ERROR: log directory /d is locked "
         "by another process (Resource temporarily unavailable); is another broker using it?"]
    )  # fmt: skip
    reason = exit_reason(output)
    assert reason.splitlines() == [output.splitlines()[-1]]
    assert "event=step" not in reason


def test_without_errors_the_last_lines_are_shown_and_silence_is_named() -> None:
    output = "\n".join(f"line {i}" for i in range(30))
    assert exit_reason(output).splitlines() == [f"line {i}" for i in range(25, 30)]
    assert exit_reason("") == "(it wrote nothing)"
    logged = "a\n2026-01-01 00:00:00 ERROR backbone.mirror source.alias 'dc.1' is not a valid alias\nb\n"
    assert (
        exit_reason(logged)
        == "2026-01-01 00:00:00 ERROR backbone.mirror source.alias 'dc.1' is not a valid alias"
    )
