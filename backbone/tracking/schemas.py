"""The Avro schemas of the tracking events: page views, searches, impressions and invitations, each a
record whose first field is the shared `EventHeader`.

The header is repeated inline in each event's schema (the registry holds schemas without references), under
one full name, `backbone.tracking.EventHeader`, so every event's header reads the same way.
"""

from __future__ import annotations

import json
from typing import Any

NAMESPACE = "backbone.tracking"

HEADER: dict[str, Any] = {
    "type": "record",
    "name": "EventHeader",
    "namespace": NAMESPACE,
    "doc": "Where and when an event happened, and for whom; the same in every tracking event.",
    "fields": [
        {"name": "event_id", "type": "string", "doc": "unique per event: datacenter, producer, sequence"},
        {"name": "time", "type": {"type": "long", "logicalType": "timestamp-millis"}, "doc": "event time"},
        {"name": "datacenter", "type": "string"},
        {"name": "host", "type": "string"},
        {"name": "server", "type": "string", "doc": "the application server that logged the event"},
        {"name": "member_id", "type": ["null", "long"], "default": None, "doc": "null for a guest"},
        {"name": "session_id", "type": "string"},
        {"name": "page_key", "type": "string", "doc": "the page the event happened on"},
    ],
}


def _event(name: str, doc: str, fields: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "type": "record",
        "name": name,
        "namespace": NAMESPACE,
        "doc": doc,
        "fields": [{"name": "header", "type": HEADER}, *fields],
    }


PAGE_VIEW = _event(
    "PageViewEvent",
    "A member or guest viewed a page.",
    [
        {"name": "referrer", "type": ["null", "string"], "default": None},
        {"name": "load_time_ms", "type": "int"},
    ],
)
SEARCH = _event(
    "SearchEvent",
    "A search was run.",
    [
        {"name": "query", "type": "string"},
        {
            "name": "vertical",
            "type": {
                "type": "enum",
                "name": "SearchVertical",
                "symbols": ["PEOPLE", "JOBS", "COMPANIES", "CONTENT"],
            },
        },
        {"name": "result_count", "type": "int"},
    ],
)
IMPRESSION = _event(
    "ImpressionEvent",
    "Items were shown to a member on a page.",
    [
        {"name": "item_ids", "type": {"type": "array", "items": "long"}},
        {"name": "module", "type": "string"},
    ],
)
INVITATION = _event(
    "InvitationEvent",
    "A member invited someone to connect.",
    [
        {"name": "invitee_id", "type": "long"},
        {"name": "message", "type": ["null", "string"], "default": None},
    ],
)

# Topic -> schema; each topic's values are registered under the subject `<topic>-value`.
TOPICS: dict[str, dict[str, Any]] = {
    "page_views": PAGE_VIEW,
    "searches": SEARCH,
    "impressions": IMPRESSION,
    "invitations": INVITATION,
}


def subject(topic: str) -> str:
    """Confluent's TopicNameStrategy for values."""
    return f"{topic}-value"


def text(schema: dict[str, Any]) -> str:
    return json.dumps(schema)
