"""A seeded protocol fuzzer: mutated and malformed Kafka request frames sent at a live broker.

Seeds are well-formed requests of every API the broker speaks (each at its newest version, fields at their
zero values), optionally preceded on a connection by a SASL PLAIN login (so the authenticated surface is
fuzzed too). Each frame is mutated by one of: flipped bits, a random byte run, a huge length or count
(0xFFFFFFFF / 0x7FFFFFFF) at a random place, truncation, random bytes appended, a random API key and
version in the header, an empty frame, or a frame of pure noise; its size prefix is always right, so the
broker reads exactly that frame.

A connection pipelines its frames (`window` in flight) and counts each answer, in order. Most frames mutate
only the body of a request whose answer can carry an error code: the broker answers them, with an error
when it cannot read them, and keeps the connection. A share of "wild" frames (any mutation of any API) may
make the broker close the connection, as Kafka does on a request it cannot read, or stay quiet as the
protocol allows (Produce with acks=0, a long Fetch or JoinGroup wait): each is the last frame of its
connection, so a connection carries many frames, and a frame neither answered nor closed on within
ANSWER_TIMEOUT_S is a hang.

`run(...)` drives `concurrency` connections for a number of frames or seconds, whichever ends first, and
returns the counts. The same seed gives the same frames.
"""

from __future__ import annotations

import asyncio
import collections
import random
import ssl
import struct
import time
from dataclasses import dataclass, field
from typing import Any

from backbone.protocol.api import SUPPORTED_VERSIONS, ApiKey
from backbone.protocol.entities import error_answer
from backbone.protocol.errors import ErrorCode
from backbone.protocol.headers import encode_request_header
from backbone.wire.messages import encode_request

_HUGE = (b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff\x0f", b"\x80\x00\x00\x00")
ANSWER_TIMEOUT_S = 10.0
# APIs whose answer may rightly never come or come late: Produce with acks=0, Fetch's and JoinGroup's waits
# (a mutated max_wait_ms or rebalance timeout can be hours).
MAY_STAY_QUIET = frozenset({ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.JOIN_GROUP})


@dataclass
class Outcome:
    frames: int = 0  # frames the broker took: answered, closed on, or left quiet
    answered: int = 0
    closed_by_broker: int = 0
    connections: int = 0
    unanswered: int = 0  # neither answered nor closed within ANSWER_TIMEOUT_S: a hang
    quiet: int = 0  # unanswered, but the protocol lets it be (Produce acks=0, a long Fetch or JoinGroup wait)
    unread: int = 0  # sent behind a frame the broker closed the connection on, so never read: not counted
    misanswered: int = 0  # an answer whose correlation id is not its request's: a bug
    by_mutation: dict[str, int] = field(default_factory=dict)
    hung: list[str] = field(default_factory=list)  # the first unanswered frames, in hex, to replay
    sent: int = 0


@dataclass(frozen=True)
class Seeds:
    """Seeds whose requests are answered even when their body cannot be read (their response has a
    top-level error code), and every seed."""

    answered: list[tuple[int, int, bytes]]
    every: list[tuple[int, int, bytes]]


def seeds() -> Seeds:
    """(api key, version, body) of a well-formed request of every API the broker speaks."""
    found = []
    for api_key, versions in SUPPORTED_VERSIONS.items():
        if api_key in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE):
            continue  # they change the connection's state; fuzzed as mutations of other seeds' headers
        found.append((int(api_key), versions.max, encode_request(api_key, versions.max)))
    answered = [
        seed
        for seed in found
        if seed[0] not in MAY_STAY_QUIET and error_answer(seed[0], seed[1], ErrorCode.invalid_request)
    ]
    return Seeds(answered, found)


def mutate(
    rng: random.Random, seed: tuple[int, int, bytes], correlation_id: int, body_only: bool = False
) -> tuple[str, bytes]:
    """One mutated frame (without its size prefix) and the mutation's name; `body_only` leaves the request
    header whole (the broker then knows what it is asked and answers an unreadable body with an error)."""
    api_key, version, body = seed
    header = encode_request_header(api_key, version, correlation_id, "fuzz")
    frame = bytearray(header + body)
    start = len(header) if body_only else 0
    kinds = ("flip", "run", "huge", "truncate", "append")
    kind = rng.choice(kinds if body_only else (*kinds, "header", "empty", "noise"))
    if kind == "flip" and len(frame) > start:
        for _ in range(rng.randint(1, 8)):
            frame[rng.randrange(start, len(frame))] ^= 1 << rng.randrange(8)
    elif kind == "run" and len(frame) > start:
        at = rng.randrange(start, len(frame))
        frame[at : at + rng.randint(1, 16)] = rng.randbytes(rng.randint(1, 16))
    elif kind == "huge":
        at = rng.randrange(start, len(frame) + 1)
        huge = rng.choice(_HUGE)
        frame[at : at + len(huge)] = huge
    elif kind == "truncate":
        del frame[rng.randrange(start, len(frame) + 1) :]
    elif kind == "append":
        frame += rng.randbytes(rng.randint(1, 64))
    elif kind == "header":
        struct.pack_into(">hh", frame, 0, rng.randint(-5, 120), rng.randint(-2, 20))
    elif kind == "empty":
        frame = bytearray()
    else:
        frame = bytearray(rng.randbytes(rng.randint(1, 256)))
    return ("body-" if body_only else "") + kind, bytes(frame)


