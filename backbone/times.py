"""Times as people type them on a command line or in the console: epoch milliseconds or ISO 8601.

stdlib only, so any room may import it.
"""

from __future__ import annotations

from datetime import UTC, datetime


def iso_time_ms(text: str) -> int:
    """Epoch milliseconds of an ISO 8601 time (UTC when it names no zone); ValueError when it is none."""
    moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def time_ms(text: str) -> int:
    """Epoch milliseconds as given (all digits), or those of an ISO 8601 time; ValueError otherwise."""
    text = text.strip()
    return int(text) if text.isdigit() else iso_time_ms(text)
