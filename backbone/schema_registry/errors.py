"""Errors in the shape and with the codes of Confluent's Schema Registry:
`{"error_code": 40401, "message": "..."}`."""

from __future__ import annotations


class RegistryError(Exception):
    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message

    def body(self) -> dict[str, object]:
        return {"error_code": self.code, "message": self.message}


def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(404, 40401, f"Subject '{subject}' not found.")


def version_not_found(version: object) -> RegistryError:
    return RegistryError(404, 40402, f"Version {version} not found.")


def schema_not_found(detail: str = "Schema not found") -> RegistryError:
    return RegistryError(404, 40403, detail)


def subject_soft_deleted(subject: str) -> RegistryError:
    return _soft_deleted(40404, f"Subject '{subject}'")


def subject_not_soft_deleted(subject: str) -> RegistryError:
    return _not_soft_deleted(40405, f"Subject '{subject}'")


def version_soft_deleted(subject: str, version: int) -> RegistryError:
    return _soft_deleted(40406, f"Subject '{subject}' Version {version}")


def version_not_soft_deleted(subject: str, version: int) -> RegistryError:
    return _not_soft_deleted(40407, f"Subject '{subject}' Version {version}")


# Confluent's wording for a subject and for a version alike.
def _soft_deleted(code: int, what: str) -> RegistryError:
    return RegistryError(404, code, f"{what} was soft deleted. Set permanent=true to delete permanently")


def _not_soft_deleted(code: int, what: str) -> RegistryError:
    return RegistryError(404, code, f"{what} was not deleted first before being permanently deleted")


def subject_config_not_found(subject: str) -> RegistryError:
    return RegistryError(
        404, 40408, f"Subject '{subject}' does not have subject-level compatibility configured"
    )


def incompatible(detail: str) -> RegistryError:
    return RegistryError(
        409, 409, f"Schema being registered is incompatible with an earlier schema: {detail}"
    )


def invalid_schema(detail: str) -> RegistryError:
    return RegistryError(422, 42201, f"Invalid schema: {detail}")


def invalid_version(version: object) -> RegistryError:
    return RegistryError(
        422,
        42202,
        f"The specified version '{version}' is not a valid version id. "
        'Allowed values are between [1, 2^31-1] and the string "latest"',
    )


def invalid_compatibility(level: object) -> RegistryError:
    return RegistryError(
        422,
        42203,
        f"Invalid compatibility level {level!r}; use one of NONE, BACKWARD, BACKWARD_TRANSITIVE, FORWARD, "
        "FORWARD_TRANSITIVE, FULL, FULL_TRANSITIVE",
    )


def bad_request(detail: str) -> RegistryError:
    return RegistryError(400, 400, detail)


def store_error(detail: str) -> RegistryError:
    return RegistryError(500, 50001, f"Error in the backend data store: {detail}")


def store_timeout(detail: str) -> RegistryError:
    return RegistryError(500, 50002, f"Operation timed out: {detail}")


def forwarding_error(detail: str) -> RegistryError:
    return RegistryError(500, 50003, f"Error while forwarding the request to the leader: {detail}")
