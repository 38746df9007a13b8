"""A capture stub that lets librdkafka (confluent-kafka) produce to it, so that
its record batches can serve as a test oracle.

It speaks just enough of the Kafka protocol, hand-encoded with struct and
non-flexible versions only: ApiVersions (answering v3 with
UNSUPPORTED_VERSION in the v0 layout, as Kafka does, then v0), Metadata v1
and Produce v3-v7, on a free loopback port. Every Produce request's records
bytes are kept per partition. It is not a broker and exists only for tests.
"""

from __future__ import annotations

import socket
import struct
import threading

API_PRODUCE, API_FETCH, API_METADATA, API_FIND_COORDINATOR, API_VERSIONS = 0, 1, 3, 10, 18
# librdkafka derives features from advertised ranges: MsgVer2 needs Produce 3
# and Fetch 4, ZSTD Produce 7 and Fetch 10, LZ4 uses FindCoordinator as its
# proxy. Only ApiVersions, Metadata and Produce are ever answered.
ADVERTISED = [(API_PRODUCE, 3, 7), (API_FETCH, 4, 10), (API_METADATA, 1, 1), (API_FIND_COORDINATOR, 0, 0),
              (API_VERSIONS, 0, 0)]


def _string(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    b = s.encode()
    return struct.pack(">h", len(b)) + b


class _Reader:
    def __init__(self, buf: bytes):
        self.buf, self.pos = buf, 0

    def take(self, fmt: str):
        vals = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return vals if len(vals) > 1 else vals[0]

    def string(self) -> str | None:
        n = self.take(">h")
        if n < 0:
            return None
        s = self.buf[self.pos : self.pos + n].decode()
        self.pos += n
        return s

    def nullable_bytes(self) -> bytes | None:
        n = self.take(">i")
        if n < 0:
            return None
        b = self.buf[self.pos : self.pos + n]
        self.pos += n
        return b


class LibrdkafkaCapture:
    def __init__(self, topic: str, partitions: int = 1):
        self.topic, self.partitions = topic, partitions
        self.captured: list[bytes] = []
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(8)
        self.port = self._sock.getsockname()[1]
        self._stop = False
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()
        self._conns: list[socket.socket] = []

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        self._stop = True
        for c in self._conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()
        self._sock.close()

    def _accept(self) -> None:
        while not self._stop:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self._conns.append(conn)
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            t.start()

    def _recv_exact(self, conn: socket.socket, n: int) -> bytes | None:
        out = bytearray()
        while len(out) < n:
            chunk = conn.recv(n - len(out))
            if not chunk:
                return None
            out += chunk
        return bytes(out)

    def _serve(self, conn: socket.socket) -> None:
        try:
            while True:
                size = self._recv_exact(conn, 4)
                if size is None:
                    return
                (n,) = struct.unpack(">i", size)
                if n > 64 << 20:
                    return
                frame = self._recv_exact(conn, n)
                if frame is None:
                    return
                r = _Reader(frame)
                api_key, api_version, correlation_id = r.take(">hhi")
                r.string()  # client_id
                body = self._handle(api_key, api_version, r)
                if body is None:
                    return
                out = struct.pack(">i", correlation_id) + body
                conn.sendall(struct.pack(">i", len(out)) + out)
        except OSError:
            return

    def _handle(self, api_key: int, api_version: int, r: _Reader) -> bytes | None:
        if api_key == API_VERSIONS:
            error = 0 if api_version == 0 else 35  # UNSUPPORTED_VERSION, v0 body layout
            return struct.pack(">hi", error, len(ADVERTISED)) + b"".join(struct.pack(">hhh", *a) for a in ADVERTISED)
        if api_key == API_METADATA:
            broker = struct.pack(">i", 1) + struct.pack(">i", 0) + _string("127.0.0.1") + struct.pack(">i", self.port)
            broker += _string(None)
            parts = b"".join(
                struct.pack(">hii", 0, p, 0) + struct.pack(">ii", 1, 0) + struct.pack(">ii", 1, 0)
                for p in range(self.partitions)
            )
            topic = struct.pack(">i", 1) + struct.pack(">h", 0) + _string(self.topic) + b"\x00"
            topic += struct.pack(">i", self.partitions) + parts
            return broker + struct.pack(">i", 0) + topic
        if api_key == API_PRODUCE:
            r.string()  # transactional_id
            acks, _timeout = r.take(">hi")
            responses = []
            for _ in range(r.take(">i")):
                name = r.string()
                parts = []
                for _ in range(r.take(">i")):
                    index = r.take(">i")
                    records = r.nullable_bytes()
                    if records is not None:
                        self.captured.append(records)
                    part = struct.pack(">ihqq", index, 0, len(self.captured) * 1000, -1)
                    if api_version >= 5:
                        part += struct.pack(">q", 0)
                    parts.append(part)
                responses.append(_string(name) + struct.pack(">i", len(parts)) + b"".join(parts))
            if acks == 0:
                return b""  # no response expected; keep the connection
            return struct.pack(">i", len(responses)) + b"".join(responses) + struct.pack(">i", 0)
        return None
