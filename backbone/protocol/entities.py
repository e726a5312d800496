"""kio entities of any API version from one version-free description, and error answers built with it.

`entity_of(cls, values)` fills the fields of `cls` (any version of a request or response) that
`values` names, recursing into nested structs and arrays of structs, and gives every other field
its schema default or the type's zero (null where the schema allows null). One description of a
request thus yields that request at every version, each carrying what its version has room for.

`error_answer(api_key, version, code)` is the response the broker sends for a request it cannot
serve (an unsupported version, an unreadable body): the response of that very version with `code`
in its top-level error field, when the schema has one, so the client reads the error instead of
losing its connection. Without such a field there is no way to say it, and the connection closes,
as Kafka closes it.
"""

from __future__ import annotations

import datetime
import uuid
from dataclasses import MISSING, fields
from typing import Any

from kio.index import UnknownAPIKey, UnknownEntity, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    classify_field,
    get_schema_field_type,
    is_optional,
)

_ZEROS: dict[str, Any] = {
    "bool": False,
    "error_code": ErrorCode.none,
    "string": "",
    "bytes": b"",
    "records": None,
    "uuid": uuid.UUID(int=0),
    "timedelta_i32": datetime.timedelta(0),
    "timedelta_i64": datetime.timedelta(0),
    "datetime_i64": datetime.datetime.fromtimestamp(0, datetime.UTC),
}


def entity_of(cls: type, values: dict[str, Any] | None = None) -> Any:
    values = values or {}
    kwargs: dict[str, Any] = {}
    for field in fields(cls):
        kind = classify_field(field)
        if field.name in values:
            value = values[field.name]
            if value is not None and isinstance(kind, EntityTupleField):
                value = tuple(entity_of(kind.type_, item) for item in value)
            elif value is not None and isinstance(kind, EntityField):
                value = entity_of(kind.type_, value)
            kwargs[field.name] = value
        elif field.default is not MISSING or field.default_factory is not MISSING:
            continue
        elif kind.is_array:
            kwargs[field.name] = ()
        elif isinstance(kind, EntityField):
            kwargs[field.name] = None if is_optional(field) else entity_of(kind.type_)
        elif is_optional(field):
            kwargs[field.name] = None
        else:
            kwargs[field.name] = _ZEROS.get(get_schema_field_type(field), 0)
    return cls(**kwargs)


def error_answer(api_key: int, version: int, code: int) -> Any | None:
    """The `version` response to API `api_key` saying `code` at its top level; None if it cannot say it."""
    try:
        response_type = load_response_schema(api_key, version)
    except (UnknownAPIKey, UnknownEntity):
        return None
    if "error_code" not in {field.name for field in fields(response_type)}:
        return None
    return entity_of(response_type, {"error_code": ErrorCode(code)})
