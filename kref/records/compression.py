"""Kafka's four compression codecs, framed exactly as Kafka writes and reads them.

The compression codec of a batch (attributes bits 0-2) applies to the records
section of a v2 batch, or to the value of a legacy v0/v1 wrapper message.
Each codec has a Kafka-specific framing that other tools do not assume:

- GZIP (1): an RFC 1952 stream; Java's GZIPInputStream also reads several
  concatenated members, so we do too.
- SNAPPY (2): the Java client writes the xerial SnappyOutputStream framing
  (16-byte header "\\x82SNAPPY\\0", version 1, compat 1, then blocks of
  <int32 big-endian length><raw snappy block>, 32 KiB of input per block);
  librdkafka writes raw snappy. xerial's reader accepts both (a missing magic
  header means "raw"), and so do we.
- LZ4 (3): the LZ4 frame format (magic 0x184D2204) with independent 64 KiB
  blocks, no content size, no content checksum. Kafka rejects dependent
  blocks. KAFKA-3160: Kafka before 0.10 computed the frame descriptor's
  header checksum (HC) over the magic number as well; Kafka keeps writing
  that broken HC for magic 0 messages and ignores HC when reading magic 0,
  but verifies it for magic 1 and 2.
- ZSTD (4): zstd frames (KIP-110), possibly several concatenated.

Every decompressor takes a hard `max_uncompressed_bytes` bound and never
allocates beyond a small constant over it: a batch of a few bytes that
inflates to gigabytes (a decompression bomb) raises DecompressionLimitError
instead of exhausting memory. Malformed input raises CompressionError; both
are CorruptRecordError subclasses, so callers handle one family.
"""

from __future__ import annotations

import enum
import struct
import zlib

import cramjam
import lz4.block
import lz4.frame
import zstandard

from kref.records.errors import CompressionError, DecompressionLimitError, UnsupportedCompressionError

Buffer = bytes | bytearray | memoryview

DEFAULT_MAX_UNCOMPRESSED_BYTES = 64 * 1024 * 1024
_FEED = 16 * 1024


class CompressionType(enum.IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


def compression_type_of(codec: int) -> CompressionType:
    try:
        return CompressionType(codec)
    except ValueError:
        raise UnsupportedCompressionError(f"unknown compression codec {codec}") from None


def compress(codec: int, data: Buffer, *, magic: int = 2, level: int | None = None) -> bytes:
    """Compress `data` as Kafka's producer does for `codec` and message format `magic`."""
    codec = compression_type_of(codec)
    if codec == CompressionType.NONE:
        return bytes(data)
    if codec == CompressionType.GZIP:
        # Kafka's default compression.gzip.level is zlib's default (6).
        c = zlib.compressobj(6 if level is None else level, zlib.DEFLATED, 31)
        return c.compress(data) + c.flush()
    if codec == CompressionType.SNAPPY:
        return _xerial_snappy_compress(data)
    if codec == CompressionType.LZ4:
        return _lz4_compress(data, broken_header_checksum=(magic == 0), level=level)
    return zstandard.ZstdCompressor(level=3 if level is None else level).compress(data)


def decompress(
    codec: int,
    data: Buffer,
    *,
    max_uncompressed_bytes: int = DEFAULT_MAX_UNCOMPRESSED_BYTES,
    magic: int = 2,
    max_output_bytes: int | None = None,
) -> bytes:
    """Decompress `data` written with `codec`; never returns (or allocates for)
    much more than `max_uncompressed_bytes` (`max_output_bytes` is an alias
    kept for callers written against an earlier draft)."""
    if max_output_bytes is not None:
        max_uncompressed_bytes = max_output_bytes
    codec = compression_type_of(codec)
    if codec == CompressionType.NONE:
        if len(data) > max_uncompressed_bytes:
            _limit(len(data), max_uncompressed_bytes)
        return bytes(data)
    try:
        if codec == CompressionType.GZIP:
            return _gzip_decompress(data, max_uncompressed_bytes)
        if codec == CompressionType.SNAPPY:
            return _snappy_decompress(data, max_uncompressed_bytes)
        if codec == CompressionType.LZ4:
            return _lz4_decompress(data, max_uncompressed_bytes, ignore_header_checksum=(magic == 0))
        return _zstd_decompress(data, max_uncompressed_bytes)
    except CompressionError:
        raise
    except (zlib.error, zstandard.ZstdError, cramjam.DecompressionError, RuntimeError, ValueError) as e:
        # Each library signals "these bytes are not valid" its own way (lz4
        # with RuntimeError); to the caller it is one thing.
        raise CompressionError(f"{codec.name} data is corrupt: {e}") from None


def _limit(size: int, bound: int) -> None:
    raise DecompressionLimitError(f"decompressed size exceeds max_uncompressed_bytes={bound} (reached {size})")


# --- gzip -------------------------------------------------------------------


def _gzip_decompress(data: Buffer, bound: int) -> bytes:
    view = memoryview(data)
    if not view:
        raise CompressionError("gzip stream is empty")
    out = bytearray()
    pos = 0
    while pos < len(view):  # one gzip member per pass
        d = zlib.decompressobj(31)
        while not d.eof:
            if pos >= len(view):
                raise CompressionError("gzip stream is truncated")
            # Bounded input slices keep zlib's copies of unused input small,
            # so many tiny members cost linear time, not quadratic.
            chunk = view[pos : pos + _FEED]
            # max_length caps each call's output, so a bomb stops at bound + 1 bytes.
            out += d.decompress(chunk, bound + 1 - len(out))
            while d.unconsumed_tail and not d.eof and len(out) <= bound:
                out += d.decompress(d.unconsumed_tail, bound + 1 - len(out))
            if len(out) > bound:
                _limit(len(out), bound)
            pos += len(chunk) - len(d.unused_data)
    return bytes(out)


# --- snappy -----------------------------------------------------------------

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK_SIZE = 32 * 1024
_INT32 = struct.Struct(">i")


def _xerial_snappy_compress(data: Buffer) -> bytes:
    view = memoryview(data)
    parts = [XERIAL_HEADER]
    for i in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(view[i : i + XERIAL_BLOCK_SIZE]))
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_uncompressed_length(block: memoryview) -> int:
    """The varint32 length prefix of a raw snappy block."""
    result = shift = 0
    for i in range(min(5, len(block))):
        b = block[i]
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result
        shift += 7
    raise CompressionError("snappy block has a bad length prefix")


