"""The batch codecs: round trips, Kafka's exact framing, foreign framings, the bomb guard, bad input."""

from __future__ import annotations

import gzip
import os
import random
import struct
import zlib

import lz4.frame
import pytest
import snappy
import zstandard

from backbone.protocol.compression import (
    XERIAL_MAGIC,
    Codec,
    codec_from_id,
    codec_from_name,
    compress,
    decompress,
)
from backbone.protocol.errors import CorruptMessageError, UnsupportedCompressionTypeError

pytestmark = pytest.mark.unit

COMPRESSED = [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD]
# Compressible (repeated words) with incompressible stretches, 300 KiB: several lz4/xerial blocks.
PAYLOAD = b"".join(b"event=page_view id=%08d " % i + os.urandom(8) for i in range(10_000))


@pytest.mark.parametrize("codec", list(Codec))
@pytest.mark.parametrize("data", [b"", b"x", PAYLOAD], ids=["empty", "one-byte", "300KiB"])
def test_round_trip(codec: Codec, data: bytes) -> None:
    assert decompress(codec, compress(codec, data)) == data


@pytest.mark.parametrize("codec", COMPRESSED)
def test_compression_levels_round_trip(codec: Codec) -> None:
    levels = {Codec.GZIP: (1, 9), Codec.SNAPPY: (None,), Codec.LZ4: (0, 9), Codec.ZSTD: (1, 19)}[codec]
    for level in levels:
        assert decompress(codec, compress(codec, PAYLOAD, level)) == PAYLOAD


@pytest.mark.parametrize("codec", COMPRESSED)
def test_compressible_data_shrinks(codec: Codec) -> None:
    data = b"the same sentence again and again. " * 1000
    assert len(compress(codec, data)) < len(data) // 5


@pytest.mark.parametrize("codec", list(Codec))
def test_accepts_bytearray_and_memoryview(codec: Codec) -> None:
    compressed = compress(codec, bytearray(PAYLOAD))
    assert decompress(codec, memoryview(bytearray(compressed))) == PAYLOAD
    assert compress(codec, memoryview(PAYLOAD)[:0]) == compress(codec, b"")


def test_gzip_writes_a_gzip_stream_that_gzip_reads() -> None:
    compressed = compress(Codec.GZIP, PAYLOAD)
    assert compressed[:2] == b"\x1f\x8b"
    assert gzip.decompress(compressed) == PAYLOAD


def test_gzip_reads_concatenated_members_and_zlib() -> None:
    assert decompress(Codec.GZIP, gzip.compress(b"one ") + gzip.compress(b"two")) == b"one two"
    assert decompress(Codec.GZIP, zlib.compress(PAYLOAD)) == PAYLOAD


def test_snappy_writes_xerial_framing_with_32k_blocks() -> None:
    compressed = compress(Codec.SNAPPY, PAYLOAD)
    assert compressed[:8] == XERIAL_MAGIC
    assert struct.unpack(">ii", compressed[8:16]) == (1, 1)
    blocks = []
    pos = 16
    while pos < len(compressed):
        (length,) = struct.unpack_from(">i", compressed, pos)
        blocks.append(snappy.decompress(compressed[pos + 4 : pos + 4 + length]))
        pos += 4 + length
    assert pos == len(compressed)
    assert [len(b) for b in blocks[:-1]] == [32 * 1024] * (len(blocks) - 1)
    assert b"".join(blocks) == PAYLOAD


def test_snappy_reads_raw_snappy_as_librdkafka_writes_it() -> None:
    assert decompress(Codec.SNAPPY, snappy.compress(PAYLOAD)) == PAYLOAD


def test_snappy_reads_xerial_with_little_endian_version_fields() -> None:
    # Some writers (redpanda) store version/compat little-endian; readers ignore the fields.
    block = snappy.compress(b"hello")
    framed = XERIAL_MAGIC + struct.pack("<ii", 1, 1) + struct.pack(">i", len(block)) + block
    assert decompress(Codec.SNAPPY, framed) == b"hello"


def test_lz4_writes_kafkas_frame_layout() -> None:
    compressed = compress(Codec.LZ4, PAYLOAD)
    info = lz4.frame.get_frame_info(compressed)
    assert compressed[:4] == b"\x04\x22\x4d\x18"
    assert info["block_size"] == 64 * 1024
    assert not info["block_linked"]
    assert not info["content_checksum"]
    assert not info["block_checksum"]
    assert info["content_size"] == 0  # no content size field, as Java writes
    assert lz4.frame.decompress(compressed) == PAYLOAD


def test_lz4_header_checksum_is_the_correct_one_and_is_checked() -> None:
    # KIP-57: HC is the second byte of xxhash32 over the descriptor only (FLG, BD), not the magic as
    # Kafka 0.8/0.9 computed it. liblz4 verifies HC, so it accepting our frame proves HC is correct.
    compressed = compress(Codec.LZ4, PAYLOAD)
    assert lz4.frame.decompress(compressed) == PAYLOAD
    broken = compressed[:6] + bytes([compressed[6] ^ 0xFF]) + compressed[7:]
    with pytest.raises(RuntimeError, match="headerChecksum"):
        lz4.frame.decompress(broken)
    with pytest.raises(CorruptMessageError):
        decompress(Codec.LZ4, broken)


