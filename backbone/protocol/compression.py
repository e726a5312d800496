"""Kafka's record batch compression codecs, by the attribute ids a batch carries (0 none .. 4 zstd).

Each codec writes exactly what the Java client writes, so every Kafka client can read our batches, and
reads everything the common clients (Java, librdkafka, kafka-python) write:

- gzip: a gzip stream (zlib with the gzip wrapper); reading also takes concatenated members and zlib.
- snappy: the xerial framing the Java client writes (`\\x82SNAPPY\\x00`, version and compat int32s, then
  int32-length-prefixed raw snappy blocks of 32 KiB input each). Java, librdkafka and kafka-python all
  detect that magic and fall back to raw snappy otherwise, so xerial is the one framing all of them read;
  we read both.
- lz4: the LZ4 frame format as Kafka frames it since KIP-57 (the header checksum computed correctly):
  independent 64 KiB blocks, no content size, no checksums, which the Java reader accepts; reading goes
  through liblz4's frame decoder, so the content size and checksums other writers add are fine too.
- zstd: a zstd stream; frames without a content size (what Java's streaming writer produces) are fine.

Decompression is bounded: `max_size` caps the output and anything beyond it raises CorruptMessageError,
so a small hostile batch cannot expand into gigabytes (a decompression bomb). Garbage, truncated input or
an unknown codec id never escape as a library-specific exception: they raise CorruptMessageError or
UnsupportedCompressionTypeError.
"""

from __future__ import annotations

import struct
import threading
import zlib
from enum import IntEnum

import cramjam
import lz4.frame
import zstandard

from backbone.protocol.errors import CorruptMessageError, UnsupportedCompressionTypeError


