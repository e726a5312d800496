"""Size-prefixed frames: incremental decoding, limits checked before the body, clean errors."""

from __future__ import annotations

import asyncio
import random
import struct
import tracemalloc

import pytest

from backbone.protocol.framing import (
    DEFAULT_MAX_FRAME_BYTES,
    FIRST_BODY_BYTES,
    STREAM_BYTES,
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


# -- receiving in place (the asyncio BufferedProtocol side) ------------------------------------------


def receive(decoder: FrameDecoder, data: bytes, most: int | None = None) -> list[bytes]:
    """Deliver `data` as an asyncio transport would: into the decoder's buffers, at most `most` bytes
    per read (as many as the buffer takes when None)."""
    frames: list[bytes] = []
    view = memoryview(data)
    while view:
        buffer = decoder.get_buffer(-1)
        assert len(buffer) > 0, "asyncio refuses an empty buffer"
        count = min(len(buffer), len(view), most or len(view))
        buffer[:count] = view[:count]
        del buffer
        frames += [bytes(frame) for frame in decoder.buffer_updated(count)]
        view = view[count:]
    return frames


def capacity(decoder: FrameDecoder) -> int:
    """Bytes the unfinished frame's buffer could hold: what it has plus what the next read may add."""
    return decoder.buffered_bytes - 4 + len(decoder.get_buffer(-1))


@pytest.mark.parametrize("size", [10, 200_000])
def test_a_prefix_split_across_reads_is_put_back_together(size: int) -> None:
    body = random.Random(size).randbytes(size)
    stream = encode_frame(body) + encode_frame(b"next")
    decoder = FrameDecoder()
    assert receive(decoder, stream[:1]) == []
    assert receive(decoder, stream[1:3]) == []
    assert decoder.buffered_bytes == 3
    assert receive(decoder, stream[3:4]) == []
    assert receive(decoder, stream[4:], most=30_000) == [body, b"next"]
    assert decoder.buffered_bytes == 0


def test_many_frames_in_one_read_come_out_of_one_buffer_update() -> None:
    bodies = [b"request %d " % i * (i % 7) for i in range(400)]
    stream = b"".join(encode_frame(body) for body in bodies)
    assert len(stream) < STREAM_BYTES
    decoder = FrameDecoder()
    buffer = decoder.get_buffer(-1)
    buffer[: len(stream)] = stream
    del buffer
    frames = decoder.buffer_updated(len(stream))
    assert [bytes(frame) for frame in frames] == bodies
    assert decoder.buffered_bytes == 0


def test_small_frames_are_copied_out_of_the_shared_buffer() -> None:
    decoder = FrameDecoder()
    (first,) = receive(decoder, encode_frame(b"first"))
    buffer = decoder.get_buffer(-1)
    buffer[:8] = encode_frame(b"kept")
    del buffer
    frames = decoder.buffer_updated(8)
    receive(FrameDecoder(), encode_frame(b"overwrite") * 10)  # another connection reuses the buffer
    assert bytes(frames[0]) == b"kept" and first == b"first"
    frames[0][0:1] = b"K"  # writable, as a body buffer is
    assert bytes(frames[0]) == b"Kept"


def test_a_large_frame_is_received_in_place_in_pieces() -> None:
    size = 3 * 1024 * 1024 + 123
    body = random.Random(1).randbytes(size)
    stream = encode_frame(b"before") + encode_frame(body) + encode_frame(b"after")
    decoder = FrameDecoder()
    frames: list[memoryview] = []
    pos = 0
    last_buffer_owner = None
    while pos < len(stream):
        buffer = decoder.get_buffer(-1)
        if decoder.buffered_bytes > 4 and decoder.buffered_bytes - 4 < size:  # filling the body
            # Never more than the frame still lacks: the next frame's bytes must not land in it.
            assert len(buffer) <= size - (decoder.buffered_bytes - 4)
            last_buffer_owner = buffer.obj
        count = min(len(buffer), len(stream) - pos, 50_000)
        buffer[:count] = stream[pos : pos + count]
        del buffer
        pos += count
        frames += decoder.buffer_updated(count)
    assert [bytes(frame) for frame in frames] == [b"before", body, b"after"]
    # The body handed out is the very buffer the bytes were received into: no copy at the end.
    assert frames[1].obj is last_buffer_owner
    assert frames[1].nbytes == size and not frames[1].readonly


@pytest.mark.parametrize("size", [STREAM_BYTES - 4, STREAM_BYTES - 3, STREAM_BYTES, 2 * STREAM_BYTES])
def test_frames_either_side_of_the_stream_buffer_size(size: int) -> None:
    body = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    stream = (encode_frame(b"a") + encode_frame(body)) * 3
    for most in (None, 1000, 65_537):
        assert receive(FrameDecoder(), stream, most) == [b"a", body] * 3


def test_any_split_into_reads_gives_the_same_frames_as_feed() -> None:
    rng = random.Random(7)
    sizes = [0, 1, 3, 4, 100, STREAM_BYTES - 4, STREAM_BYTES - 3, 70_000, 300_000]
    bodies = [rng.randbytes(rng.choice(sizes)) for _ in range(60)]
    stream = b"".join(encode_frame(body) for body in bodies)
    for most in (7, 4096, 65_536, 1_000_000):
        assert receive(FrameDecoder(), stream, most) == bodies
    assert [bytes(frame) for frame in FrameDecoder().feed(stream)] == bodies


def test_a_huge_announced_frame_grows_only_with_the_bytes_received() -> None:
    decoder = FrameDecoder(max_bytes=100_000_000)
    assert receive(decoder, prefix(90_000_000) + b"12345") == []
    assert capacity(decoder) <= 2 * FIRST_BODY_BYTES
    received = 5
    for _ in range(60):  # 3.75 MiB more, 64 KiB at a time
        receive(decoder, bytes(65_536))
        received += 65_536
        assert decoder.buffered_bytes == 4 + received
        assert capacity(decoder) <= max(2 * FIRST_BODY_BYTES, 4 * received)


def test_many_connections_announcing_huge_frames_cost_little() -> None:
    tracemalloc.start()
    try:
        decoders = [FrameDecoder() for _ in range(200)]
        for decoder in decoders:
            assert receive(decoder, prefix(100_000_000) + b"hello") == []
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 200 * 3 * FIRST_BODY_BYTES, f"200 announced 100 MB frames held {peak} bytes"


@pytest.mark.parametrize(
    ("bad", "error"),
    [(prefix(1001), FrameTooLarge), (prefix(-1), InvalidFrameSize)],
    ids=["large", "negative"],
)
def test_a_bad_prefix_within_a_read_fails_the_decoder_for_good(bad: bytes, error: type[Exception]) -> None:
    decoder = FrameDecoder(max_bytes=1000)
    stream = encode_frame(b"fine") + bad + encode_frame(b"never seen")
    buffer = decoder.get_buffer(-1)
    buffer[: len(stream) - 2] = stream[:-2]
    del buffer
    with pytest.raises(error):
        decoder.buffer_updated(len(stream) - 2)
    # A transport shutting down (TLS) may still offer bytes: there is a buffer, and they are refused.
    assert len(decoder.get_buffer(-1)) > 0
    with pytest.raises(error):
        decoder.buffer_updated(2)
    with pytest.raises(error):
        decoder.feed(b"")


def test_a_bad_prefix_split_across_reads_is_refused_when_complete() -> None:
    decoder = FrameDecoder(max_bytes=1000)
    assert receive(decoder, prefix(2_000_000_000)[:3]) == []
    with pytest.raises(FrameTooLarge):
        receive(decoder, prefix(2_000_000_000)[3:])
    assert decoder.buffered_bytes < 16


def test_buffer_updated_must_follow_its_own_get_buffer() -> None:
    first, second = FrameDecoder(), FrameDecoder()
    first.get_buffer(-1)
    second.get_buffer(-1)  # borrows the thread's stream buffer in between
    with pytest.raises(RuntimeError):
        first.buffer_updated(4)
