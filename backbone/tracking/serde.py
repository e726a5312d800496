"""Avro values in Confluent's wire format (a zero magic byte, the schema id as 4 big-endian bytes, then the
Avro binary), with schemas registered in and fetched from a Confluent-compatible registry over its REST API.

`AvroEncoder` registers its schema once and encodes with fastavro; `AvroDecoder` fetches writer schemas by id
(cached) and decodes any value written that way, by us or by Confluent's serializers.
"""

from __future__ import annotations

import io
import json
import struct
import threading
import urllib.error
import urllib.request
from typing import Any

import fastavro

MAGIC = 0
_PREFIX = struct.Struct(">bI")


class RegistryError(Exception):
    """The registry refused a request or could not be reached; the message holds its answer."""


class UndecodableError(ValueError):
    """A value that is not Confluent-framed Avro, names an unknown schema id, or does not decode."""


class RegistryClient:
    """The few registry calls producers and loaders need, with the schemas it fetched cached by id."""

    def __init__(self, url: str, timeout_s: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self._by_id: dict[int, Any] = {}
        self._lock = threading.Lock()

    def _call(self, method: str, path: str, body: object = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as answer:
                return json.loads(answer.read())
        except urllib.error.HTTPError as error:
            raise RegistryError(
                f"{method} {path}: HTTP {error.code} {error.read().decode(errors='replace')}"
            ) from None
        except (urllib.error.URLError, OSError) as error:
            raise RegistryError(f"the schema registry at {self.url} is not reachable: {error}") from None

    def register(self, subject: str, schema: dict[str, Any] | str) -> int:
        text = schema if isinstance(schema, str) else json.dumps(schema)
        return int(self._call("POST", f"/subjects/{subject}/versions", {"schema": text})["id"])

    def latest(self, subject: str) -> str:
        """The text of the subject's newest schema version."""
        return str(self._call("GET", f"/subjects/{subject}/versions/latest")["schema"])

    def schema(self, schema_id: int) -> Any:
        """The parsed writer schema with this id; UndecodableError when the registry has none."""
        with self._lock:
            found = self._by_id.get(schema_id)
        if found is not None:
            return found
        try:
            text = self._call("GET", f"/schemas/ids/{schema_id}")["schema"]
        except RegistryError as error:
            if "40403" in str(error):
                raise UndecodableError(f"unknown schema id {schema_id}") from None
            raise
        parsed = fastavro.parse_schema(json.loads(text))
        with self._lock:
            self._by_id[schema_id] = parsed
        return parsed


class AvroEncoder:
    def __init__(self, registry: RegistryClient, subject: str, schema: dict[str, Any]) -> None:
        self.schema_id = registry.register(subject, schema)
        self.parsed = fastavro.parse_schema(schema)
        self._prefix = _PREFIX.pack(MAGIC, self.schema_id)

    def encode(self, record: dict[str, Any]) -> bytes:
        out = io.BytesIO()
        out.write(self._prefix)
        fastavro.schemaless_writer(out, self.parsed, record)
        return out.getvalue()


def schema_id_of(value: bytes | None) -> int:
    if value is None or len(value) < _PREFIX.size or value[0] != MAGIC:
        raise UndecodableError("not Confluent-framed Avro (no magic byte 0 and schema id)")
    return _PREFIX.unpack_from(value)[1]


class AvroDecoder:
    def __init__(self, registry: RegistryClient) -> None:
        self.registry = registry

    def decode(self, value: bytes | None) -> tuple[int, dict[str, Any]]:
        """(schema id, record); UndecodableError for anything that does not decode."""
        schema_id = schema_id_of(value)
        if value is None:  # schema_id_of refused it already; this tells the type checker
            raise UndecodableError("not Confluent-framed Avro (no value)")
        writer = self.registry.schema(schema_id)
        stream = io.BytesIO(value)
        stream.seek(_PREFIX.size)
        try:
            record = fastavro.schemaless_reader(stream, writer, None)
        except (EOFError, ValueError, TypeError, IndexError, UnicodeDecodeError, struct.error) as error:
            raise UndecodableError(f"schema {schema_id}: the value does not decode: {error!r}") from None
        if stream.tell() != len(value):  # a shorter record read from longer bytes: not what was written
            raise UndecodableError(f"schema {schema_id}: {len(value) - stream.tell()} bytes left over")
        if not isinstance(record, dict):
            raise UndecodableError(f"schema {schema_id}: not a record schema ({type(record).__name__} read)")
        return schema_id, record