class Codec(IntEnum):
    """Compression ids as stored in the low three bits of a record batch's attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


# Output cap for one batch. Kafka batches are at most a few MiB compressed; even highly repetitive data
# rarely expands past 100x. Callers with bigger legitimate batches pass their own limit.
DEFAULT_MAX_DECOMPRESSED_SIZE = 128 * 1024 * 1024

# Java's GZIPOutputStream uses zlib's default level; Kafka's `compression.gzip.level` default is the same.
GZIP_DEFAULT_LEVEL = 6
# Kafka's `compression.zstd.level` default.
ZSTD_DEFAULT_LEVEL = 3
# liblz4's fast mode: what Kafka wrote before KIP-390 (Kafka 3.8 defaults to HC level 9, which is roughly
# ten times slower to write and reads the same); a producer may pass 9 to match.
LZ4_DEFAULT_LEVEL = 0

XERIAL_MAGIC = b"\x82SNAPPY\x00"
# Magic, then version 1 and minimum compatible version 1, as snappy-java's SnappyOutputStream writes them.
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK_SIZE = 32 * 1024
_INT32 = struct.Struct(">i")

# zstd: the largest output one input byte can produce is an RLE block (a 3-byte header and one byte
# standing for up to 128 KiB), so feeding the decoder at most budget/2^15 bytes at a time keeps the
# overshoot past the cap below the cap itself.
_ZSTD_EXPANSION_SHIFT = 15
_ZSTD_MIN_STEP = 256
# lz4: ask for output in steps instead of the whole cap, because liblz4's binding allocates `max_length`
# up front and a 128 MiB allocation per batch costs more than decoding a small one.
_LZ4_MIN_STEP = 256 * 1024

_NAMES = {
    "none": Codec.NONE,
    "gzip": Codec.GZIP,
    "snappy": Codec.SNAPPY,
    "lz4": Codec.LZ4,
    "zstd": Codec.ZSTD,
}

# zstd contexts are costly to create (tens of microseconds, comparable to decoding a small batch) and not
# safe to share between threads, so each thread keeps its own.
_local = threading.local()


def codec_from_name(name: str) -> Codec:
    """The codec for a `compression.type` setting (none, gzip, snappy, lz4, zstd)."""
    try:
        return _NAMES[name.strip().lower()]
    except KeyError:
        raise UnsupportedCompressionTypeError(
            f"compression.type {name!r} is not one of {', '.join(_NAMES)}"
        ) from None


def codec_from_id(codec: int) -> Codec:
    """The codec for an attribute id; UnsupportedCompressionTypeError for ids Kafka does not define."""
    try:
        return Codec(codec)
    except ValueError:
        raise UnsupportedCompressionTypeError(f"compression codec id {codec} is not one of 0..4") from None


def compress(codec: int, data: bytes | bytearray | memoryview, level: int | None = None) -> bytes:
    """Compress `data` the way Kafka's Java client frames codec `codec`; `level` None is the codec default."""
    kind = codec_from_id(codec)
    if kind is Codec.NONE:
        return bytes(data)
    if kind is Codec.GZIP:
        compressor = zlib.compressobj(GZIP_DEFAULT_LEVEL if level is None else level, zlib.DEFLATED, 31)
        return compressor.compress(data) + compressor.flush()
    if kind is Codec.SNAPPY:
        return _snappy_xerial_compress(data)
    if kind is Codec.LZ4:
        return lz4.frame.compress(
            data,
            compression_level=LZ4_DEFAULT_LEVEL if level is None else level,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
    return _zstd_compressor(ZSTD_DEFAULT_LEVEL if level is None else level).compress(data)


def decompress(
    codec: int, data: bytes | bytearray | memoryview, max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE
) -> bytes:
    """Decompress a batch's records section; raise CorruptMessageError for bad input or output > max_size."""
    kind = codec_from_id(codec)
    if kind is Codec.NONE:
        if len(data) > max_size:
            raise CorruptMessageError(f"uncompressed data of {len(data)} bytes exceeds the {max_size} limit")
        return bytes(data)
    try:
        if kind is Codec.GZIP:
            return _gzip_decompress(data, max_size)
        if kind is Codec.SNAPPY:
            return _snappy_decompress(data, max_size)
        if kind is Codec.LZ4:
            return _lz4_decompress(data, max_size)
        return _zstd_decompress(data, max_size)
    except (zlib.error, cramjam.DecompressionError, RuntimeError, zstandard.ZstdError) as exc:
        # lz4 reports every frame error as RuntimeError; the others have their own classes.
        raise CorruptMessageError(f"{kind.name.lower()} data does not decompress: {exc}") from exc


def _too_big(max_size: int) -> CorruptMessageError:
    return CorruptMessageError(f"decompressed data exceeds the {max_size}-byte limit (decompression bomb?)")


def _gzip_decompress(data: bytes | bytearray | memoryview, max_size: int) -> bytes:
    parts: list[bytes] = []
    total = 0
    pending: bytes | bytearray | memoryview = data
    while True:
        # wbits 47 = 32 + 15: take a gzip or a zlib header. Kafka's codec is gzip; the leniency is free.
        decoder = zlib.decompressobj(47)
        part = decoder.decompress(pending, max_size - total + 1)
        total += len(part)
        if total > max_size:
            raise _too_big(max_size)
        parts.append(part)
        if not decoder.eof:
            raise CorruptMessageError("gzip data is truncated")
        # Concatenated gzip members are one valid stream (GZIPInputStream reads them all).
        pending = decoder.unused_data
        if not pending:
            return parts[0] if len(parts) == 1 else b"".join(parts)


def _snappy_xerial_compress(data: bytes | bytearray | memoryview) -> bytes:
    view = memoryview(data)
    parts = [_XERIAL_HEADER]
    for start in range(0, len(view), _XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK_SIZE]))
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_raw_decompress(block: bytes | memoryview, budget: int, max_size: int) -> bytes:
    # Raw snappy starts with the uncompressed length, so the cap is checked before decoding anything.
    if cramjam.snappy.decompress_raw_len(block) > budget:
        raise _too_big(max_size)
    return bytes(cramjam.snappy.decompress_raw(block))


