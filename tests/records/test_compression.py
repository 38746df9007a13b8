"""Kafka's codec framings and the decompression bound (compression.py).

Checks, against kafka-python's and aiokafka's codec modules as oracles:
gzip (incl. concatenated members, as Java's GZIPInputStream reads), snappy in
xerial stream framing (what the Java client writes) and raw (what librdkafka
writes), the lz4 frame format with Kafka's rules (independent blocks only;
KAFKA-3160 broken header checksum written and ignored for magic 0, verified
for magic 1/2), concatenated zstd frames. Every codec refuses to inflate past
max_uncompressed_bytes (decompression bombs) and maps corrupt input to
CompressionError.
"""

import gzip
import os
import zlib

import aiokafka.codec as aio
import kafka.codec as kp
import lz4.frame
import pytest
import xxhash
import zstandard

from kref.records.compression import (
    XERIAL_HEADER,
    CompressionType,
    compress,
    decompress,
    xxh32,
)
from kref.records.errors import (
    CompressionError,
    CorruptRecordError,
    DecompressionLimitError,
    UnsupportedCompressionError,
)

CODECS = [c for c in CompressionType if c != CompressionType.NONE]
PAYLOADS = [b"", b"x", os.urandom(1000), b"abc" * 50_000, os.urandom(100_000) + b"\0" * 100_000]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize("data", PAYLOADS, ids=lambda d: str(len(d)))
def test_roundtrip(codec, data):
    assert decompress(codec, compress(codec, data)) == data


ORACLE_ENCODERS = {
    CompressionType.GZIP: [kp.gzip_encode, aio.gzip_encode],
    CompressionType.SNAPPY: [kp.snappy_encode, aio.snappy_encode,
                             lambda d: aio.snappy_encode(d, xerial_compatible=False)],
    CompressionType.LZ4: [kp.lz4_encode, aio.lz4_encode],
    CompressionType.ZSTD: [kp.zstd_encode, aio.zstd_encode],
}
ORACLE_DECODERS = {
    CompressionType.GZIP: [kp.gzip_decode, aio.gzip_decode],
    CompressionType.SNAPPY: [kp.snappy_decode, aio.snappy_decode],
    CompressionType.LZ4: [kp.lz4_decode, aio.lz4_decode],
    CompressionType.ZSTD: [kp.zstd_decode, aio.zstd_decode],
}


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_clients_encoders_decode_in_kref_and_back(codec):
    data = PAYLOADS[4]
    for encode in ORACLE_ENCODERS[codec]:
        assert decompress(codec, encode(data)) == data
    for decode in ORACLE_DECODERS[codec]:
        assert bytes(decode(compress(codec, data))) == data


def test_snappy_is_xerial_framed_and_raw_is_read_too():
    data = b"0123456789" * 10_000
    framed = compress(CompressionType.SNAPPY, data)
    assert framed.startswith(XERIAL_HEADER)
    assert decompress(CompressionType.SNAPPY, kp.snappy_encode(data, xerial_compatible=False)) == data
    # two concatenated xerial streams read as one, as xerial's reader does
    assert decompress(CompressionType.SNAPPY, framed + framed) == data + data


def test_gzip_concatenated_members():
    assert decompress(CompressionType.GZIP, gzip.compress(b"ab") + gzip.compress(b"cd")) == b"abcd"


def test_zstd_concatenated_frames():
    z = zstandard.ZstdCompressor()
    assert decompress(CompressionType.ZSTD, z.compress(b"ab") + z.compress(b"cd")) == b"abcd"


def test_lz4_frame_is_what_kafka_writes():
    framed = compress(CompressionType.LZ4, b"k" * 200_000)
    assert framed[:4] == b"\x04\x22\x4d\x18"
    assert framed[4] == 0x60  # version 1, independent blocks, no size, no content checksum
    assert framed[5] == 0x40  # 64 KiB blocks


