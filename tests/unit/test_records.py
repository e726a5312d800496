"""Record batches v2 built and decoded by our own code: fields, limits, odd shapes, and bad input."""

from __future__ import annotations

import random
import struct
import time
from collections import Counter

import pytest
from crc32c import crc32c

from backbone.protocol.compression import Codec
from backbone.protocol.errors import (
    CorruptMessageError,
    KafkaError,
    UnsupportedCompressionTypeError,
    UnsupportedVersionError,
)
from backbone.protocol.record_batch import (
    CRC_OFFSET,
    CRC_START,
    HEADER_SIZE,
    check_batch,
    set_base_offset,
    set_log_append_time,
)
from backbone.protocol.record_runs import UniformRun
from backbone.protocol.records import (
    KEY,
    TIMESTAMP,
    VALUE,
    ControlType,
    RecordBatchBuilder,
    control_type,
    decode_batch,
    decode_batches,
    estimate_record_size,
)
from backbone.protocol.varint import read_varint

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_000
# (key, value, headers, timestamp) covering nulls, empties, headers with null values, odd timestamps.
SAMPLES = [
    (b"k1", b"v1", (), T0),
    (None, b"null key", (), T0 + 1),
    (b"null value", None, (), T0 + 2),
    (None, None, (), T0 + 3),
    (b"", b"", (), T0 + 4),
    (b"h", b"headers", (("trace", b"abc"), ("empty", b""), ("null", None), ("ünïcode", b"\x00\xff")), T0 + 5),
    (b"earlier", b"negative timestamp delta", (), T0 - 5000),
    (b"later", b"large timestamp delta", (), T0 + 10**9),
    (b"k" * 100, b"v" * 100, (), T0),
    (b"k" * 9000, b"v" * 20_000, (("big", b"h" * 9000),), T0),
]


def build(samples=SAMPLES, codec: int = Codec.NONE, **kwargs: object) -> bytes:
    builder = RecordBatchBuilder(codec, **kwargs)  # type: ignore[arg-type]
    for key, value, headers, timestamp in samples:
        builder.append(key, value, headers, timestamp)
    return builder.build()


def expected(samples=SAMPLES, base_offset: int = 0) -> list[tuple]:
    return [(base_offset + i, ts, k, v, tuple(h)) for i, (k, v, h, ts) in enumerate(samples)]


def recrc(batch: bytearray) -> bytearray:
    struct.pack_into(">I", batch, CRC_OFFSET, crc32c(memoryview(batch)[CRC_START:]))
    return batch


@pytest.mark.parametrize("codec", list(Codec))
def test_round_trip_every_codec(codec: Codec) -> None:
    batch = build(codec=codec)
    [decoded] = decode_batches(batch)
    assert decoded.records == expected()
    header = decoded.header
    assert header.compression == codec
    assert header.record_count == len(SAMPLES)
    assert header.last_offset_delta == len(SAMPLES) - 1
    assert header.base_timestamp == T0
    assert header.max_timestamp == T0 + 10**9
    assert not decoded.is_control and not header.is_transactional and not header.has_log_append_time
    assert header.base_offset == 0 and decoded.next_offset == len(SAMPLES)


def test_header_fields_are_what_a_producer_sends() -> None:
    batch = build(producer_id=4242, producer_epoch=7, base_sequence=100, transactional=True)
    header = check_batch(batch)  # the broker's validator accepts it
    assert header.base_offset == 0
    assert header.partition_leader_epoch == -1
    assert header.magic == 2
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (4242, 7, 100)
    assert header.is_transactional
    assert header.size == len(batch)


def test_defaults_mean_no_idempotence() -> None:
    header = check_batch(build())
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (-1, -1, -1)
    assert not header.is_transactional


def test_timestamp_defaults_to_now() -> None:
    builder = RecordBatchBuilder()
    before = time.time_ns() // 1_000_000
    builder.append(b"k", b"v")
    after = time.time_ns() // 1_000_000
    [batch] = decode_batches(builder.build())
    assert before <= batch.records[0][TIMESTAMP] <= after


def test_base_offset_written_by_the_broker_shifts_every_offset() -> None:
    batch = bytearray(build())
    set_base_offset(batch, 0, 1_000_000_000_000)
    [decoded] = decode_batches(batch)
    assert decoded.records == expected(base_offset=1_000_000_000_000)


