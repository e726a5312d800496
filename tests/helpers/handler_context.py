"""Calling one broker handler directly: a request entity framed as a client frames it, decoded by the
broker's own header reader, on a real (unconnected) connection of a real listener; the answer decoded
back into a kio response entity."""

from __future__ import annotations

from typing import Any

from backbone.broker.config import Endpoint
from backbone.broker.network import Connection, Listener, RegionSender, RequestContext
from backbone.protocol import codec
from backbone.protocol.api import ApiTable
from backbone.protocol.headers import decode_request_header


class _NoRegions(RegionSender):
    """Handler tests read answers in memory; nothing is sent over a socket."""


def handler_context(
    entity: Any, *, listener_name: str = "PLAINTEXT", connection: Connection | None = None
) -> RequestContext:
    """The request on a new connection, or on `connection` (an earlier context's, for an exchange)."""
    frame = memoryview(codec.encode_request_frame(7, "handler-test", entity))[4:]
    header, body_offset = decode_request_header(frame)
    if connection is None:
        endpoint = Endpoint(listener_name, "127.0.0.1", 9092, "PLAINTEXT")
        listener = Listener(endpoint, ApiTable(), _NoRegions(), max_request_bytes=1 << 20)
        connection = Connection(listener)
    return RequestContext(header, frame, body_offset, connection)


def decoded_answer(entity: Any, answer: Any) -> Any:
    """The handler's answer (chunks, bytes or a kio entity) as the kio response entity a client reads."""
    if answer is None or hasattr(answer, "__api_key__"):
        return answer
    body = b"".join(_chunk_bytes(chunk) for chunk in answer)
    return codec.decode_response(entity.__api_key__, entity.__version__, body)


def _chunk_bytes(chunk: Any) -> bytes:
    if isinstance(chunk, bytes | bytearray | memoryview):
        return bytes(chunk)
    parts = getattr(chunk, "parts", None) or (chunk,)  # a file region, or several (region_sender.Regions)
    return b"".join(part.read() for part in parts)
