"""Interoperability with kafka-python's record batch code, for every codec.

kafka-python is an independent implementation of the v2 format (and the codecs) that real clients use:
we decode what it builds, it decodes what we build, and both agree field by field.
"""

from __future__ import annotations

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from backbone.protocol.compression import Codec
from backbone.protocol.record_batch import HEADER_SIZE, read_header, set_base_offset, set_log_append_time
from backbone.protocol.records import RecordBatchBuilder, decode_batches

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_000
EVERY_CODEC = list(Codec)


def samples(count: int = 400) -> list[tuple[bytes | None, bytes | None, tuple, int]]:
    """Keys, null keys, null and empty values, headers (null values too), varied timestamps and sizes."""
    out = []
    for i in range(count):
        key = None if i % 7 == 0 else b"user-%d" % (i % 50)
        if i % 11 == 0:
            value = None
        elif i % 13 == 0:
            value = b""
        else:
            value = b'{"event":"page_view","n":%d,"pad":"%s"}' % (i, b"x" * (i % 300))
        headers: tuple = ()
        if i % 5 == 0:
            headers = (("trace-id", b"%032x" % i), ("null", None), ("empty", b""))
        timestamp = T0 + i * 37 - (5000 if i % 17 == 0 else 0)
        out.append((key, value, headers, timestamp))
    return out


SAMPLES = samples()


def expected(rows=SAMPLES, base_offset: int = 0) -> list[tuple]:
    return [(base_offset + i, ts, k, v, tuple(h)) for i, (k, v, h, ts) in enumerate(rows)]


def kafka_python_build(rows=SAMPLES, codec: int = 0, offsets: list[int] | None = None, **state: int) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=state.get("producer_id", -1),
        producer_epoch=state.get("producer_epoch", -1),
        base_sequence=state.get("base_sequence", -1),
        batch_size=1 << 30,
    )
    for i, (key, value, headers, timestamp) in enumerate(rows):
        offset = offsets[i] if offsets else i
        assert builder.append(offset, timestamp, key, value, list(headers)) is not None
    return bytes(builder.build())


def kafka_python_decode(data: bytes) -> list[tuple[DefaultRecordBatch, list[tuple]]]:
    """Every whole batch kafka-python finds, with its CRC checked and its records as our tuples."""
    batches = []
    records = MemoryRecords(data)
    while records.has_next():
        batch = records.next_batch()
        assert batch.validate_crc()
        rows = [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in batch]
        batches.append((batch, rows))
    return batches


def our_build(rows=SAMPLES, codec: int = 0, **kwargs: int) -> bytes:
    builder = RecordBatchBuilder(codec, **kwargs)
    for key, value, headers, timestamp in rows:
        builder.append(key, value, headers, timestamp)
    return builder.build()


@pytest.mark.parametrize("codec", EVERY_CODEC)
def test_we_decode_kafka_python_batches(codec: Codec) -> None:
    data = kafka_python_build(codec=codec)
    # kafka-python falls back to no compression when it does not pay; these rows compress.
    assert read_header(data).compression == codec
    [batch] = decode_batches(data)
    assert batch.records == expected()
    assert batch.header.max_timestamp == max(ts for *_, ts in SAMPLES)


@pytest.mark.parametrize("codec", EVERY_CODEC)
def test_kafka_python_decodes_our_batches(codec: Codec) -> None:
    data = our_build(codec=codec, producer_id=77, producer_epoch=3, base_sequence=1000)
    [(batch, rows)] = kafka_python_decode(data)
    assert batch.compression_type == codec
    assert rows == expected()
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (77, 3, 1000)
    assert batch.last_offset_delta == len(SAMPLES) - 1
    assert batch.records_count == len(SAMPLES)
    assert batch.first_timestamp == SAMPLES[0][3]
    assert batch.max_timestamp == max(ts for *_, ts in SAMPLES)


def test_uncompressed_records_are_byte_identical_to_kafka_pythons() -> None:
    # Everything after the header is the same bytes; the headers differ only where Kafka lets them
    # (kafka-python writes partition leader epoch 0 where we write -1, hence a different CRC too).
    ours, theirs = our_build(), kafka_python_build()
    assert ours[HEADER_SIZE:] == theirs[HEADER_SIZE:]
    assert read_header(ours)._replace(partition_leader_epoch=0, crc=0) == read_header(theirs)._replace(crc=0)


@pytest.mark.parametrize("codec", EVERY_CODEC)
def test_single_record_batches_both_ways(codec: Codec) -> None:
    row = [(None, b"only", (("h", None),), T0)]
    assert next(decode_batches(kafka_python_build(row, codec))).records == expected(row)
    assert kafka_python_decode(our_build(row, codec))[0][1] == expected(row)


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.ZSTD])
def test_log_append_time_batches_agree(codec: Codec) -> None:
    for data in (our_build(codec=codec), kafka_python_build(codec=codec)):
        stamped = bytearray(data)
        set_log_append_time(stamped, 0, T0 + 999_999)
        [(theirs_batch, theirs)] = kafka_python_decode(bytes(stamped))
        [ours] = decode_batches(stamped)
        assert theirs_batch.timestamp_type == 1
        assert ours.header.has_log_append_time
        assert ours.records == theirs
        assert {r[1] for r in ours.records} == {T0 + 999_999}


def test_compacted_batch_with_offset_gaps() -> None:
    rows = SAMPLES[:4]
    data = bytearray(kafka_python_build(rows, Codec.LZ4, offsets=[0, 3, 4, 9]))
    set_base_offset(data, 0, 500)
    [batch] = decode_batches(data)
    assert [r[0] for r in batch.records] == [500, 503, 504, 509]
    assert batch.next_offset == 510


def test_back_to_back_batches_with_a_truncated_tail() -> None:
    parts = []
    base = 0
    for index, codec in enumerate(EVERY_CODEC):
        rows = SAMPLES[index * 60 : index * 60 + 60]
        build = our_build if index % 2 else kafka_python_build
        part = bytearray(build(rows, codec))
        set_base_offset(part, 0, base)
        parts.append(bytes(part))
        base += len(rows)
    whole = b"".join(parts)
    tail = our_build(SAMPLES[:30], Codec.GZIP)
    for data in (whole, whole + tail[: len(tail) // 2], whole + tail[:20], whole + tail[:5]):
        ours = list(decode_batches(data))
        theirs = kafka_python_decode(data)
        assert [b.records for b in ours] == [rows for _, rows in theirs]
        assert [r for b in ours for r in b.records] == expected(SAMPLES[:300])