def _snappy_raw(block: memoryview, budget: int, bound: int, produced: int) -> bytes:
    n = _snappy_uncompressed_length(block)
    if n > budget:
        _limit(produced + n, bound)
    return bytes(cramjam.snappy.decompress_raw(block))


def _snappy_decompress(data: Buffer, bound: int) -> bytes:
    view = memoryview(data)
    if view[: len(XERIAL_MAGIC)] != XERIAL_MAGIC or len(view) < len(XERIAL_HEADER):
        return _snappy_raw(view, bound, bound, 0)
    out = bytearray()
    pos = 0
    while pos < len(view):
        # xerial's reader also accepts a fresh stream header between blocks
        # (concatenated streams).
        if view[pos : pos + len(XERIAL_MAGIC)] == XERIAL_MAGIC:
            if len(view) - pos < len(XERIAL_HEADER):
                raise CompressionError("xerial snappy header is truncated")
            pos += len(XERIAL_HEADER)
            continue
        if len(view) - pos < 4:
            raise CompressionError("xerial snappy block length is truncated")
        (length,) = _INT32.unpack_from(view, pos)
        pos += 4
        if length < 0 or length > len(view) - pos:
            raise CompressionError(f"xerial snappy block length {length} exceeds the {len(view) - pos} bytes left")
        out += _snappy_raw(view[pos : pos + length], bound - len(out), bound, len(out))
        pos += length
    return bytes(out)


# --- lz4 --------------------------------------------------------------------

LZ4_FRAME_MAGIC = 0x184D2204
_LZ4_BLOCK_SIZES = {4: 64 * 1024, 5: 256 * 1024, 6: 1024 * 1024, 7: 4 * 1024 * 1024}


def xxh32(data: Buffer, seed: int = 0) -> int:
    """XXH32, used only over the 2-10 bytes of an lz4 frame descriptor (HC)."""
    p1, p2, p3, p4, p5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
    mask = 0xFFFFFFFF

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & mask

    data = bytes(data)
    n = len(data)
    i = 0
    if n >= 16:
        v = [(seed + p1 + p2) & mask, (seed + p2) & mask, seed & mask, (seed - p1) & mask]
        while i + 16 <= n:
            for j in range(4):
                (lane,) = struct.unpack_from("<I", data, i)
                v[j] = (rotl((v[j] + lane * p2) & mask, 13) * p1) & mask
                i += 4
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & mask
    else:
        h = (seed + p5) & mask
    h = (h + n) & mask
    while i + 4 <= n:
        (lane,) = struct.unpack_from("<I", data, i)
        h = (rotl((h + lane * p3) & mask, 17) * p4) & mask
        i += 4
    while i < n:
        h = (rotl((h + data[i] * p5) & mask, 11) * p1) & mask
        i += 1
    h ^= h >> 15
    h = (h * p2) & mask
    h ^= h >> 13
    h = (h * p3) & mask
    h ^= h >> 16
    return h


