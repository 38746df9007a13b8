"""A minimal blocking Kafka protocol client over one TCP connection.

Theory of operation: encode a kio request with the header version its
schema names, send it framed, read frames until the matching correlation
id. For tests and tools that need exact control over what goes on the wire
(bad-input tests, ApiVersions fallback checks); real applications use a
real Kafka client. Responses are bounded by `max_frame_bytes`.
"""

from __future__ import annotations

import socket
import struct

from kref.protocol.codec import decode_response, encode_request, response_class
from kref.protocol.framing import FrameDecoder

__all__ = ["WireClient"]


class WireClient:
    def __init__(self, host: str, port: int, *, timeout: float = 10.0, max_frame_bytes: int = 64 * 1024 * 1024):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.decoder = FrameDecoder(max_frame_bytes)
        self.next_correlation_id = 1

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, body: object, client_id: str | None = "kref-wire") -> int:
        correlation_id = self.next_correlation_id
        self.next_correlation_id += 1
        self.sock.sendall(encode_request(body, correlation_id, client_id))
        return correlation_id

    def read_frame(self) -> bytes | None:
        """The next response frame, or None when the broker closed the connection."""
        while True:
            frame = self.decoder.next_frame()
            if frame is not None:
                return frame
            try:
                data = self.sock.recv(65536)
            except ConnectionResetError:
                return None
            if not data:
                return None
            self.decoder.feed(data)

    def request(self, body: object, response_type: type | None = None) -> object:
        correlation_id = self.send(body)
        if response_type is None:
            response_type = response_class(type(body).__api_key__, type(body).__version__)
        frame = self.read_frame()
        if frame is None:
            raise ConnectionError("broker closed the connection")
        got, response = decode_response(frame, response_type)
        if got != correlation_id:
            raise AssertionError(f"correlation id {got}, expected {correlation_id}")
        return response

    def is_closed_by_peer(self, timeout: float = 10.0) -> bool:
        """True when the broker closes the connection (EOF or reset) within timeout."""
        self.sock.settimeout(timeout)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False


def size_prefix(n: int) -> bytes:
    return struct.pack(">i", n)