def test_many_records_use_long_varints() -> None:
    # 20 000 records: offset deltas past 8191 take three-byte varints; timestamps step by 1000 ms.
    samples = [(b"%d" % i, b"x" * (i % 300), (), T0 + 1000 * i) for i in range(20_000)]
    [decoded] = decode_batches(build(samples, Codec.LZ4))
    assert decoded.records == expected(samples)


def test_log_append_time_gives_every_record_the_batch_max_timestamp() -> None:
    batch = bytearray(build())
    set_log_append_time(batch, 0, T0 + 42)
    [decoded] = decode_batches(batch)
    assert decoded.header.has_log_append_time
    assert [r[TIMESTAMP] for r in decoded.records] == [T0 + 42] * len(SAMPLES)
    assert [r[VALUE] for r in decoded.records] == [s[1] for s in SAMPLES]


def test_control_batch_is_flagged_and_its_marker_read() -> None:
    builder = RecordBatchBuilder(control=True, transactional=True, producer_id=9, producer_epoch=1)
    builder.append(struct.pack(">hh", 0, ControlType.COMMIT), struct.pack(">hi", 0, 5), (), T0)
    [decoded] = decode_batches(builder.build())
    assert decoded.is_control and decoded.header.is_transactional
    assert control_type(decoded.records[0]) == ControlType.COMMIT
    with pytest.raises(CorruptMessageError):
        control_type((0, T0, None, None, ()))


def test_header_keys_that_are_not_utf8_round_trip_byte_for_byte() -> None:
    raw_key = b"\xff\xfe-bin"
    key = raw_key.decode("utf-8", "surrogateescape")
    batch = build([(b"k", b"v", ((key, b"x"),), T0)])
    assert raw_key in batch
    [decoded] = decode_batches(batch)
    assert decoded.records[0][4] == ((key, b"x"),)


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_any_buffer_type_decodes_to_bytes_fields(kind: type) -> None:
    data = build() + build(codec=Codec.GZIP)
    batches = list(decode_batches(kind(data) if kind is not memoryview else memoryview(bytearray(data))))
    assert [b.records for b in batches] == [expected(), expected()]
    for record in batches[0].records:
        assert record[KEY] is None or type(record[KEY]) is bytes
        assert record[VALUE] is None or type(record[VALUE]) is bytes


def test_several_batches_and_every_truncated_tail() -> None:
    first, second = build(SAMPLES[:3]), build(SAMPLES[3:6], Codec.ZSTD)
    third = build(SAMPLES[6:], Codec.SNAPPY)
    whole = first + second
    assert [b.records[0][VALUE] for b in decode_batches(whole)] == [b"v1", None]
    for cut in range(len(third)):
        # A partial last batch, cut anywhere (even inside its length field), is ignored.
        decoded = list(decode_batches(whole + third[:cut]))
        assert [len(b.records) for b in decoded] == [3, 3]
    assert len(list(decode_batches(whole + third))) == 3
    assert list(decode_batches(b"")) == []
    assert list(decode_batches(first[: HEADER_SIZE + 5])) == []


def test_decode_batch_at_a_position() -> None:
    data = build(SAMPLES[:2]) + build(SAMPLES[2:4])
    second = decode_batch(data, len(build(SAMPLES[:2])))
    assert second.records == [(0, T0 + 2, b"null value", None, ()), (1, T0 + 3, None, None, ())]


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.LZ4])
def test_crc_mismatch_raises_unless_skipped(codec: Codec) -> None:
    batch = bytearray(build([(b"k", b"value", (), T0)], codec))
    batch[CRC_OFFSET] ^= 0xFF
    with pytest.raises(CorruptMessageError, match="CRC"):
        list(decode_batches(batch))
    [decoded] = decode_batches(batch, verify_crc=False)
    assert decoded.records[0][KEY] == b"k"


def test_magic_other_than_2_is_unsupported() -> None:
    batch = bytearray(build())
    batch[16] = 1
    with pytest.raises(UnsupportedVersionError):
        list(decode_batches(batch))
    with pytest.raises(UnsupportedVersionError):
        list(decode_batches(batch, verify_crc=False))


def test_record_count_larger_than_the_records_raises() -> None:
    batch = bytearray(build(SAMPLES[:2]))
    struct.pack_into(">i", batch, 57, 3)  # record_count
    struct.pack_into(">i", batch, 23, 2)  # last_offset_delta, so the header itself is consistent
    with pytest.raises(CorruptMessageError, match="ends inside record 2"):
        list(decode_batches(recrc(batch)))