def _lz4_descriptor_end(view: memoryview) -> int:
    """Validate the frame descriptor as Kafka's reader does; return the HC index."""
    if len(view) < 7:
        raise CompressionError("lz4 frame is shorter than its header")
    (magic,) = struct.unpack_from("<I", view, 0)
    if magic != LZ4_FRAME_MAGIC:
        raise CompressionError(f"lz4 frame magic {magic:#x} is not {LZ4_FRAME_MAGIC:#x}")
    flg, bd = view[4], view[5]
    if flg >> 6 != 1:
        raise UnsupportedCompressionError(f"lz4 frame version {flg >> 6} is unsupported")
    if flg & 0x03:
        raise CompressionError("lz4 frame FLG reserved bits are set")
    if not flg & 0x20:
        raise UnsupportedCompressionError("lz4 dependent blocks are unsupported (block independence must be set)")
    if bd & 0x8F or (bd >> 4) & 0x07 not in _LZ4_BLOCK_SIZES:
        raise CompressionError(f"lz4 frame BD byte {bd:#x} is invalid")
    hc_index = 6 + (8 if flg & 0x08 else 0)
    if len(view) <= hc_index:
        raise CompressionError("lz4 frame descriptor is truncated")
    return hc_index


def _lz4_compress(data: Buffer, *, broken_header_checksum: bool, level: int | None) -> bytes:
    framed = lz4.frame.compress(
        data,
        compression_level=0 if level is None else level,
        block_size=lz4.frame.BLOCKSIZE_MAX64KB,
        block_linked=False,
        content_checksum=False,
        store_size=False,
    )
    if not broken_header_checksum:
        return framed
    out = bytearray(framed)
    hc_index = _lz4_descriptor_end(memoryview(out))
    out[hc_index] = (xxh32(out[:hc_index]) >> 8) & 0xFF
    return bytes(out)


def _lz4_decompress(data: Buffer, bound: int, *, ignore_header_checksum: bool) -> bytes:
    view = memoryview(data)
    hc_index = _lz4_descriptor_end(view)
    correct_hc = (xxh32(view[4:hc_index]) >> 8) & 0xFF
    if view[hc_index] != correct_hc:
        if not ignore_header_checksum:
            raise CompressionError("lz4 frame descriptor checksum mismatch")
        # Legacy magic 0 frames carry the KAFKA-3160 HC; repair it so the
        # C decoder (which always verifies HC) accepts the frame.
        fixed = bytearray(view)
        fixed[hc_index] = correct_hc
        view = memoryview(fixed)
    # The decoder allocates max_length up front, so ask for output in steps
    # that grow with what was produced instead of the whole bound at once.
    d = lz4.frame.LZ4FrameDecompressor()
    step = min(bound + 1, max(1 << 16, 4 * len(view)))
    parts = [d.decompress(view, max_length=step)]
    total = len(parts[0])
    while True:
        if total > bound:
            _limit(total, bound)
        if d.eof:
            break
        if d.needs_input:
            raise CompressionError("lz4 frame is truncated (no end mark)")
        parts.append(d.decompress(b"", max_length=min(bound + 1 - total, max(step, total))))
        total += len(parts[-1])
    return parts[0] if len(parts) == 1 else b"".join(parts)


# --- zstd -------------------------------------------------------------------

# A zstd block inflates at most ~32768-fold (an RLE block: 4 bytes in,
# 128 KiB out), so feeding the decoder slices of (remaining budget / 32768)
# bytes keeps each call's output within the budget (and within 2 MiB for the
# smallest, 64-byte slices): a bomb is caught between calls having allocated
# at most about twice the bound, or the bound + 2 MiB.
_ZSTD_MAX_RATIO = 32768
_ZSTD_MIN_FEED = 64
_ZSTD_MAX_FEED = 1 << 16


def _zstd_decompress(data: Buffer, bound: int) -> bytes:
    view = memoryview(data)
    if not view:
        raise CompressionError("zstd data is empty")
    dctx = zstandard.ZstdDecompressor()
    out = bytearray()
    pos = 0
    while pos < len(view):  # one frame per pass; Kafka reads concatenated frames
        d = dctx.decompressobj()
        while not d.eof:
            if pos >= len(view):
                raise CompressionError("zstd frame is truncated")
            feed = min(_ZSTD_MAX_FEED, max(_ZSTD_MIN_FEED, (bound - len(out)) // _ZSTD_MAX_RATIO))
            chunk = view[pos : pos + feed]
            out += d.decompress(chunk)
            if len(out) > bound:
                _limit(len(out), bound)
            # bytes fed past the end of the frame come back as unused_data
            pos += len(chunk) - (len(d.unused_data) if d.eof else 0)
    return bytes(out)
