"""Times as people type them on a command line or in the console: epoch milliseconds or ISO 8601.

stdlib only, so any room may import it.
"""

from __future__ import annotations

from datetime import UTC, datetime


def iso_time_ms(text: str, *, local: bool = False) -> int:
    """Epoch milliseconds of an ISO 8601 time; one that names no zone is UTC, or local time when `local`
    (as Kafka's own tools read --to-datetime). ValueError when the text is no ISO time."""
    moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    if moment.tzinfo is None and not local:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)  # a naive moment's timestamp() reads it as local time


def time_ms(text: str, *, local: bool = False) -> int:
    """Epoch milliseconds as given (all digits), or those of an ISO 8601 time; ValueError otherwise."""
    text = text.strip()
    return int(text) if text.isdigit() else iso_time_ms(text, local=local)
