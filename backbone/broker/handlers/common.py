"""What every handler shares: building kio response entities for any version, and error codes."""

from __future__ import annotations

import dataclasses
import datetime
import logging
from collections.abc import Iterable
from functools import cache
from types import ModuleType
from typing import Any, TypeVar

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType
from kio.static.primitive import i32Timedelta

from backbone.protocol.errors import KafkaError

log = logging.getLogger(__name__)

T = TypeVar("T")


@cache
def response_module(api_key: int, version: int) -> ModuleType:
    return load_payload_module(api_key, version, EntityType.response)


@cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


def build(cls: type, **values: Any) -> Any:
    """An entity of `cls` from the values it has fields for (older versions lack some)."""
    names = _field_names(cls)
    return cls(**{k: v for k, v in values.items() if k in names})


def throttle(ms: int = 0) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=ms))


def millis(delta: datetime.timedelta) -> int:
    return int(delta.total_seconds() * 1000)


def error_code_of(exc: BaseException) -> ErrorCode:
    """The Kafka error code for an exception raised while serving one item of a request."""
    if isinstance(exc, KafkaError):
        return exc.code
    log.error("event=unexpected_error error=%r", exc, exc_info=exc)
    return ErrorCode.unknown_server_error


def error_message_of(exc: BaseException) -> str:
    return exc.message if isinstance(exc, KafkaError) else "unexpected server error"


def by_topic(rows: Iterable[tuple[str, T]]) -> dict[str, list[T]]:
    """Per-partition answers grouped under their topic, in the order topics first appear."""
    grouped: dict[str, list[T]] = {}
    for topic, row in rows:
        grouped.setdefault(topic, []).append(row)
    return grouped
