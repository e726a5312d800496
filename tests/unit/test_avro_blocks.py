"""The hourly load's block decoder: values cut out of their Confluent framing, read as one Avro block, and
each record's encoded size computed from its columns exactly as fastavro wrote it, for every type the
size rule covers; values it cannot take are refused, not misread."""

from __future__ import annotations

import io
import random
import struct

import fastavro
import numpy as np
import pyarrow as pa
import pytest

pytest.importorskip("polars_avro")

from backbone_jobs.avro_blocks import Unsupported, framed_body, read_block, table_sizes

pytestmark = pytest.mark.unit

SCHEMA = {
    "type": "record",
    "name": "Everything",
    "namespace": "test",
    "fields": [
        {"name": "i", "type": "int"},
        {"name": "l", "type": "long"},
        {"name": "f", "type": "float"},
        {"name": "d", "type": "double"},
        {"name": "b", "type": "boolean"},
        {"name": "raw", "type": "bytes"},
        {"name": "s", "type": "string"},
        {"name": "fx", "type": {"type": "fixed", "name": "Four", "size": 4}},
        {"name": "e", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN", "BLUE"]}},
        {"name": "maybe", "type": ["null", "long"], "default": None},
        {"name": "later", "type": ["string", "null"]},
        {"name": "items", "type": {"type": "array", "items": "string"}},
        {"name": "when", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {
            "name": "inner",
            "type": {
                "type": "record",
                "name": "Inner",
                "fields": [
                    {"name": "n", "type": "long"},
                    {"name": "tags", "type": {"type": "array", "items": "long"}},
                ],
            },
        },
    ],
}
LIMITS = [0, 1, -1, 63, -64, 64, -65, 8191, 8192, 2**31 - 1, -(2**31)]


def record(rng: random.Random) -> dict:
    def long_() -> int:
        return rng.choice([rng.choice(LIMITS), rng.randrange(-(2**63), 2**63), rng.randrange(-300, 300)])

    return {
        "i": rng.choice(LIMITS),
        "l": long_(),
        "f": rng.random(),
        "d": rng.random() * 1e300,
        "b": rng.random() < 0.5,
        "raw": rng.randbytes(rng.choice([0, 1, 63, 64, 200])),
        "s": "é€" * rng.randrange(0, 50),
        "fx": rng.randbytes(4),
        "e": rng.choice(["RED", "GREEN", "BLUE"]),
        "maybe": None if rng.random() < 0.3 else long_(),
        "later": None if rng.random() < 0.3 else "x" * rng.randrange(0, 200),
        "items": ["t" * rng.randrange(0, 3) for _ in range(rng.choice([0, 0, 1, 5, 70]))],
        "when": rng.randrange(0, 2**41),
        "day": rng.randrange(-20_000, 20_000),
        "inner": {"n": long_(), "tags": [long_() for _ in range(rng.choice([0, 2, 130]))]},
    }


def framed(schema_id: int, records: list[dict], schema: dict) -> list[bytes]:
    parsed = fastavro.parse_schema(schema)
    values = []
    for r in records:
        out = io.BytesIO()
        out.write(struct.pack(">bI", 0, schema_id))
        fastavro.schemaless_writer(out, parsed, r)
        values.append(out.getvalue())
    return values


def test_each_records_size_is_what_fastavro_wrote():
    rng = random.Random(7)
    values = framed(42, [record(rng) for _ in range(2_000)], SCHEMA)
    found = framed_body(pa.array(values, pa.binary()))
    assert found is not None
    schema_id, body, lengths = found
    assert schema_id == 42
    assert body == b"".join(v[5:] for v in values)
    assert lengths.tolist() == [len(v) - 5 for v in values]
    table = read_block(SCHEMA, len(values), body)
    assert table.num_rows == len(values)
    assert np.array_equal(table_sizes(fastavro.parse_schema(SCHEMA), table), lengths)


def test_a_slice_of_values_is_cut_at_its_own_offsets():
    values = framed(3, [record(random.Random(i)) for i in range(20)], SCHEMA)
    found = framed_body(pa.array(values, pa.binary()).slice(5, 10))
    assert found is not None
    assert found[1] == b"".join(v[5:] for v in values[5:15])


@pytest.mark.parametrize(
    "values",
    [
        [b"\x00\x00\x00\x00\x01a", None],  # a null value
        [b"\x00\x00\x00\x00\x01a", b"\x00\x00\x00"],  # shorter than the framing
        [b"\x00\x00\x00\x00\x01a", b"\x01\x00\x00\x00\x01a"],  # no magic byte
        [b"\x00\x00\x00\x00\x01a", b"\x00\x00\x00\x00\x02a"],  # two schema ids
        [],
    ],
)
def test_values_not_all_framed_with_one_schema_id_are_refused(values):
    assert framed_body(pa.array(values, pa.binary())) is None


def test_a_type_the_size_rule_does_not_cover_is_named():
    schema = {
        "type": "record",
        "name": "M",
        "fields": [{"name": "m", "type": {"type": "map", "values": "long"}}],
    }
    values = framed(1, [{"m": {"a": 1}}], schema)
    _, body, _ = framed_body(pa.array(values, pa.binary()))
    with pytest.raises(Unsupported, match="map"):
        table_sizes(fastavro.parse_schema(schema), read_block(schema, 1, body))
