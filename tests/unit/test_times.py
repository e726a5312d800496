"""Times people type: epoch milliseconds as given, ISO 8601 in UTC unless it names a zone (or local time
where the command reads it so), and a clear ValueError for anything else."""

from __future__ import annotations

from datetime import datetime

import pytest

from backbone.times import iso_time_ms, time_ms

pytestmark = pytest.mark.unit

TEN_MINUTES_MS = 600_000


def test_epoch_milliseconds_are_taken_as_given() -> None:
    assert time_ms(" 1700000000000 ") == 1_700_000_000_000


def test_an_iso_time_without_a_zone_is_utc() -> None:
    assert time_ms("1970-01-01T00:10:00") == TEN_MINUTES_MS
    assert time_ms("1970-01-01T00:10:00Z") == TEN_MINUTES_MS
    assert iso_time_ms("1970-01-01T01:10:00+01:00") == TEN_MINUTES_MS


def test_an_iso_time_without_a_zone_is_local_time_when_asked() -> None:
    expected = int(datetime(2026, 1, 31, 10, 0).timestamp() * 1000)  # naive: the machine's zone
    assert time_ms("2026-01-31T10:00", local=True) == expected
    assert time_ms("2026-01-31T10:00Z", local=True) == int(
        datetime.fromisoformat("2026-01-31T10:00+00:00").timestamp() * 1000
    )


@pytest.mark.parametrize("text", ["yesterday", "", "12:00 tomorrow"])
def test_anything_else_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        time_ms(text)
