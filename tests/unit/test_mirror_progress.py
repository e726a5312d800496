"""The metadata a mirror commits with, and the lag in seconds read from it."""

from __future__ import annotations

import pytest

from backbone.client.admin.mirror_progress import commit_metadata, lag_seconds, newest_copied_ms

pytestmark = pytest.mark.unit


def test_the_newest_copied_timestamp_round_trips_and_other_metadata_is_ignored() -> None:
    assert newest_copied_ms(commit_metadata(1_700_000_000_123)) == 1_700_000_000_123
    assert commit_metadata(None) == ""
    for other in ("", None, "checkpoint-7", "newest-copied-ms=soon"):
        assert newest_copied_ms(other) is None


@pytest.mark.parametrize(
    ("records", "newest_source", "copied", "expected"),
    [
        (0, 5_000, 1_000, 0.0),  # caught up: no lag, whatever the clocks say
        (10, 5_000, 1_000, 4.0),
        (10, 1_000, 5_000, 0.0),  # timestamps out of order: never negative
        (10, 5_000, None, None),  # lagging, but the commits carry no timestamp
        (None, 5_000, 1_000, 4.0),  # log end unknown: the timestamps still tell
        (10, -1, 1_000, None),  # no max-timestamp answer
    ],
)
def test_lag_in_seconds(records, newest_source, copied, expected) -> None:
    assert lag_seconds(records, newest_source, copied) == expected