def test_bytes_after_the_last_record_raise() -> None:
    batch = bytearray(build(SAMPLES[:2]))
    struct.pack_into(">i", batch, 57, 1)
    struct.pack_into(">i", batch, 23, 0)
    with pytest.raises(CorruptMessageError, match="records end at byte"):
        list(decode_batches(recrc(batch)))


def test_absurd_record_count_raises_before_decoding() -> None:
    batch = bytearray(build(SAMPLES[:1]))
    struct.pack_into(">i", batch, 57, 2**31 - 1)
    with pytest.raises(KafkaError):
        list(decode_batches(recrc(batch)))
    with pytest.raises(CorruptMessageError, match="claims"):
        list(decode_batches(batch, verify_crc=False))


def test_record_length_disagreeing_with_its_fields_raises() -> None:
    batch = bytearray(build([(b"k", b"v", (), T0)]))
    batch[HEADER_SIZE] += 2  # the record's length varint: one more than its fields
    with pytest.raises(CorruptMessageError, match="should end"):
        list(decode_batches(recrc(batch)))


def test_null_header_key_raises() -> None:
    batch = bytearray(build([(b"k", b"v", (("a", b"b"),), T0)]))
    pos = batch.index(b"\x02a\x02b")  # header key length 1 -> make it -1 (null)
    batch[pos] = 0x01
    with pytest.raises(CorruptMessageError, match="null"):
        list(decode_batches(recrc(batch)))


@pytest.mark.parametrize("codec", list(Codec))
def test_random_corruption_only_ever_raises_kafka_errors(codec: Codec) -> None:
    # Mutations from the record count on, CRC check off: any other exception type fails the test.
    rng = random.Random(int(codec))
    clean = build(SAMPLES[:8], codec)
    outcomes: Counter[str] = Counter()
    for _ in range(300):
        batch = bytearray(clean)
        for _ in range(rng.randint(1, 4)):
            batch[rng.randrange(HEADER_SIZE - 4, len(batch))] = rng.randrange(256)
        try:
            list(decode_batches(batch, verify_crc=False))
            outcomes["decoded"] += 1
        except KafkaError as exc:
            outcomes[type(exc).__name__] += 1
    assert outcomes["CorruptMessageError"] > 0
    assert set(outcomes) <= {"decoded", "CorruptMessageError"}


def test_size_in_bytes_is_exact_for_uncompressed_batches() -> None:
    builder = RecordBatchBuilder()
    assert builder.size_in_bytes == HEADER_SIZE
    for key, value, headers, timestamp in SAMPLES:
        before = builder.size_in_bytes
        builder.append(key, value, headers, timestamp)
        assert before < builder.size_in_bytes <= before + estimate_record_size(key, value, headers)
    assert builder.size_in_bytes == len(builder.build())
    assert builder.record_count == len(SAMPLES)


def test_compressed_batch_is_smaller_than_its_size_estimate() -> None:
    builder = RecordBatchBuilder(Codec.ZSTD)
    for i in range(1000):
        builder.append(b"key", b"a fairly repetitive value %d" % (i % 10), (), T0)
    assert len(builder.build()) < builder.size_in_bytes / 5


def test_has_room_for_caps_the_batch_but_always_takes_a_first_record() -> None:
    builder = RecordBatchBuilder()
    assert builder.has_room_for(b"k", b"v" * 100_000, max_bytes=1000)
    builder.append(b"k", b"v" * 500, (), T0)
    assert builder.has_room_for(b"k", b"v" * 300, max_bytes=1000)
    assert not builder.has_room_for(b"k", b"v" * 500, max_bytes=1000)
    while builder.has_room_for(b"k", b"v" * 10, max_bytes=1000):
        builder.append(b"k", b"v" * 10, (), T0)
    assert builder.size_in_bytes <= 1000


def test_empty_builder_refuses_to_build() -> None:
    with pytest.raises(ValueError, match="at least one record"):
        RecordBatchBuilder().build()


def test_unknown_codec_is_refused_by_the_builder() -> None:
    with pytest.raises(UnsupportedCompressionTypeError):
        RecordBatchBuilder(5)


def test_wrongly_typed_value_leaves_the_builder_unchanged() -> None:
    builder = RecordBatchBuilder()
    with pytest.raises(TypeError):
        builder.append(b"k", "not bytes", (), T0 - 1)  # type: ignore[arg-type]
    builder.append(b"k", b"v", (), T0)
    size = builder.size_in_bytes
    with pytest.raises(TypeError):
        builder.append("not bytes", b"v", (), T0 + 1)  # type: ignore[arg-type]
    assert (builder.size_in_bytes, builder.record_count) == (size, 1)
    [decoded] = decode_batches(builder.build())
    assert decoded.records == [(0, T0, b"k", b"v", ())]
    assert (decoded.header.base_timestamp, decoded.header.max_timestamp) == (T0, T0)


