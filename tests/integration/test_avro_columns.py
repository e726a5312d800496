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

from backbone.tracking import schemas
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


HEADER = {
    "event_id": "dc1-1",
    "time": 1_767_225_600_000,
    "datacenter": "dc1",
    "host": "h",
    "server": "s",
    "member_id": None,
    "session_id": "x",
    "page_key": "home",
}


def tracking_event(topic: str, i: int) -> dict:
    header = {**HEADER, "event_id": f"dc1-{i}", "member_id": None if i % 3 == 0 else i * 1_000_003}
    header["time"] += i * 997
    if topic == "page_views":
        return {"header": header, "referrer": None if i % 2 else "é" * (i % 70), "load_time_ms": i * 37 - 500}
    if topic == "searches":
        vertical = ["PEOPLE", "JOBS", "COMPANIES", "CONTENT"][i % 4]
        return {"header": header, "query": "q" * (i % 130), "vertical": vertical, "result_count": i}
    if topic == "impressions":
        return {"header": header, "item_ids": [i * 7**k for k in range(i % 5)], "module": "feed"}
    return {"header": header, "invitee_id": -(i**3), "message": None if i % 4 else "hi"}


def batch_of(values: list[bytes]) -> pa.RecordBatch:
    n = len(values)
    return pa.RecordBatch.from_pydict(
        {
            "value": pa.array(values, pa.binary()),
            "partition": pa.array([0] * n, pa.int32()),
            "offset": pa.array(range(n), pa.int64()),
            "timestamp": pa.array([datetime(2026, 1, 1, tzinfo=UTC)] * n, pa.timestamp("us", tz="UTC")),
        }
    )


class RecordByRecord(BatchDecoder):
    def decode_block(self, batch: pa.RecordBatch) -> None:
        return None


def test_a_batch_of_one_schema_decodes_at_once_exactly_as_record_by_record(broker, tmp_path):
    with running_registry(tmp_path, broker.bootstrap) as url:
        registry = RegistryClient(url)
        for topic, schema in schemas.TOPICS.items():
            encoder = AvroEncoder(registry, schemas.subject(topic), schema)
            batch = batch_of([encoder.encode(tracking_event(topic, i)) for i in range(300)])
            decoder = BatchDecoder(url, schema)
            (at_once,) = list(decoder(iter([batch])))
            assert decoder.decode_block(batch) is not None, topic  # the block path took it
            (one_by_one,) = list(RecordByRecord(url, schema)(iter([batch])))
            assert at_once.schema == one_by_one.schema
            assert at_once.to_pylist() == one_by_one.to_pylist(), topic
            assert at_once.column("error").null_count == 300


def test_values_whose_bytes_read_right_only_end_to_end_are_quarantined(broker, tmp_path):
    # Three bytes of the second value moved to the end of the first: laid end to end the bytes are a good
    # block, but neither value is a record on its own.
    with running_registry(tmp_path, broker.bootstrap) as url:
        encoder = AvroEncoder(RegistryClient(url), "page_views-value", schemas.PAGE_VIEW)
        values = [encoder.encode(tracking_event("page_views", i)) for i in range(50)]
        values[10], values[11] = values[10] + values[11][5:8], values[11][:5] + values[11][8:]
        (out,) = list(BatchDecoder(url, schemas.PAGE_VIEW)(iter([batch_of(values)])))
    errors = out.column("error").to_pylist()
    assert [i for i, error in enumerate(errors) if error] == [10, 11]
    assert "3 bytes left over" in errors[10]
    assert out.column("raw").to_pylist()[10:12] == values[10:12]
    assert out.column("header").to_pylist()[12]["event_id"] == "dc1-12"


@pytest.mark.timeout(120)
def test_bytes_left_over_at_the_end_of_a_batch_are_quarantined(broker, tmp_path):
    # Read as one block, such bytes made the block reader loop forever: the walk refuses them first.
    with running_registry(tmp_path, broker.bootstrap) as url:
        encoder = AvroEncoder(RegistryClient(url), "page_views-value", schemas.PAGE_VIEW)
        values = [encoder.encode(tracking_event("page_views", i)) for i in range(20)]
        values[-1] += b"\x00\x02"
        (out,) = list(BatchDecoder(url, schemas.PAGE_VIEW)(iter([batch_of(values)])))
    errors = out.column("error").to_pylist()
    assert [i for i, error in enumerate(errors) if error] == [19]
    assert "2 bytes left over" in errors[19]