def plain_login(username: str, password: str) -> list[bytes]:
    """The frames of a SASL PLAIN login (SaslHandshake v1, SaslAuthenticate v2)."""
    handshake = encode_request_header(ApiKey.SASL_HANDSHAKE, 1, 1, "fuzz") + encode_request(
        ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN"
    )
    token = f"\0{username}\0{password}".encode()
    authenticate = encode_request_header(ApiKey.SASL_AUTHENTICATE, 2, 2, "fuzz") + encode_request(
        ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=token
    )
    return [handshake, authenticate]


async def _read_frame(reader: asyncio.StreamReader) -> bytes | None:
    """An answer's frame, or None when the broker closed the connection."""
    try:
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        return await reader.readexactly(size)
    except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
        return None


@dataclass
class _Sent:
    correlation_id: int
    frame: bytes
    wild: bool


class _Fuzzing:
    """One run's shared state: where, what to send, how far, and the counts."""

    def __init__(self, host: str, port: int, frames: int, seconds: float, **options: Any) -> None:
        self.host, self.port, self.frames = host, port, frames
        self.deadline = time.monotonic() + seconds
        self.tls: ssl.SSLContext | None = options["tls"]
        self.login: list[bytes] | None = options["login"]
        self.window: int = options["window"]
        self.wild_share: float = options["wild_share"]
        self.seeds = seeds()
        self.outcome = Outcome()

    def keep_going(self) -> bool:
        return self.outcome.sent < self.frames and time.monotonic() < self.deadline

    async def worker(self, rng: random.Random) -> None:
        while self.keep_going():
            try:
                reader, writer = await asyncio.open_connection(self.host, self.port, ssl=self.tls)
            except (ConnectionError, ssl.SSLError):
                self.outcome.closed_by_broker += 1
                continue
            self.outcome.connections += 1
            try:
                await self.connection(rng, reader, writer)
            except (ConnectionError, ssl.SSLError):
                self.outcome.closed_by_broker += 1
            finally:
                writer.close()

    async def connection(self, rng: random.Random, reader: asyncio.StreamReader, writer: Any) -> None:
        """Frames pipelined `window` at a time: body mutations the broker answers, until a wild frame (any
        mutation of any API: it may close the connection or stay quiet) ends the connection."""
        outcome = self.outcome
        if self.login is not None and rng.random() < 0.8:  # most connections fuzz after authenticating
            for frame in self.login:
                writer.write(struct.pack(">i", len(frame)) + frame)
                if await _read_frame(reader) is None:
                    raise ConnectionError("login refused")
        pending: collections.deque[_Sent] = collections.deque()
        correlation_id, ended = 100, False
        while True:
            while not ended and len(pending) < self.window and self.keep_going():
                correlation_id += 1
                wild = rng.random() < self.wild_share
                pool = self.seeds.every if wild else self.seeds.answered
                kind, frame = mutate(rng, rng.choice(pool), correlation_id, body_only=not wild)
                writer.write(struct.pack(">i", len(frame)) + frame)
                pending.append(_Sent(correlation_id, frame, wild))
                outcome.sent += 1
                outcome.by_mutation[kind] = outcome.by_mutation.get(kind, 0) + 1
                ended = wild
            if not pending:
                return
            try:
                answer = await asyncio.wait_for(_read_frame(reader), ANSWER_TIMEOUT_S)
            except TimeoutError:
                self._silent(pending.popleft())
                outcome.unread += len(pending)
                return
            if answer is None:
                outcome.frames += 1
                outcome.closed_by_broker += 1
                outcome.unread += len(pending) - 1
                return
            sent = pending.popleft()
            outcome.frames += 1
            outcome.answered += 1
            if not sent.wild and struct.unpack_from(">i", answer)[0] != sent.correlation_id:
                outcome.misanswered += 1
                if len(outcome.hung) < 5:
                    outcome.hung.append("misanswered " + sent.frame.hex())

    def _silent(self, sent: _Sent) -> None:
        outcome = self.outcome
        outcome.frames += 1
        if sent.wild and len(sent.frame) >= 2 and struct.unpack_from(">h", sent.frame)[0] in MAY_STAY_QUIET:
            outcome.quiet += 1
        else:
            outcome.unanswered += 1
            if len(outcome.hung) < 5:
                outcome.hung.append(sent.frame.hex())


async def run(
    host: str,
    port: int,
    *,
    frames: int,
    seconds: float,
    seed: int = 20,
    concurrency: int = 8,
    window: int = 16,
    wild_share: float = 0.05,
    tls: ssl.SSLContext | None = None,
    login: tuple[str, str] | None = None,
) -> Outcome:
    """Fuzz the listener at host:port until `frames` frames were sent or `seconds` passed, over
    `concurrency` connections at a time, each pipelining `window` frames; `wild_share` of the frames are
    any mutation of any API (each ends its connection), the others mutate only the body of a request
    the broker answers even when unreadable."""
    fuzzing = _Fuzzing(
        host,
        port,
        frames,
        seconds,
        tls=tls,
        login=plain_login(*login) if login else None,
        window=window,
        wild_share=wild_share,
    )
    await asyncio.gather(*(fuzzing.worker(random.Random(seed * 1000 + i)) for i in range(concurrency)))
    return fuzzing.outcome


def rss_bytes(pid: int, field: str = "VmRSS") -> int:
    """A process's resident memory (Linux), or with `field="VmHWM"` the most it ever had."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} for process {pid}")
