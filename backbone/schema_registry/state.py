"""The registry's state, rebuilt by applying the `_schemas` topic's records in order (no I/O here).

Records (key and value are JSON, as Confluent's registry keeps them):

    {"keytype": "SCHEMA", "subject": S, "version": V}  ->  {"subject", "version", "id", "schema", "deleted"}
                                                           (null: the version was deleted permanently)
    {"keytype": "CONFIG", "subject": S or null}         ->  {"compatibilityLevel": "FULL"} (null: removed)
    {"keytype": "LEASE"}                         ->  {"instance", "url", "claimed_at_ms", "expires_at_ms"}

A SCHEMA record whose id is already taken by another schema is ignored (the first writer wins), so every
instance that reads the same log reaches the same state. A LEASE record takes effect only when the lease
before it had expired by its claim time or belongs to the same instance: racing claims resolve to the
first one in the log, the same for every reader.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from backbone.schema_registry import compatibility, errors

log = logging.getLogger(__name__)


@dataclass
class Version:
    schema_id: int
    deleted: bool = False


@dataclass(frozen=True)
class Lease:
    instance: str
    url: str
    claimed_at_ms: int
    expires_at_ms: int


@dataclass
class RegistryState:
    default_level: str = compatibility.DEFAULT_LEVEL
    schemas: dict[int, str] = field(default_factory=dict)  # id -> canonical text
    ids: dict[str, int] = field(default_factory=dict)  # canonical text -> id
    subjects: dict[str, dict[int, Version]] = field(default_factory=dict)
    levels: dict[str | None, str] = field(default_factory=dict)  # None: the global level
    lease: Lease | None = None
    last_id: int = 0

    # -- applying the log -------------------------------------------------------------------------------

    def apply(self, key: dict[str, Any], value: dict[str, Any] | None) -> None:
        kind = key.get("keytype")
        if kind == "SCHEMA":
            self._apply_schema(str(key["subject"]), int(key["version"]), value)
        elif kind == "CONFIG":
            subject = key.get("subject")
            if value is None:
                self.levels.pop(subject, None)
            else:
                self.levels[subject] = str(value["compatibilityLevel"])
        elif kind == "LEASE" and value is not None:
            claim = Lease(
                str(value["instance"]),
                str(value["url"]),
                int(value["claimed_at_ms"]),
                int(value["expires_at_ms"]),
            )
            current = self.lease
            if (
                current is None
                or current.instance == claim.instance
                or claim.claimed_at_ms >= current.expires_at_ms
            ):
                self.lease = claim
        else:
            log.warning("event=schemas_record_ignored key=%r", key)

    def _apply_schema(self, subject: str, version: int, value: dict[str, Any] | None) -> None:
        versions = self.subjects.setdefault(subject, {})
        if value is None:
            versions.pop(version, None)
            if not versions:
                del self.subjects[subject]
            return
        schema_id, text = int(value["id"]), str(value["schema"])
        known = self.schemas.get(schema_id)
        if known is not None and known != text:
            log.warning(
                "event=schemas_record_conflict subject=%s version=%d id=%d", subject, version, schema_id
            )
            return
        self.schemas[schema_id] = text
        self.last_id = max(self.last_id, schema_id)
        self.ids.setdefault(text, schema_id)
        versions[version] = Version(schema_id, bool(value.get("deleted", False)))

    # -- reading ----------------------------------------------------------------------------------------

    def subject_names(self, deleted: bool = False) -> list[str]:
        return sorted(
            s for s, vs in self.subjects.items() if deleted or any(not v.deleted for v in vs.values())
        )

    def versions(self, subject: str, deleted: bool = False) -> dict[int, Version]:
        """The subject's versions (soft-deleted ones too with `deleted`); 40401 when there are none."""
        found = {n: v for n, v in sorted(self.subjects.get(subject, {}).items()) if deleted or not v.deleted}
        if not found:
            raise errors.subject_not_found(subject)
        return found

    def version(self, subject: str, wanted: str | int, deleted: bool = False) -> tuple[int, Version]:
        versions = self.versions(subject, deleted)
        number = parse_version(wanted)
        if number == -1:
            number = max(versions)
        if number not in versions:
            raise errors.version_not_found(wanted)
        return number, versions[number]

    def level(self, subject: str | None) -> str:
        return self.levels.get(subject) or self.levels.get(None) or self.default_level

    def lookup(self, subject: str, text: str, deleted: bool = False) -> tuple[int, int]:
        """(version, id) of `text` under `subject`; 40401 or 40403 when it is not there."""
        versions = self.versions(subject, deleted)
        schema_id = self.ids.get(text)
        for number, version in versions.items():
            if version.schema_id == schema_id:
                return number, schema_id
        raise errors.schema_not_found()

    def subjects_of(self, schema_id: int, deleted: bool = False) -> list[tuple[str, int]]:
        if schema_id not in self.schemas:
            raise errors.schema_not_found(f"Schema {schema_id} not found")
        return [
            (subject, number)
            for subject, versions in sorted(self.subjects.items())
            for number, version in sorted(versions.items())
            if version.schema_id == schema_id and (deleted or not version.deleted)
        ]

    # -- planning writes --------------------------------------------------------------------------------

    def plan_registration(self, subject: str, text: str) -> tuple[int, int | None]:
        """The id `text` has or gets under `subject`, and the new version to write (None: already there).
        Raises 409 when the subject's compatibility level refuses it."""
        try:
            return self.lookup(subject, text)[1], None
        except errors.RegistryError:
            pass
        live = self.subjects.get(subject, {})
        earlier = [self.schemas[v.schema_id] for _, v in sorted(live.items()) if not v.deleted]
        found = compatibility.problems(self.level(subject), text, earlier)
        if found:
            raise errors.incompatible("; ".join(found))
        schema_id = self.ids.get(text) or self.last_id + 1
        return schema_id, max(live, default=0) + 1


def parse_version(wanted: str | int) -> int:
    """A version number from a path (`latest` and -1 mean the newest); 42202 for anything else."""
    if wanted in ("latest", -1, "-1"):
        return -1
    try:
        number = int(wanted)
    except (TypeError, ValueError):
        raise errors.invalid_version(wanted) from None
    if not 1 <= number <= 2**31 - 1:
        raise errors.invalid_version(wanted)
    return number


def encode(obj: dict[str, Any] | None) -> bytes | None:
    return None if obj is None else json.dumps(obj, separators=(",", ":")).encode()