@pytest.mark.parametrize("store_size", [True, False])
@pytest.mark.parametrize("checksums", [True, False])
def test_lz4_reads_frames_other_writers_produce(store_size: bool, checksums: bool) -> None:
    # kafka-python stores the content size; librdkafka may add checksums and bigger blocks.
    compressed = lz4.frame.compress(
        PAYLOAD,
        store_size=store_size,
        content_checksum=checksums,
        block_checksum=checksums,
        block_size=lz4.frame.BLOCKSIZE_MAX256KB,
        block_linked=False,
    )
    assert decompress(Codec.LZ4, compressed) == PAYLOAD


def test_lz4_reads_linked_blocks_and_concatenated_frames() -> None:
    linked = lz4.frame.compress(b"abc" * 50_000, block_linked=True)
    assert decompress(Codec.LZ4, linked + lz4.frame.compress(b"tail")) == b"abc" * 50_000 + b"tail"


def test_zstd_reads_frames_without_content_size_and_several_frames() -> None:
    streaming = zstandard.ZstdCompressor(write_content_size=False).compress(PAYLOAD)
    assert zstandard.frame_content_size(streaming) == -1
    assert decompress(Codec.ZSTD, streaming) == PAYLOAD
    with_size = zstandard.ZstdCompressor().compress(b"second frame")
    assert decompress(Codec.ZSTD, streaming + with_size) == PAYLOAD + b"second frame"


@pytest.mark.parametrize("codec", COMPRESSED)
def test_output_cap_raises_corrupt_message(codec: Codec) -> None:
    compressed = compress(codec, PAYLOAD)
    assert decompress(codec, compressed, max_size=len(PAYLOAD)) == PAYLOAD
    with pytest.raises(CorruptMessageError, match="limit"):
        decompress(codec, compressed, max_size=len(PAYLOAD) - 1)


def test_uncompressed_data_respects_the_cap_too() -> None:
    with pytest.raises(CorruptMessageError):
        decompress(Codec.NONE, b"12345", max_size=4)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_bomb_raises_at_the_cap(codec: Codec) -> None:
    # 64 MiB of zeros compresses to at most a few MiB with every codec; a 1 MiB cap must stop it.
    bomb = compress(codec, bytes(64 * 1024 * 1024))
    assert len(bomb) < 4 * 1024 * 1024
    with pytest.raises(CorruptMessageError, match="limit"):
        decompress(codec, bomb, max_size=1024 * 1024)


def test_zstd_bomb_declaring_no_size_is_stopped() -> None:
    bomb = zstandard.ZstdCompressor(write_content_size=False).compress(bytes(64 * 1024 * 1024))
    with pytest.raises(CorruptMessageError, match="limit"):
        decompress(Codec.ZSTD, bomb, max_size=1024 * 1024)


def test_snappy_raw_claiming_a_huge_length_is_refused_before_decoding() -> None:
    # A raw snappy stream starts with the uncompressed length as a varint: claim 2 GiB.
    claim = bytes([0x80, 0x80, 0x80, 0x80, 0x08]) + b"\x00" * 16
    with pytest.raises(CorruptMessageError, match="limit"):
        decompress(Codec.SNAPPY, claim, max_size=1024)


# Not b"\x00": that is a valid raw snappy stream (of nothing).
GARBAGE = [b"", b"\xff" * 7, b"garbage that is not compressed at all", random.Random(7).randbytes(1000)]


@pytest.mark.parametrize("codec", COMPRESSED)
@pytest.mark.parametrize("data", GARBAGE, ids=["empty", "ff", "text", "random"])
def test_garbage_raises_corrupt_message(codec: Codec, data: bytes) -> None:
    with pytest.raises(CorruptMessageError):
        decompress(codec, data)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_truncated_input_raises_corrupt_message(codec: Codec) -> None:
    compressed = compress(codec, PAYLOAD)
    for cut in (len(compressed) // 2, len(compressed) - 1):
        with pytest.raises(CorruptMessageError):
            decompress(codec, compressed[:cut])


def test_xerial_block_length_past_the_end_raises_corrupt_message() -> None:
    framed = compress(Codec.SNAPPY, b"hello")
    broken = framed[:16] + struct.pack(">i", 1000) + framed[20:]
    with pytest.raises(CorruptMessageError, match="does not fit"):
        decompress(Codec.SNAPPY, broken)


@pytest.mark.parametrize("codec_id", [5, 6, 7, -1, 100])
def test_unknown_codec_id_raises_unsupported_compression_type(codec_id: int) -> None:
    with pytest.raises(UnsupportedCompressionTypeError):
        compress(codec_id, b"x")
    with pytest.raises(UnsupportedCompressionTypeError):
        decompress(codec_id, b"x")
    with pytest.raises(UnsupportedCompressionTypeError):
        codec_from_id(codec_id)


def test_codec_ids_are_kafkas() -> None:
    assert [int(c) for c in (Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD)] == [0, 1, 2, 3, 4]


def test_codec_from_name_reads_compression_type_settings() -> None:
    assert codec_from_name("none") is Codec.NONE
    assert codec_from_name(" ZSTD ") is Codec.ZSTD
    assert codec_from_name("lz4") is Codec.LZ4
    with pytest.raises(UnsupportedCompressionTypeError, match="brotli"):
        codec_from_name("brotli")
