"""The metadata a mirror commits with, and the lag in seconds read from it."""

from __future__ import annotations

import pytest

from backbone.client.admin.mirror_progress import (
    commit_metadata,
    copied_topic_id,
    lag_seconds,
    newest_copied_ms,
)

pytestmark = pytest.mark.unit


def test_the_newest_copied_timestamp_round_trips_and_other_metadata_is_ignored() -> None:
    assert newest_copied_ms(commit_metadata(1_700_000_000_123)) == 1_700_000_000_123
    assert commit_metadata(None) == ""
    for other in ("", None, "checkpoint-7", "newest-copied-ms=soon"):
        assert newest_copied_ms(other) is None


def test_the_source_topic_id_round_trips_beside_the_timestamp() -> None:
    metadata = commit_metadata(1_700_000_000_123, "q1Yk3pQ0Rx2mWk8aVbT3Zg")
    assert metadata == "newest-copied-ms=1700000000123;source-topic-id=q1Yk3pQ0Rx2mWk8aVbT3Zg"
    assert newest_copied_ms(metadata) == 1_700_000_000_123
    assert copied_topic_id(metadata) == "q1Yk3pQ0Rx2mWk8aVbT3Zg"
    assert copied_topic_id(commit_metadata(None, "q1Yk3pQ0Rx2mWk8aVbT3Zg")) == "q1Yk3pQ0Rx2mWk8aVbT3Zg"
    assert newest_copied_ms(commit_metadata(None, "q1Yk3pQ0Rx2mWk8aVbT3Zg")) is None
    # Commits written before the id was recorded, and other consumers' metadata, name no topic.
    for other in ("newest-copied-ms=1700000000123", "", None, "source-topic-id", "checkpoint-7"):
        assert copied_topic_id(other) is None


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