def test_lz4_broken_header_checksum_kafka_3160():
    data = os.urandom(5000) * 3
    # kafka-python writes the pre-0.10 broken HC for old brokers (magic 0)
    old = kp.lz4_encode_old_kafka(data)
    assert decompress(CompressionType.LZ4, old, magic=0) == data
    with pytest.raises(CompressionError, match="checksum"):
        decompress(CompressionType.LZ4, old, magic=1)
    ours = compress(CompressionType.LZ4, data, magic=0)
    assert kp.lz4_decode_old_kafka(ours) == data
    with pytest.raises(CompressionError):
        decompress(CompressionType.LZ4, ours, magic=2)


def test_lz4_dependent_blocks_are_rejected_like_kafka():
    linked = lz4.frame.compress(b"abc" * 100_000, block_linked=True)
    with pytest.raises(UnsupportedCompressionError, match="dependent"):
        decompress(CompressionType.LZ4, linked)


@pytest.mark.parametrize("n", [0, 1, 3, 4, 15, 16, 17, 31, 32, 33, 100])
def test_xxh32_matches_reference(n):
    data = os.urandom(n)
    assert xxh32(data) == xxhash.xxh32(data).intdigest()
    assert xxh32(data, 7) == xxhash.xxh32(data, seed=7).intdigest()


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_decompression_bomb_is_refused(codec):
    bomb = compress(codec, b"\0" * (64 << 20))
    assert len(bomb) < (4 << 20)
    with pytest.raises(DecompressionLimitError):
        decompress(codec, bomb, max_uncompressed_bytes=1 << 20)
    # exactly at the bound is fine
    assert len(decompress(codec, compress(codec, b"\0" * 1000), max_uncompressed_bytes=1000)) == 1000


def test_raw_snappy_bomb_is_refused_from_its_length_prefix():
    # A raw block claiming 2^31 bytes is refused before anything is allocated.
    claim = bytes([0x80, 0x80, 0x80, 0x80, 0x08]) + b"\0" * 10
    with pytest.raises(DecompressionLimitError):
        decompress(CompressionType.SNAPPY, claim, max_uncompressed_bytes=1 << 20)


def test_zstd_frame_declaring_huge_content_size_is_refused():
    frame = zstandard.ZstdCompressor(write_content_size=True).compress(b"\0" * (8 << 20))
    with pytest.raises(DecompressionLimitError):
        decompress(CompressionType.ZSTD, frame, max_uncompressed_bytes=1 << 20)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_truncated_and_garbage_input_is_a_compression_error(codec):
    data = os.urandom(3000) + b"z" * 3000
    framed = compress(codec, data)
    for bad in (framed[: len(framed) // 2], framed[:-1], b"", b"\x00" * 40, os.urandom(64)):
        try:
            out = decompress(codec, bad)
        except CompressionError:
            continue
        # Raw snappy has no checksum: garbage may decode; it must not equal the original.
        assert codec == CompressionType.SNAPPY and out != data


def test_unknown_codec():
    for codec in (5, 6, 7):
        with pytest.raises(UnsupportedCompressionError):
            decompress(codec, b"abc")
    assert issubclass(UnsupportedCompressionError, CorruptRecordError)


def test_gzip_level_is_kafkas_default():
    data = b"hello " * 1000
    assert zlib.decompress(compress(CompressionType.GZIP, data), 31) == data


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_bomb_allocation_stays_near_the_bound(codec):
    """The bound is on memory, not just on the returned size: refusing a bomb
    whose full output would be 32 MiB, with a 512 KiB bound, allocates a few MiB."""
    import tracemalloc

    bomb = compress(codec, b"\0" * (32 << 20))
    tracemalloc.start()
    try:
        with pytest.raises(DecompressionLimitError):
            decompress(codec, bomb, max_uncompressed_bytes=512 << 10)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 6 << 20, f"{peak} bytes allocated to refuse a bomb with a 512 KiB bound"
