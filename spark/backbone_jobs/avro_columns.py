"""Avro values to Arrow columns: the reader schema's Arrow type, and a batch decoder for `mapInArrow`.

Every record is decoded with its writer schema (by the id in its Confluent framing, fetched from the
registry) and resolved to one reader schema, the subject's latest version when the run starts, following
Avro's schema-resolution rules; so one run writes one set of columns whatever versions the producers used.
A record that does not decode or resolve keeps its bytes and the reason, for the quarantine.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import fastavro
import pyarrow as pa

from backbone.tracking.serde import RegistryClient, UndecodableError, schema_id_of

# The Kafka columns kept beside the event's own, and the two the quarantine needs.
META = [
    pa.field("kafka_partition", pa.int32(), False),
    pa.field("kafka_offset", pa.int64(), False),
    pa.field("kafka_timestamp", pa.timestamp("us", tz="UTC"), False),
    pa.field("schema_id", pa.int32()),
    pa.field("error", pa.string()),
    pa.field("raw", pa.binary()),
]
_PRIMITIVES = {
    "null": pa.null(),
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
}


def arrow_type(schema: Any) -> pa.DataType:
    """The Arrow type of a parsed Avro schema (records become structs, enums strings, nullable unions their
    one other branch)."""
    if isinstance(schema, str):
        return _PRIMITIVES[schema]
    if isinstance(schema, list):
        branches = [s for s in schema if s != "null"]
        if len(branches) != 1:
            raise ValueError(f"unions other than [null, T] have no column type here: {schema}")
        return arrow_type(branches[0])
    kind, logical = schema["type"], schema.get("logicalType")
    if logical in ("timestamp-millis", "timestamp-micros"):
        return pa.timestamp("us", tz="UTC")
    if logical == "date":
        return pa.date32()
    if kind == "record":
        return pa.struct([pa.field(f["name"], arrow_type(f["type"])) for f in schema["fields"]])
    if kind == "enum":
        return pa.string()
    if kind == "array":
        return pa.list_(arrow_type(schema["items"]))
    if kind == "map":
        return pa.map_(pa.string(), arrow_type(schema["values"]))
    if kind == "fixed":
        return pa.binary(schema["size"])
    return arrow_type(kind)


def output_schema(reader_schema: dict[str, Any]) -> pa.Schema:
    """The event's own top-level fields, then the Kafka columns."""
    parsed = fastavro.parse_schema(reader_schema, _write_hint=False)
    return pa.schema([pa.field(f["name"], arrow_type(f["type"])) for f in parsed["fields"]] + META)


class BatchDecoder:
    """Decodes the value column of Arrow batches from the data source (built on each Spark worker)."""

    def __init__(self, registry_url: str, reader_schema: dict[str, Any]) -> None:
        self.registry_url = registry_url
        self.reader_schema = reader_schema
        self.schema = output_schema(reader_schema)
        self.registry: RegistryClient | None = None  # made where the decoding runs: it is not picklable
        self.reader: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "registry": None, "reader": None}

    def decode_one(self, value: bytes | None) -> tuple[int | None, dict[str, Any] | None, str | None]:
        try:
            schema_id = schema_id_of(value)
            assert self.registry is not None
            writer = self.registry.schema(schema_id)
            stream = io.BytesIO(value)
            stream.seek(5)
            record = fastavro.schemaless_reader(stream, writer, self.reader)
        except UndecodableError as error:
            return None, None, str(error)
        except Exception as error:  # any failure of foreign bytes: quarantined with its reason, not fatal
            return schema_id, None, f"does not decode with schema {schema_id}: {error!r}"
        return schema_id, record, None

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        if self.registry is None:
            self.registry = RegistryClient(self.registry_url)
            self.reader = fastavro.parse_schema(self.reader_schema)
        for batch in batches:
            columns = batch.to_pydict()
            rows = []
            for value, partition, offset, stamp in zip(
                columns["value"], columns["partition"], columns["offset"], columns["timestamp"], strict=True
            ):
                schema_id, record, error = self.decode_one(value)
                row = record or {}
                row.update(
                    kafka_partition=partition,
                    kafka_offset=offset,
                    kafka_timestamp=stamp,
                    schema_id=schema_id,
                    error=error,
                    raw=value if error else None,
                )
                rows.append(row)
            yield pa.RecordBatch.from_pylist(rows, schema=self.schema)
