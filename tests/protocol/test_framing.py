"""FrameDecoder: Kafka's 4-byte size-prefixed framing, split at any byte
boundary; hard maximum (socket.request.max.bytes) and negative sizes are
typed errors raised before any payload is buffered; a stream that ends
inside a frame is a TruncatedFrameError. Hypothesis checks that any
chunking of a valid stream yields the same frames and that arbitrary bytes
only ever produce frames or FrameError (with bounded buffering)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kref.protocol.framing import (
    FrameDecoder,
    FrameError,
    InvalidFrameSizeError,
    TruncatedFrameError,
    encode_frame,
)


def test_frames_split_across_feeds():
    d = FrameDecoder(100)
    stream = encode_frame(b"hello") + encode_frame(b"") + encode_frame(b"world!")
    frames = []
    for i in range(len(stream)):
        d.feed(stream[i : i + 1])
        frames.extend(d.frames())
    assert frames == [b"hello", b"", b"world!"]
    d.end_of_stream()


def test_oversize_prefix_rejected_before_buffering():
    d = FrameDecoder(1024)
    d.feed(struct.pack(">i", 1025))
    with pytest.raises(InvalidFrameSizeError) as info:
        d.next_frame()
    assert info.value.size == 1025
    assert "socket.request.max.bytes=1024" in str(info.value)


def test_frame_of_exactly_max_size_accepted():
    d = FrameDecoder(8)
    d.feed(encode_frame(b"12345678"))
    assert d.next_frame() == b"12345678"


def test_negative_prefix_rejected():
    d = FrameDecoder(1024)
    d.feed(struct.pack(">i", -1))
    with pytest.raises(InvalidFrameSizeError, match="negative"):
        d.next_frame()


@pytest.mark.parametrize("data", [b"\x00\x00", struct.pack(">i", 10) + b"abc"])
def test_truncated_stream(data):
    d = FrameDecoder(1024)
    d.feed(data)
    assert d.next_frame() is None
    with pytest.raises(TruncatedFrameError):
        d.end_of_stream()


def test_invalid_max_rejected():
    with pytest.raises(ValueError):
        FrameDecoder(0)


@settings(max_examples=200, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=300), max_size=10),
    cuts=st.lists(st.integers(min_value=1, max_value=64), min_size=1, max_size=50),
)
def test_any_chunking_yields_the_same_frames(payloads, cuts):
    stream = b"".join(encode_frame(p) for p in payloads)
    d = FrameDecoder(300)
    frames, pos, i = [], 0, 0
    while pos < len(stream):
        step = cuts[i % len(cuts)]
        d.feed(stream[pos : pos + step])
        pos += step
        i += 1
        frames.extend(d.frames())
    assert frames == payloads
    d.end_of_stream()


@settings(max_examples=500, deadline=None)
@given(data=st.binary(max_size=2000), chunk=st.integers(min_value=1, max_value=256))
def test_arbitrary_bytes_only_frames_or_typed_errors(data, chunk):
    limit = 512
    d = FrameDecoder(limit)
    try:
        for pos in range(0, len(data), chunk):
            d.feed(data[pos : pos + chunk])
            for frame in d.frames():
                assert len(frame) <= limit
            # at most one partial frame plus one chunk is ever buffered
            assert d.buffered_bytes <= limit + 4 + chunk
        d.end_of_stream()
    except FrameError:
        pass


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.sampled_from([0, 7, 65535, 65536, 70001, 200000]), min_size=1, max_size=5),
    cuts=st.lists(st.integers(min_value=1, max_value=300000), min_size=1, max_size=12),
)
def test_large_frames_any_chunking_same_frames(sizes, cuts):
    """Frames of LARGE_FRAME_BYTES and more are assembled from the reads as they came
    (one join); any split of the stream, including reads that end inside the next
    frame's prefix or body, yields the same frames, and the decoder's count of
    buffered and missing bytes stays right."""
    payloads = [bytes([i % 251]) * n for i, n in enumerate(sizes)]
    stream = b"".join(encode_frame(p) for p in payloads)
    d = FrameDecoder(1 << 20)
    got: list[bytes] = []
    position = 0
    for cut in cuts + [len(stream)]:
        chunk = stream[position : position + cut]
        position += len(chunk)
        if not chunk:
            break
        d.feed(memoryview(chunk) if len(got) % 2 else chunk)
        got.extend(d.frames())
        assert d.buffered_bytes <= len(stream)
        assert d.missing_bytes >= 1
    assert got == payloads
    assert d.buffered_bytes == 0
    d.end_of_stream()


def test_large_frame_truncated_by_end_of_stream():
    d = FrameDecoder(1 << 20)
    d.feed(struct.pack(">i", 100000) + b"x" * 1000)
    assert d.next_frame() is None
    d.feed(b"y" * 5000)
    assert d.next_frame() is None
    assert d.buffered_bytes == 6000 and d.missing_bytes == 94000
    with pytest.raises(TruncatedFrameError, match="6000 bytes buffered of 100000"):
        d.end_of_stream()


def _fed_outcome(chunks: list[bytes], max_bytes: int):
    """Frames (or the error type) from feed + next_frame alone."""
    d = FrameDecoder(max_bytes)
    out = []
    try:
        for chunk in chunks:
            d.feed(chunk)
            out += list(d.frames())
    except FrameError as exc:
        return out, type(exc)
    return out, None


def _whole_first_outcome(chunks: list[bytes], max_bytes: int):
    """The server's way: whole_frame first, feed + next_frame when it says None."""
    d = FrameDecoder(max_bytes)
    out = []
    try:
        for chunk in chunks:
            frame = d.whole_frame(chunk)
            if frame is not None:
                out.append(frame)
                continue
            d.feed(chunk)
            out += list(d.frames())
    except FrameError as exc:
        return out, type(exc)
    return out, None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=6), st.integers(min_value=1, max_value=30))
def test_whole_frame_first_changes_nothing(chunks, max_bytes):
    # Chunks that are whole frames, frames cut anywhere, bad and oversized prefixes alike.
    framed = [encode_frame(c) if i % 2 == 0 else c for i, c in enumerate(chunks)]
    assert _whole_first_outcome(framed, max_bytes) == _fed_outcome(framed, max_bytes)


def test_whole_frame_only_when_nothing_is_buffered():
    d = FrameDecoder(100)
    assert d.whole_frame(encode_frame(b"abc")) == b"abc"
    d.feed(b"\x00\x00")  # half a size prefix buffered: the next read is not a frame of its own
    assert d.whole_frame(encode_frame(b"abc")) is None
    with pytest.raises(InvalidFrameSizeError):
        FrameDecoder(2).whole_frame(encode_frame(b"abc"))
    assert FrameDecoder(100).whole_frame(encode_frame(b"abc") + b"\x00") is None  # more than one frame
