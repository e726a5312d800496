"""A raw Kafka protocol connection for tests that need byte-level control (duplicates, bad input)."""

from __future__ import annotations

import socket
import struct
from typing import Any

from backbone.protocol import codec
from backbone.protocol.headers import decode_response_header, response_header_version


class RawConnection:
    def __init__(self, bootstrap: str, timeout: float = 10.0) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> bytes:
        """One response body (header included); raises ConnectionError when the broker closed."""
        size = struct.unpack(">i", self._read_exactly(4))[0]
        return self._read_exactly(size)

    def _read_exactly(self, count: int) -> bytes:
        chunks = []
        while count:
            chunk = self.sock.recv(count)
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            chunks.append(chunk)
            count -= len(chunk)
        return b"".join(chunks)

    def request(self, entity: Any, spare: bytes = b"") -> Any:
        """Send a kio request entity (followed by `spare` bytes inside its frame) and decode the
        response of the same API and version."""
        self.correlation_id += 1
        frame = codec.encode_request_frame(self.correlation_id, "tests", entity)
        if spare:
            frame = struct.pack(">i", len(frame) - 4 + len(spare)) + frame[4:] + spare
        self.sock.sendall(frame)
        frame = self.read_frame()
        api_key, version = int(entity.__api_key__), int(entity.__version__)
        correlation_id, pos = decode_response_header(frame, response_header_version(api_key, version))
        assert correlation_id == self.correlation_id
        return codec.decode_response(api_key, version, frame, pos)

    def closed_by_peer(self, timeout: float = 5.0) -> bool:
        """Whether the broker closes the connection (reads EOF) within `timeout`."""
        self.sock.settimeout(timeout)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True