def _snappy_decompress(data: bytes | bytearray | memoryview, max_size: int) -> bytes:
    view = memoryview(data)
    if len(view) < len(_XERIAL_HEADER) or view[: len(XERIAL_MAGIC)] != XERIAL_MAGIC:
        return _snappy_raw_decompress(view, max_size, max_size)
    # The header's version fields are ignored, as every reader does: some writers (redpanda) store them
    # little-endian and there has only ever been one xerial block format.
    parts: list[bytes] = []
    total = 0
    pos = len(_XERIAL_HEADER)
    end = len(view)
    while pos < end:
        if end - pos < 4:
            raise CorruptMessageError("snappy (xerial) block length is truncated")
        (length,) = _INT32.unpack_from(view, pos)
        pos += 4
        if length < 0 or length > end - pos:
            raise CorruptMessageError(f"snappy (xerial) block of {length} bytes does not fit {end - pos}")
        part = _snappy_raw_decompress(view[pos : pos + length], max_size - total, max_size)
        total += len(part)
        parts.append(part)
        pos += length
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _lz4_decompress(data: bytes | bytearray | memoryview, max_size: int) -> bytes:
    parts: list[bytes] = []
    total = 0
    pending: bytes | bytearray | memoryview = data
    step = max(_LZ4_MIN_STEP, 8 * len(pending))
    while True:
        decoder = lz4.frame.LZ4FrameDecompressor()
        part = decoder.decompress(pending, max_length=min(step, max_size - total + 1))
        while True:
            total += len(part)
            if total > max_size:
                raise _too_big(max_size)
            parts.append(part)
            if decoder.eof:
                break
            if decoder.needs_input:
                raise CorruptMessageError("lz4 frame is truncated")
            # Output was cut at max_length: fetch the rest with a growing step.
            step *= 2
            part = decoder.decompress(b"", max_length=min(step, max_size - total + 1))
        # A second frame after the first is valid LZ4 (nobody writes one for Kafka, but it costs nothing).
        pending = decoder.unused_data
        if not pending:
            return parts[0] if len(parts) == 1 else b"".join(parts)


def _zstd_compressor(level: int) -> zstandard.ZstdCompressor:
    cache: dict[int, zstandard.ZstdCompressor] | None = getattr(_local, "compressors", None)
    if cache is None:
        cache = _local.compressors = {}
    compressor = cache.get(level)
    if compressor is None:
        compressor = cache[level] = zstandard.ZstdCompressor(level=level)
    return compressor


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    decompressor: zstandard.ZstdDecompressor | None = getattr(_local, "decompressor", None)
    if decompressor is None:
        decompressor = _local.decompressor = zstandard.ZstdDecompressor()
    return decompressor


def _zstd_decompress(data: bytes | bytearray | memoryview, max_size: int) -> bytes:
    # zstandard's one-shot decompress() trusts a frame's declared content size over max_output_size and
    # reads only the first frame; its stream reader hides truncation. A decompressobj fed in bounded steps
    # handles frames with or without a content size, several frames, truncation and the cap together.
    view = memoryview(data)
    end = len(view)
    dctx = _zstd_decompressor()
    if end and 0 <= zstandard.frame_content_size(view) <= max_size:
        # Fast path for one frame that declares its size (what we and kafka-python write): the output is
        # exactly that size or zstd fails. Anything else it refuses (several frames) takes the general path.
        try:
            return dctx.decompress(view, allow_extra_data=False)
        except zstandard.ZstdError:
            # Not an error yet: the loop below reads several frames, and raises if the data is damaged.
            pass
    parts: list[bytes] = []
    total = 0
    pos = 0
    while pos < end:
        decoder = dctx.decompressobj()
        while not decoder.eof:
            if pos >= end:
                raise CorruptMessageError("zstd frame is truncated")
            step = max(_ZSTD_MIN_STEP, (max_size - total) >> _ZSTD_EXPANSION_SHIFT)
            chunk = view[pos : pos + step]
            pos += len(chunk)
            part = decoder.decompress(chunk)
            if part:
                total += len(part)
                if total > max_size:
                    raise _too_big(max_size)
                parts.append(part)
        # The decoder stops at the end of a frame; give back what it read past it for the next frame.
        pos -= len(decoder.unused_data)
    if not parts and end == 0:
        raise CorruptMessageError("zstd data is empty")
    return parts[0] if len(parts) == 1 else b"".join(parts)
