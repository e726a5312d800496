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
import numpy as np
import pyarrow as pa

from backbone.tracking.serde import RegistryClient, UndecodableError, schema_id_of
from backbone_jobs.avro_blocks import Unsupported, framed_body, read_block, records_fill_their_values

# The Kafka columns kept beside the event's own, and the two the quarantine needs.
META = [
    pa.field("kafka_partition", pa.int32(), False),
    pa.field("kafka_offset", pa.int64(), False),
    pa.field("kafka_timestamp", pa.timestamp("us", tz="UTC"), False),
    pa.field("schema_id", pa.int32()),
    pa.field("error", pa.string()),
    pa.field("raw", pa.binary()),
]
# The data source's columns the decoder reads.
DECODER_INPUT = ["value", "partition", "offset", "timestamp"]
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
    """Decodes the value column of Arrow batches from the data source (built on each Spark worker).

    A batch whose values all carry one schema id equal to the reader schema is decoded at once into
    columns (`avro_blocks`: one Avro block, every record's bounds checked first). Any other batch
    (several ids, a writer schema to resolve, bytes that do not decode) is decoded record by record with
    fastavro, which quarantines each bad record with its reason. Partition, offset and timestamp pass
    through as the Arrow columns they came in."""

    def __init__(self, registry_url: str, reader_schema: dict[str, Any]) -> None:
        self.registry_url = registry_url
        self.reader_schema = reader_schema
        self.schema = output_schema(reader_schema)
        self.event_schema = pa.schema(list(self.schema)[: -len(META)])
        self.registry: RegistryClient | None = None  # made where the decoding runs: it is not picklable
        self.reader: Any = None
        self.writers: dict[int, tuple[Any, Any]] = {}  # schema id -> (writer, reader or None)
        self.unsupported: set[int] = set()  # schema ids the block path cannot check: record by record

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "registry": None, "reader": None, "writers": {}, "unsupported": set()}

    def _schemas(self, schema_id: int) -> tuple[Any, Any]:
        found = self.writers.get(schema_id)
        if found is None:
            assert self.registry is not None
            writer = self.registry.schema(schema_id)
            # The registry's schemas come parsed, with fastavro's bookkeeping keys beside the schema's own.
            plain = (
                {k: v for k, v in writer.items() if not k.startswith("__")}
                if isinstance(writer, dict)
                else writer
            )
            same = plain == fastavro.parse_schema(self.reader_schema, _write_hint=False)
            found = self.writers[schema_id] = (writer, None if same else self.reader)
        return found

    def decode_one(self, value: bytes | None) -> tuple[int | None, dict[str, Any] | None, str | None]:
        try:
            schema_id = schema_id_of(value)
            writer, reader = self._schemas(schema_id)
        except UndecodableError as error:
            return None, None, str(error)
        assert value is not None
        stream = io.BytesIO(value)
        stream.seek(5)
        try:
            record = fastavro.schemaless_reader(stream, writer, reader)
        except Exception as error:  # any failure of foreign bytes: quarantined with its reason, not fatal
            return schema_id, None, f"does not decode with schema {schema_id}: {error!r}"
        if stream.tell() != len(value):  # a shorter record read from longer bytes: not what was written
            return (
                schema_id,
                None,
                f"does not decode with schema {schema_id}: {len(value) - stream.tell()} bytes left over",
            )
        return schema_id, record, None

    def decode_block(self, batch: pa.RecordBatch) -> pa.RecordBatch | None:
        """The batch decoded at once, or None when it must be decoded record by record."""
        framed = framed_body(batch.column("value"))
        if framed is None:
            return None
        schema_id, body, lengths = framed
        try:
            _, reader = self._schemas(schema_id)
        except UndecodableError:
            return None
        if reader is not None or schema_id in self.unsupported:
            return None
        try:
            if not records_fill_their_values(self.reader, body, lengths):
                return None  # some record does not end where its value ends
            table = read_block(self.reader_schema, len(lengths), body)  # the writer's, too
            if table.num_rows != len(lengths):
                return None
            event = table.cast(self.event_schema).combine_chunks()
        except Unsupported:
            self.unsupported.add(schema_id)
            return None
        except Exception:  # foreign bytes: decoded one by one, which names each bad record
            return None
        n = len(lengths)
        return pa.RecordBatch.from_arrays(
            [event.column(i).chunk(0) for i in range(event.num_columns)]
            + self._meta(batch, pa.array(np.full(n, schema_id), pa.int32()), None, None),
            schema=self.schema,
        )

    def _meta(
        self, batch: pa.RecordBatch, ids: pa.Array, errors: list[str | None] | None, raw: pa.Array | None
    ) -> list[pa.Array]:
        n = batch.num_rows
        return [
            batch.column("partition").cast(pa.int32()),
            batch.column("offset").cast(pa.int64()),
            batch.column("timestamp").cast(pa.timestamp("us", tz="UTC")),
            ids,
            pa.array(errors, pa.string()) if errors else pa.nulls(n, pa.string()),
            raw if raw is not None else pa.nulls(n, pa.binary()),
        ]

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        if self.registry is None:
            self.registry = RegistryClient(self.registry_url)
            self.reader = fastavro.parse_schema(self.reader_schema)
        decode = self.decode_one
        for batch in batches:
            decoded = self.decode_block(batch)
            if decoded is not None:
                yield decoded
                continue
            values = batch.column("value").to_pylist()
            records: list[dict[str, Any]] = []
            ids: list[int | None] = []
            errors: list[str | None] = []
            failed = False
            for value in values:
                schema_id, record, error = decode(value)
                records.append(record if record is not None else {})
                ids.append(schema_id)
                errors.append(error)
                failed = failed or error is not None
            event = pa.RecordBatch.from_pylist(records, schema=self.event_schema)
            raw = (
                pa.array([v if e else None for v, e in zip(values, errors, strict=True)], pa.binary())
                if failed
                else None
            )
            meta = self._meta(batch, pa.array(ids, pa.int32()), errors if failed else None, raw)
            yield pa.RecordBatch.from_arrays(event.columns + meta, schema=self.schema)
