"""The hand-declared error classes against kio's ErrorCode, which is generated from Kafka's own schemas."""

from __future__ import annotations

import pytest

from backbone.protocol import errors
from backbone.protocol.errors import (
    ErrorCode,
    KafkaError,
    KafkaStorageError,
    NotControllerError,
    UnknownServerError,
    error_class,
    error_for,
)

pytestmark = pytest.mark.unit

CODES = [code for code in ErrorCode if code is not ErrorCode.none]


@pytest.mark.parametrize("code", CODES, ids=[code.name for code in CODES])
def test_every_code_has_one_declared_class_that_agrees_with_kio(code: ErrorCode) -> None:
    cls = error_class(code)
    assert cls.code is code
    assert cls.retriable is code.retriable
    assert getattr(errors, cls.__name__) is cls  # declared in the module, found by its name
    assert cls.__name__.endswith("Error") and not cls.__name__.endswith(("ErrorError", "ExceptionError"))


def test_error_for_builds_the_declared_class_with_kafkas_name_in_its_message() -> None:
    error = error_for(56, "disk full")
    assert type(error) is KafkaStorageError and error.retriable
    assert str(error) == "KAFKA_STORAGE_ERROR: disk full"
    assert isinstance(error_for(ErrorCode.not_controller), NotControllerError)


def test_an_unknown_code_becomes_an_unknown_server_error_naming_it() -> None:
    error = error_for(9999, "what")
    assert type(error) is UnknownServerError
    assert error.message == "unknown error code 9999: what"


def test_a_second_class_for_a_declared_code_is_refused() -> None:
    with pytest.raises(TypeError, match="both declare code 41"):
        type("AnotherNotControllerError", (KafkaError,), {}, code=41, retriable=True)
    with pytest.raises(TypeError, match="without saying whether it is retriable"):
        type("HalfDeclaredError", (KafkaError,), {}, code=5)
    assert error_class(41) is NotControllerError
