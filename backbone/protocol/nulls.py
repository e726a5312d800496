"""Null where the schema allows none: a request decoded by kio may carry None in an array or nested field
its schema does not mark nullable (kio reads a -1 length as null for every array). Kafka cannot parse such a
request; `check_no_illegal_nulls` raises InvalidRequestError for it, so the broker rejects it as malformed
instead of a handler failing on it (found by the protocol fuzzer)."""

from __future__ import annotations

import dataclasses
from functools import cache
from typing import Any

from kio.serial._introspect import EntityField, EntityTupleField, classify_field, is_optional

from backbone.protocol.errors import InvalidRequestError

__all__ = ["check_no_illegal_nulls"]


@cache
def _fields(entity_type: type) -> tuple[tuple[str, bool, bool, bool], ...]:
    """(name, nullable, holds entities, is an array) of each field that can hold None or entities."""
    found = []
    for field in dataclasses.fields(entity_type):
        kind = classify_field(field)
        nested = isinstance(kind, EntityField | EntityTupleField)
        if nested or kind.is_array:
            found.append((field.name, is_optional(field), nested, kind.is_array))
    return tuple(found)


def check_no_illegal_nulls(entity: Any) -> None:
    entity_type: type = type(entity)
    for name, nullable, nested, is_array in _fields(entity_type):
        value = getattr(entity, name)
        if value is None:
            if not nullable:
                raise InvalidRequestError(f"{type(entity).__name__}.{name} is null but may not be")
            continue
        if nested:
            for item in value if is_array else (value,):
                check_no_illegal_nulls(item)
