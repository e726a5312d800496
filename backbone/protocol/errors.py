"""Kafka error codes as Python exceptions, one class per code.

The codes themselves come from kio (generated from Kafka's own schemas). Every code gets an exception
class named after it (`corrupt_message` -> `CorruptMessageError`), so every room can raise and catch
errors by name, and `error_for` turns a code read from the wire into the matching exception.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode", "KafkaError", "error_class", "error_for"]


class KafkaError(Exception):
    """An error that maps to one Kafka error code (`code`, a kio ErrorCode)."""

    code: ErrorCode = ErrorCode.unknown_server_error

    def __init__(self, message: str = "", record_errors: tuple[tuple[int, str | None], ...] = ()) -> None:
        self.message = message
        # (index in its batch, message) of the records that failed a produced batch (KIP-467).
        self.record_errors = record_errors
        name = self.code.name.upper()
        super().__init__(f"{name}: {message}" if message else name)

    @property
    def retriable(self) -> bool:
        return self.code.retriable


def _class_name(code: ErrorCode) -> str:
    return "".join(part.capitalize() for part in code.name.split("_")) + "Error"


_CLASSES: dict[ErrorCode, type[KafkaError]] = {}
for _code in ErrorCode:
    if _code is ErrorCode.none:
        continue
    _cls = type(_class_name(_code), (KafkaError,), {"code": _code, "__module__": __name__})
    _CLASSES[_code] = _cls
    globals()[_cls.__name__] = _cls
    __all__.append(_cls.__name__)


def error_class(code: int | ErrorCode) -> type[KafkaError]:
    """The exception class for an error code."""
    return _CLASSES[ErrorCode(code)]


def error_for(code: int | ErrorCode, message: str = "") -> KafkaError:
    """The exception for a numeric error code received from the wire."""
    try:
        return error_class(code)(message)
    except (ValueError, KeyError):
        return _CLASSES[ErrorCode.unknown_server_error](f"unknown error code {code}: {message}")
