"""The hourly load's block decoder: values cut out of their Confluent framing, each record's bounds found
by walking every record at once through its schema exactly where fastavro wrote them, then read as one
Avro block; values that are not exactly one record each are refused before the read, not misread."""

from __future__ import annotations

import io
import random
import struct

import fastavro
import pyarrow as pa
import pytest

pytest.importorskip("polars_avro")

from backbone_jobs.avro_blocks import framed_body, read_block, records_fill_their_values

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
        {"name": "counts", "type": {"type": "map", "values": "long"}},
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
        "counts": {f"k{i}": long_() for i in range(rng.choice([0, 1, 3]))},
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


def test_every_record_is_walked_to_where_fastavro_ended_it():
    rng = random.Random(7)
    values = framed(42, [record(rng) for _ in range(2_000)], SCHEMA)
    found = framed_body(pa.array(values, pa.binary()))
    assert found is not None
    schema_id, body, lengths = found
    assert schema_id == 42
    assert body == b"".join(v[5:] for v in values)
    assert lengths.tolist() == [len(v) - 5 for v in values]
    assert records_fill_their_values(fastavro.parse_schema(SCHEMA), body, lengths)
    table = read_block(SCHEMA, len(values), body)
    assert table.num_rows == len(values)


def test_a_union_of_many_branches_and_a_named_type_used_again_are_walked():
    schema = {
        "type": "record",
        "name": "U",
        "fields": [
            {"name": "fx", "type": {"type": "fixed", "name": "Two", "size": 2}},
            {"name": "choice", "type": ["null", "int", "string", "Two"]},
        ],
    }
    rng = random.Random(3)
    choices = [None, -5, 1 << 30, "", "sss", b"ab"]
    values = framed(9, [{"fx": b"zz", "choice": rng.choice(choices)} for _ in range(500)], schema)
    _, body, lengths = framed_body(pa.array(values, pa.binary()))
    assert records_fill_their_values(fastavro.parse_schema(schema), body, lengths)
    values[0] = values[0][:7] + b"\x08"  # the union's branch 4: it has four, 0 to 3
    _, body, lengths = framed_body(pa.array(values, pa.binary()))
    assert not records_fill_their_values(fastavro.parse_schema(schema), body, lengths)


@pytest.mark.parametrize(
    "damage",
    [
        lambda vs: vs.__setitem__(-1, vs[-1] + b"\x00"),  # a byte left over at the end of the block
        lambda vs: vs.__setitem__(0, vs[0][:-1]),  # one short
        lambda vs: vs.__setitem__(3, vs[3] + vs[4][5:7]) or vs.__setitem__(4, vs[4][:5] + vs[4][7:]),
        lambda vs: vs.__setitem__(2, vs[2][:5] + b"\xff" * 30),  # no varint ends
        lambda vs: vs.__setitem__(2, vs[2][:5] + b"\x01" + vs[2][6:]),  # a negative length first
    ],
)
def test_values_that_are_not_one_record_each_are_refused(damage):
    schema = {
        "type": "record",
        "name": "R",
        "fields": [{"name": "s", "type": "string"}, {"name": "n", "type": "long"}],
    }
    values = framed(1, [{"s": "abc" * i, "n": i * 1_000} for i in range(10)], schema)
    damage(values)
    _, body, lengths = framed_body(pa.array(values, pa.binary()))
    assert not records_fill_their_values(fastavro.parse_schema(schema), body, lengths)


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


def test_the_walk_accepts_only_values_that_are_each_exactly_one_record():
    """Damaged batches (bytes changed, cut or added): whenever the walk accepts a batch, fastavro reads
    every value as one whole record (or finds text that is not UTF-8, which the block's read refuses as
    well); the walk refuses the rest, and never hangs or raises."""
    rng = random.Random(11)
    parsed = fastavro.parse_schema(SCHEMA)
    good = framed(5, [record(rng) for _ in range(30)], SCHEMA)
    accepted = refused = 0
    for _ in range(150):
        values = list(good)
        for _ in range(rng.randrange(1, 4)):
            i = rng.randrange(len(values))
            value = bytearray(values[i])
            where = rng.randrange(5, len(value))
            kind = rng.randrange(3)
            if kind == 0:
                value[where] = rng.randrange(256)
            elif kind == 1:
                del value[where : where + rng.randrange(1, 4)]
            else:
                value[where:where] = rng.randbytes(rng.randrange(1, 4))
            values[i] = bytes(value)
        _, body, lengths = framed_body(pa.array(values, pa.binary()))
        if records_fill_their_values(parsed, body, lengths):
            accepted += 1
            for value in values:
                stream = io.BytesIO(value[5:])
                try:
                    fastavro.schemaless_reader(stream, parsed, None)
                except UnicodeDecodeError:
                    # Bounds right, text not UTF-8: the block's read refuses the batch too (which is then
                    # decoded record by record).
                    with pytest.raises(ValueError):
                        read_block(SCHEMA, len(values), body)
                    break
                assert stream.tell() == len(value) - 5
        else:
            refused += 1
    assert refused > 50 and accepted > 5  # both verdicts were exercised
