"""Size-prefixed frames: incremental decoding, limits checked before the body, clean errors."""

from __future__ import annotations

import asyncio
import struct

import pytest

from backbone.protocol.framing import (
    DEFAULT_MAX_FRAME_BYTES,
    ConnectionClosed,
    FrameDecoder,
    FrameTooLarge,
    InvalidFrameSize,
    encode_frame,
    frame_prefix,
    read_frame,
)

pytestmark = pytest.mark.unit


def prefix(size: int) -> bytes:
    return struct.pack(">i", size)


def test_default_maximum_is_kafkas_socket_request_max_bytes() -> None:
    assert DEFAULT_MAX_FRAME_BYTES == 104_857_600
    assert FrameDecoder().max_bytes == DEFAULT_MAX_FRAME_BYTES


def test_encode_frame_prefixes_the_big_endian_length() -> None:
    assert encode_frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert frame_prefix(258) == b"\x00\x00\x01\x02"


def test_decoder_returns_every_frame_of_one_chunk_in_order() -> None:
    decoder = FrameDecoder()
    frames = decoder.feed(encode_frame(b"one") + encode_frame(b"") + encode_frame(b"three"))
    assert [bytes(frame) for frame in frames] == [b"one", b"", b"three"]
    assert decoder.buffered_bytes == 0


def test_decoder_reassembles_frames_fed_one_byte_at_a_time() -> None:
    stream = encode_frame(b"hello") + encode_frame(bytes(range(200)))
    decoder = FrameDecoder()
    frames = []
    for i in range(len(stream)):
        frames.extend(decoder.feed(stream[i : i + 1]))
    assert [bytes(frame) for frame in frames] == [b"hello", bytes(range(200))]


def test_decoder_keeps_a_partial_frame_until_the_rest_arrives() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(encode_frame(b"abcdef")[:7]) == []
    assert decoder.buffered_bytes == 7
    frames = decoder.feed(b"def" + encode_frame(b"x")[:2])
    assert [bytes(frame) for frame in frames] == [b"abcdef"]
    assert decoder.buffered_bytes == 2


def test_returned_frames_survive_later_feeds() -> None:
    decoder = FrameDecoder()
    (first,) = decoder.feed(encode_frame(b"first"))
    decoder.feed(encode_frame(b"second"))
    assert bytes(first) == b"first"


def test_decoder_refuses_an_oversized_frame_from_its_prefix_alone() -> None:
    decoder = FrameDecoder(max_bytes=1000)
    # Only the prefix arrives: the decision must not wait for (or buffer) the body.
    with pytest.raises(FrameTooLarge) as raised:
        decoder.feed(prefix(1001))
    assert (raised.value.size, raised.value.max_bytes) == (1001, 1000)
    assert "socket.request.max.bytes" in str(raised.value)


def test_decoder_accepts_a_frame_of_exactly_the_maximum() -> None:
    decoder = FrameDecoder(max_bytes=10)
    assert [bytes(f) for f in decoder.feed(encode_frame(b"0123456789"))] == [b"0123456789"]


def test_decoder_refuses_a_huge_announced_size_without_allocating_it() -> None:
    decoder = FrameDecoder()
    with pytest.raises(FrameTooLarge):
        decoder.feed(prefix(2**31 - 1) + b"tiny")
    assert decoder.buffered_bytes < 16


def test_decoder_refuses_negative_sizes() -> None:
    with pytest.raises(InvalidFrameSize) as raised:
        FrameDecoder().feed(prefix(-1))
    assert raised.value.size == -1


def test_decoder_stays_failed_after_an_error() -> None:
    decoder = FrameDecoder(max_bytes=4)
    with pytest.raises(FrameTooLarge):
        decoder.feed(prefix(5))
    with pytest.raises(FrameTooLarge):
        decoder.feed(encode_frame(b"ok"))


def test_decoder_eof_says_whether_a_frame_was_cut() -> None:
    clean = FrameDecoder()
    clean.feed(encode_frame(b"done"))
    with pytest.raises(ConnectionClosed) as raised:
        clean.feed_eof()
    assert raised.value.clean

    cut = FrameDecoder()
    cut.feed(encode_frame(b"unfinished")[:9])
    with pytest.raises(ConnectionClosed) as raised:
        cut.feed_eof()
    assert not raised.value.clean
    assert raised.value.partial_bytes == 9


def test_decoder_rejects_a_negative_maximum() -> None:
    with pytest.raises(ValueError):
        FrameDecoder(max_bytes=-1)


def reader_with(data: bytes, eof: bool = True) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    if eof:
        reader.feed_eof()
    return reader


async def test_read_frame_reads_consecutive_frames() -> None:
    reader = reader_with(encode_frame(b"alpha") + encode_frame(b"beta"))
    assert await read_frame(reader) == b"alpha"
    assert await read_frame(reader) == b"beta"
    with pytest.raises(ConnectionClosed) as raised:
        await read_frame(reader)
    assert raised.value.clean


async def test_read_frame_checks_the_size_before_reading_the_body() -> None:
    body = b"x" * 50
    reader = reader_with(prefix(50) + body)
    with pytest.raises(FrameTooLarge):
        await read_frame(reader, max_bytes=49)
    # The body is still unread: nothing was buffered on the strength of a bad prefix.
    assert await reader.read() == body


async def test_read_frame_refuses_negative_sizes() -> None:
    with pytest.raises(InvalidFrameSize):
        await read_frame(reader_with(prefix(-7)))


@pytest.mark.parametrize(("data", "partial"), [(b"\x00\x00", 2), (prefix(10) + b"abc", 7)])
async def test_read_frame_reports_a_cut_frame(data: bytes, partial: int) -> None:
    with pytest.raises(ConnectionClosed) as raised:
        await read_frame(reader_with(data))
    assert raised.value.partial_bytes == partial
    assert not raised.value.clean


async def test_read_frame_waits_for_a_body_arriving_later() -> None:
    reader = reader_with(prefix(3) + b"a", eof=False)
    pending = asyncio.ensure_future(read_frame(reader))
    await asyncio.sleep(0)
    assert not pending.done()
    reader.feed_data(b"bc")
    assert await asyncio.wait_for(pending, timeout=5) == b"abc"


def test_an_announced_frame_costs_only_the_bytes_received() -> None:
    """A peer announcing a huge frame and trickling bytes must not make the broker reserve it all."""
    import tracemalloc

    decoders = []
    tracemalloc.start()
    try:
        for _ in range(10):
            decoder = FrameDecoder(max_bytes=100_000_000)
            assert decoder.feed(struct.pack(">i", 90_000_000) + b"abc") == []
            decoders.append(decoder)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000, f"10 announced 90 MB frames held {peak} bytes"
    assert all(decoder.buffered_bytes == 7 for decoder in decoders)