def test_build_twice_gives_the_same_bytes() -> None:
    builder = RecordBatchBuilder(Codec.GZIP)
    builder.append(b"k", b"v", (), T0)
    assert builder.build() == builder.build()


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD])
def test_compressed_records_over_the_size_limit_raise(codec: Codec) -> None:
    batch = build([(b"k", bytes(100_000), (), T0)], codec)
    [decoded] = decode_batches(batch, max_uncompressed_size=100_100)
    assert decoded.records[0][VALUE] == bytes(100_000)
    with pytest.raises(CorruptMessageError, match="limit"):
        list(decode_batches(batch, max_uncompressed_size=50_000))


# -- record regions (the consumer option record.regions) ---------------------------------------------


def _unlike_batch(count: int, seed: int) -> bytes:
    rng = random.Random(seed)
    builder = RecordBatchBuilder()
    for i in range(count):
        headers = [("h", rng.randbytes(rng.randrange(4)))] if rng.random() < 0.5 else []
        builder.append(
            rng.randbytes(rng.randrange(9)), rng.randbytes(rng.randrange(300)), headers, 1_000 + i * 997
        )
    return builder.build()


def test_regions_hold_the_same_records_as_the_decoder_makes() -> None:
    from backbone.protocol.record_regions import RecordRegion

    data = _unlike_batch(500, seed=2)
    lazy = decode_batch(data, lazy=True, regions=True).records
    assert any(isinstance(part, RecordRegion) for part in lazy.parts)  # type: ignore[attr-defined]
    expected = decode_batch(data).records

    assert list(lazy) == expected
    assert [lazy[i] for i in (0, 37, 499)] == [expected[i] for i in (0, 37, 499)]
    assert list(lazy[100:230]) == expected[100:230]


@pytest.mark.parametrize("regions", [False, True])
def test_timestamps_read_alone_match_the_decoded_records(regions: bool) -> None:
    # Unlike records (regions, or records decoded one by one), then a uniform run, then unlike ones again.
    builder = RecordBatchBuilder()
    rng = random.Random(5)
    for i in range(300):
        alike = 100 <= i < 200
        headers = [] if alike else [("h", rng.randbytes(rng.randrange(4)))]
        value = b"v" * 50 if alike else rng.randbytes(rng.randrange(300))
        # Out of order and of varying widths outside the run; alike widths inside it.
        timestamp = 1_000 + i % 3 if alike else 1_000 + i * 997 - (i % 7) * 20_000
        builder.append(None, value, headers, timestamp)
    lazy = decode_batch(builder.build(), lazy=True, regions=regions).records
    expected = [record[1] for record in decode_batch(builder.build()).records]
    assert any(isinstance(part, UniformRun) for part in lazy.parts)  # type: ignore[attr-defined]
    assert lazy.record_timestamps() == expected  # type: ignore[attr-defined]
    assert lazy[50:250].record_timestamps() == expected[50:250]  # type: ignore[attr-defined]


def test_a_record_too_short_for_its_timestamp_is_corrupt() -> None:
    from backbone.protocol.record_regions import RecordRegion

    # Two one-byte records: a length of 1 holds the attributes byte and nothing more.
    region = RecordRegion(b"\x02\x00\x02\x00", 0, 4, 0, 1_000, [0, 2])
    with pytest.raises(CorruptMessageError, match="timestamp"):
        region.record_timestamps()


def test_a_region_whose_records_are_damaged_fails_when_read() -> None:
    # The record lengths still add up (so the batch decodes), but a key length now runs past its record.
    data = bytearray(_unlike_batch(40, seed=3))
    _, at = read_varint(data, 61)  # the first record's length
    _, at = read_varint(data, at + 1)  # after its attributes: the timestamp delta
    _, at = read_varint(data, at)  # the offset delta
    data[at] = 0x7E  # its key length: 63 bytes, so the rest of the record no longer parses
    lazy = decode_batch(bytes(data), lazy=True, regions=True, verify_crc=False).records
    with pytest.raises(CorruptMessageError):
        decode_batch(bytes(data), verify_crc=False)
    with pytest.raises(CorruptMessageError):
        list(lazy)
