"""Sans-IO frame decoder for the Kafka wire protocol.

Theory of operation: every Kafka request and response travels as a frame,
a 4-byte big-endian signed size followed by exactly that many bytes. The
decoder is fed whatever bytes the socket produced (``feed``) and hands out
complete frames (``next_frame``), in order. It does no I/O, so the trio
server, the simulator and the fuzz tests drive the same code.

Bounds: a size prefix that is negative or larger than ``max_frame_bytes``
(Kafka's ``socket.request.max.bytes``) raises ``InvalidFrameSizeError``
before a single payload byte is buffered, so a hostile prefix cannot make us
allocate. Kafka's own NetworkReceive does the same and then closes the
connection; our server logs the reason and closes only that connection. The
internal buffer therefore never holds more than one maximum frame plus the
bytes of one socket read.

A large frame (LARGE_FRAME_BYTES or more: a produce request or a follower's
fetch answer of a megabyte) is not grown byte by byte in the buffer: the
reads that carry it are kept as they came and joined once when it is
complete, so its bytes are copied once in user space instead of twice or
more (appending to a growing bytearray, then copying the frame out).
"""

from __future__ import annotations

import struct

__all__ = ["FrameDecoder", "FrameError", "InvalidFrameSizeError", "TruncatedFrameError", "encode_frame"]

_SIZE = struct.Struct(">i")
LARGE_FRAME_BYTES = 64 * 1024


class FrameError(Exception):
    """The byte stream does not follow Kafka's framing; the connection must close."""


class InvalidFrameSizeError(FrameError):
    """A size prefix is negative or over the configured maximum."""

    def __init__(self, size: int, max_frame_bytes: int) -> None:
        self.size = size
        self.max_frame_bytes = max_frame_bytes
        if size < 0:
            reason = f"negative frame size {size}"
        else:
            reason = f"frame size {size} larger than socket.request.max.bytes={max_frame_bytes}"
        super().__init__(reason)


class TruncatedFrameError(FrameError):
    """The peer closed the stream in the middle of a frame."""


class FrameDecoder:
    """Splits a byte stream into Kafka frames; at most one frame is buffered."""

    __slots__ = ("max_frame_bytes", "_buffer", "_expected", "_closed", "_parts", "_parts_bytes")

    def __init__(self, max_frame_bytes: int) -> None:
        if max_frame_bytes <= 0:
            raise ValueError(f"max_frame_bytes must be positive, got {max_frame_bytes}")
        self.max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()
        # Payload size of the frame being assembled, or -1 while reading a prefix.
        self._expected = -1
        self._closed = False
        # The reads of a large frame being assembled (None otherwise), and their size.
        self._parts: list[bytes] | None = None
        self._parts_bytes = 0

    @property
    def buffered_bytes(self) -> int:
        return len(self._buffer) + self._parts_bytes

    @property
    def missing_bytes(self) -> int:
        """How many more bytes complete the frame being assembled (at least 1).

        A reader can ask for this much in one receive: a megabyte fetch
        response then arrives in a few reads instead of sixteen 64 KiB ones.
        It is never more than the frame size bound allows."""
        if self._expected < 0:
            return max(1, 4 - len(self._buffer))
        return max(1, self._expected - self.buffered_bytes)

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if self._closed:
            raise FrameError("data fed after end of stream")
        if self._parts is not None:
            part = data if isinstance(data, bytes) else bytes(data)
            self._parts.append(part)
            self._parts_bytes += len(part)
        else:
            self._buffer += data

    def next_frame(self) -> bytes | None:
        """The next complete frame's payload, or None until more bytes arrive."""
        if self._expected < 0:
            if len(self._buffer) < 4:
                return None
            (size,) = _SIZE.unpack_from(self._buffer, 0)
            if size < 0 or size > self.max_frame_bytes:
                raise InvalidFrameSizeError(size, self.max_frame_bytes)
            del self._buffer[:4]
            self._expected = size
        if self._parts is not None:
            return self._large_frame()
        if len(self._buffer) < self._expected:
            if self._expected >= LARGE_FRAME_BYTES:
                # Keep the rest of this frame's reads as they come (see the module doc).
                self._parts = [bytes(self._buffer)] if self._buffer else []
                self._parts_bytes = len(self._buffer)
                self._buffer.clear()
            return None
        if len(self._buffer) == self._expected:
            # The common case: the buffer holds exactly this frame. One copy
            # (slicing a bytearray and then bytes() of it copied twice).
            frame = bytes(self._buffer)
            self._buffer.clear()
        else:
            with memoryview(self._buffer) as view:
                frame = bytes(view[: self._expected])
            del self._buffer[: self._expected]
        self._expected = -1
        return frame

    def _large_frame(self) -> bytes | None:
        parts, expected = self._parts, self._expected
        if self._parts_bytes < expected:
            return None
        # The last read may carry the start of the next frame: split only it.
        extra = self._parts_bytes - expected
        if extra:
            last = parts[-1]
            parts[-1] = last[: len(last) - extra]
            self._buffer += memoryview(last)[len(last) - extra:]
        frame = parts[0] if len(parts) == 1 else b"".join(parts)
        self._parts = None
        self._parts_bytes = 0
        self._expected = -1
        return frame

    def whole_frame(self, data: bytes) -> bytes | None:
        """The payload of `data` when it is exactly one whole frame and nothing
        is buffered (a lone request read in one go: the common case), else
        None, and the caller feeds `data` as usual.

        The same bounds as feed + next_frame (the size is checked before the
        payload is copied), without their buffer: one copy of the payload
        instead of two, and no look-ahead call that finds nothing."""
        if self._expected >= 0 or self._buffer or self._closed or len(data) < 4:
            return None
        (size,) = _SIZE.unpack_from(data, 0)
        if size != len(data) - 4:
            return None
        if size > self.max_frame_bytes:
            raise InvalidFrameSizeError(size, self.max_frame_bytes)
        return data[4:]

    def frames(self):
        """Iterate over all frames complete so far."""
        while (frame := self.next_frame()) is not None:
            yield frame

    def end_of_stream(self) -> None:
        """The peer closed its side; leftover bytes mean a truncated frame."""
        self._closed = True
        if self._buffer or self._expected >= 0:
            raise TruncatedFrameError(
                f"connection closed inside a frame ({self.buffered_bytes} bytes buffered"
                + (f" of {self._expected}" if self._expected >= 0 else " of a size prefix")
                + ")"
            )


def encode_frame(payload: bytes | bytearray) -> bytes:
    return _SIZE.pack(len(payload)) + bytes(payload)
