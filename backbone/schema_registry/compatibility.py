"""Avro schemas: parsing (fastavro validates), the canonical text that identifies a schema, and the
compatibility levels, checked with Apache Avro's reader/writer schema-resolution checker."""

from __future__ import annotations

import json
from collections.abc import Sequence

import avro.errors
import avro.schema
import fastavro
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

from backbone.schema_registry import errors

LEVELS = (
    "NONE",
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
)
DEFAULT_LEVEL = "BACKWARD"


def check_level(level: object) -> str:
    if not isinstance(level, str) or level.upper() not in LEVELS:
        raise errors.invalid_compatibility(level)
    return level.upper()


def canonical(schema_text: object) -> str:
    """The schema as compact JSON with sorted keys: the same schema written differently gets one id.
    Raises 42201 for text that is not a valid Avro schema."""
    if not isinstance(schema_text, str) or not schema_text.strip():
        raise errors.invalid_schema('the request needs a non-empty "schema" string')
    try:
        parsed = json.loads(schema_text)
    except json.JSONDecodeError:
        parsed = schema_text.strip()  # a bare primitive name such as `string`
    try:
        fastavro.parse_schema(parsed, _write_hint=False)
    except (
        fastavro.schema.SchemaParseException,
        fastavro.schema.UnknownType,
        TypeError,
        ValueError,
        KeyError,
        AttributeError,
    ) as error:
        raise errors.invalid_schema(str(error)) from None
    return json.dumps(parsed, sort_keys=True, separators=(",", ":"))


def _parse(schema_text: str) -> avro.schema.Schema:
    try:
        return avro.schema.parse(schema_text)
    except (avro.errors.AvroException, ValueError) as error:
        raise errors.invalid_schema(str(error)) from None


def can_read(reader: str, writer: str) -> list[str]:
    """Why data written with `writer` cannot be read with `reader` (empty when it can), following the
    Avro specification's schema-resolution rules."""
    result = ReaderWriterCompatibilityChecker().get_compatibility(_parse(reader), _parse(writer))
    if result.compatibility is SchemaCompatibilityType.compatible:
        return []
    return [
        f"{incompatibility} at {location}"
        for incompatibility, location in zip(
            sorted(str(m) for m in result.messages) or [str(result.incompatibilities)],
            sorted(result.locations) or ["/"],
            strict=False,
        )
    ]


def problems(level: str, new: str, existing: Sequence[str]) -> list[str]:
    """What keeps `new` from being registered after `existing` (oldest first) under `level`."""
    if level == "NONE" or not existing:
        return []
    against = existing if level.endswith("_TRANSITIVE") else existing[-1:]
    found: list[str] = []
    for old in against:
        if level.startswith(("BACKWARD", "FULL")):
            found += [
                f"the new schema cannot read data written with an earlier one: {p}"
                for p in can_read(new, old)
            ]
        if level.startswith(("FORWARD", "FULL")):
            found += [
                f"an earlier schema cannot read data written with the new one: {p}"
                for p in can_read(old, new)
            ]
    return found
