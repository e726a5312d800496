"""The hourly load's decoder against a real registry: Confluent-framed Avro values become the reader
schema's columns (an older writer version resolved, its new field defaulted), the Kafka columns pass
through unchanged, and every value that does not decode (no framing, unknown schema id, truncated bytes,
bytes left over) keeps its bytes and a reason for the quarantine."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pyarrow as pa
import pytest
from registry_support import running_registry

from backbone.tracking.serde import AvroEncoder, RegistryClient
from backbone_jobs.avro_columns import BatchDecoder

pytestmark = pytest.mark.integration

V1 = {
    "type": "record",
    "name": "View",
    "namespace": "test",
    "fields": [
        {"name": "member", "type": "long"},
        {"name": "page", "type": "string"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
    ],
}
V2 = {**V1, "fields": [*V1["fields"], {"name": "ms", "type": ["null", "long"], "default": None}]}


def test_batch_decoder_columns_resolution_and_quarantine(broker, tmp_path):
    with running_registry(tmp_path, broker.bootstrap) as url:
        registry = RegistryClient(url)
        old = AvroEncoder(registry, "views-value", V1)
        new = AvroEncoder(registry, "views-value", V2)
        good_old = old.encode({"member": 1, "page": "/a", "tags": ["x"]})
        good_new = new.encode({"member": 2, "page": "/b", "tags": [], "ms": 7})
        values = [
            good_new,
            good_old,
            b"not avro",
            b"\x00\x00\x00\x27\x0f" + good_old[5:],  # schema id 9999: unknown
            good_old[:-2],  # truncated
            good_new + b"xx",  # bytes left over
        ]
        n = len(values)
        stamp = datetime(2026, 1, 1, tzinfo=UTC)
        batch = pa.RecordBatch.from_pydict(
            {
                "value": pa.array(values, pa.binary()),
                "partition": pa.array([3] * n, pa.int32()),
                "offset": pa.array(range(100, 100 + n), pa.int64()),
                "timestamp": pa.array([stamp] * n, pa.timestamp("us", tz="UTC")),
            }
        )
        decoder = BatchDecoder(url, json.loads(registry.latest("views-value")))
        (out,) = list(decoder(iter([batch])))
    rows = out.to_pylist()
    assert [(r["member"], r["page"], r["tags"], r["ms"]) for r in rows[:2]] == [
        (2, "/b", [], 7),
        (1, "/a", ["x"], None),
    ]
    assert [r["schema_id"] for r in rows[:2]] == [new.schema_id, old.schema_id]
    assert [(r["kafka_partition"], r["kafka_offset"], r["kafka_timestamp"]) for r in rows] == [
        (3, 100 + i, stamp) for i in range(n)
    ]
    assert [r["error"] is None for r in rows] == [True, True, False, False, False, False]
    assert [r["raw"] for r in rows] == [None, None, *values[2:]]
    assert "not Confluent-framed" in rows[2]["error"] and rows[2]["schema_id"] is None
    assert "unknown schema id 9999" in rows[3]["error"]
    assert "does not decode" in rows[4]["error"] and rows[4]["member"] is None
    assert "2 bytes left over" in rows[5]["error"] and rows[5]["schema_id"] == new.schema_id
