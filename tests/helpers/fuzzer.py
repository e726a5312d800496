"""A seeded protocol fuzzer: mutated and malformed Kafka request frames sent at a live broker.

Seeds are well-formed requests of every API the broker speaks (each at its newest version, fields at their
zero values), optionally preceded on a connection by a SASL PLAIN login (so the authenticated surface is
fuzzed too). Each frame is mutated by one of: flipped bits, a random byte run, a huge length or count
(0xFFFFFFFF / 0x7FFFFFFF) at a random place, truncation, random bytes appended, a random API key and
version in the header, an empty frame, or a frame of pure noise; its size prefix is always right, so the
broker reads exactly that frame. One frame at a time per connection: the sender waits for the answer or
for the broker to close the connection (which Kafka does on a request it cannot read), and counts it.

`run(...)` drives `concurrency` connections for a number of frames or seconds, whichever ends first, and
returns the counts. The same seed gives the same frames.
"""

from __future__ import annotations

import asyncio
import random
import ssl
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from backbone.protocol.api import SUPPORTED_VERSIONS, ApiKey
from backbone.protocol.headers import encode_request_header
from backbone.wire.messages import encode_request

_HUGE = (b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff\x0f", b"\x80\x00\x00\x00")
ANSWER_TIMEOUT_S = 10.0
# APIs whose answer may rightly never come or come late: Produce with acks=0, Fetch's and JoinGroup's waits
# (a mutated max_wait_ms or rebalance timeout can be hours).
MAY_STAY_QUIET = frozenset({ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.JOIN_GROUP})


@dataclass
class Outcome:
    frames: int = 0
    answered: int = 0
    closed_by_broker: int = 0
    connections: int = 0
    unanswered: int = 0  # neither answered nor closed within ANSWER_TIMEOUT_S: a hang
    quiet: int = 0  # unanswered, but the protocol lets it be (Produce acks=0, a long Fetch or JoinGroup wait)
    by_mutation: dict[str, int] = field(default_factory=dict)
    hung: list[str] = field(default_factory=list)  # the first unanswered frames, in hex, to replay


def seeds() -> list[tuple[int, int, bytes]]:
    """(api key, version, body) of a well-formed request of every API the broker speaks."""
    found = []
    for api_key, versions in SUPPORTED_VERSIONS.items():
        if api_key in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE):
            continue  # they change the connection's state; fuzzed as mutations of other seeds' headers
        found.append((int(api_key), versions.max, encode_request(api_key, versions.max)))
    return found


def mutate(rng: random.Random, seed: tuple[int, int, bytes], correlation_id: int) -> tuple[str, bytes]:
    """One mutated frame (without its size prefix) and the mutation's name."""
    api_key, version, body = seed
    header = encode_request_header(api_key, version, correlation_id, "fuzz")
    frame = bytearray(header + body)
    kind = rng.choice(("flip", "run", "huge", "truncate", "append", "header", "empty", "noise"))
    if kind == "flip" and frame:
        for _ in range(rng.randint(1, 8)):
            frame[rng.randrange(len(frame))] ^= 1 << rng.randrange(8)
    elif kind == "run" and frame:
        at = rng.randrange(len(frame))
        frame[at : at + rng.randint(1, 16)] = rng.randbytes(rng.randint(1, 16))
    elif kind == "huge":
        at = rng.randrange(len(frame) + 1)
        huge = rng.choice(_HUGE)
        frame[at : at + len(huge)] = huge
    elif kind == "truncate":
        del frame[rng.randrange(len(frame) + 1) :]
    elif kind == "append":
        frame += rng.randbytes(rng.randint(1, 64))
    elif kind == "header":
        struct.pack_into(">hh", frame, 0, rng.randint(-5, 120), rng.randint(-2, 20))
    elif kind == "empty":
        frame = bytearray()
    else:
        frame = bytearray(rng.randbytes(rng.randint(1, 256)))
    return kind, bytes(frame)


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


async def _worker(
    host: str,
    port: int,
    rng: random.Random,
    outcome: Outcome,
    keep_going: Callable[[], bool],
    tls: ssl.SSLContext | None,
    login: list[bytes] | None,
) -> None:
    pool = seeds()
    while keep_going():
        reader, writer = await asyncio.open_connection(host, port, ssl=tls)
        outcome.connections += 1
        try:
            if login is not None and rng.random() < 0.8:  # most connections fuzz after authenticating
                for frame in login:
                    writer.write(struct.pack(">i", len(frame)) + frame)
                    if await _read_frame(reader) is None:
                        raise ConnectionError("login refused")
            correlation_id = 100
            while keep_going():
                correlation_id += 1
                kind, frame = mutate(rng, rng.choice(pool), correlation_id)
                writer.write(struct.pack(">i", len(frame)) + frame)
                outcome.frames += 1
                outcome.by_mutation[kind] = outcome.by_mutation.get(kind, 0) + 1
                try:
                    answer = await asyncio.wait_for(_read_frame(reader), ANSWER_TIMEOUT_S)
                except TimeoutError:
                    if len(frame) >= 2 and struct.unpack_from(">h", frame)[0] in MAY_STAY_QUIET:
                        outcome.quiet += 1
                    else:
                        outcome.unanswered += 1
                        if len(outcome.hung) < 5:
                            outcome.hung.append(frame.hex())
                    break
                if answer is None:
                    outcome.closed_by_broker += 1
                    break
                outcome.answered += 1
        except (ConnectionError, ssl.SSLError):
            outcome.closed_by_broker += 1
        finally:
            writer.close()


async def run(
    host: str,
    port: int,
    *,
    frames: int,
    seconds: float,
    seed: int = 20,
    concurrency: int = 8,
    tls: ssl.SSLContext | None = None,
    login: tuple[str, str] | None = None,
) -> Outcome:
    """Fuzz the listener at host:port until `frames` frames were sent or `seconds` passed."""
    outcome = Outcome()
    deadline = time.monotonic() + seconds

    def keep_going() -> bool:
        return outcome.frames < frames and time.monotonic() < deadline

    frames_login = plain_login(*login) if login else None
    await asyncio.gather(
        *(
            _worker(host, port, random.Random(seed * 1000 + i), outcome, keep_going, tls, frames_login)
            for i in range(concurrency)
        )
    )
    return outcome


def rss_bytes(pid: int) -> int:
    """A process's resident memory (Linux)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")
