"""Hypothesis properties for the record formats.

- Robustness: decoding random bytes, and valid batches/message sets that
  were mutated (bytes flipped, cut, inserted; with and without CRC checks,
  so mutations reach the record parser and the decompressors), only ever
  raises CorruptRecordError subclasses: never IndexError, struct.error,
  a codec library's own exception, or a hang/unbounded allocation.
- Stamping LogAppendTime on any batch keeps its CRC valid and every record
  reports the stamp; any COMMIT/ABORT marker round-trips.
- Round trips: any records (null/empty keys and values, headers, negative
  and large timestamps, offset gaps) survive build -> decode for every codec
  and every header field, and kafka-python's independent reader sees the
  same records; the same for legacy v0/v1 message sets.
"""

import os
import struct

import crc32c
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch as KpBatch
from kafka.record.memory_records import MemoryRecords

from kref.records import header as h
from kref.records.batch import Header, Record, build_batch, decode_batch
from kref.records.compression import CompressionType, decompress
from kref.records.control import ControlRecordType, EndTransactionMarker, build_end_transaction_marker, control_markers
from kref.records.errors import CorruptRecordError
from kref.records.legacy import LEGACY_CODECS, build_message_set, decode_legacy_batch
from kref.records.memory_records import iter_batches
from kref.records.validation import validate_records

LIMIT = 1 << 20
# KREF_FUZZ_EXAMPLES raises the effort for a long, manual fuzzing session.
FUZZ = settings(max_examples=int(os.environ.get("KREF_FUZZ_EXAMPLES", "200")), deadline=None, suppress_health_check=[HealthCheck.too_slow])

small_bytes = st.one_of(st.none(), st.binary(max_size=40))
headers = st.lists(st.builds(Header, st.text(max_size=8), small_bytes), max_size=3).map(tuple)
timestamps = st.integers(min_value=-1, max_value=(1 << 62))


def record_lists(ts=timestamps, hdrs=headers, max_size=12):
    one = st.builds(Record, offset=st.just(-1), attributes=st.just(0), timestamp=ts, key=small_bytes,
                    value=small_bytes, headers=hdrs)
    return st.lists(one, min_size=1, max_size=max_size)


records = record_lists()
no_headers = st.just(())
codecs = st.sampled_from(list(CompressionType))


def decode_all_ways(data: bytes) -> None:
    for fn in (
        lambda: decode_batch(data, max_uncompressed_bytes=LIMIT),
        lambda: decode_batch(data, max_uncompressed_bytes=LIMIT, verify_crc=False),
        lambda: decode_legacy_batch(data, max_uncompressed_bytes=LIMIT),
        lambda: decode_legacy_batch(data, max_uncompressed_bytes=LIMIT, verify_crc=False),
        lambda: list(iter_batches(data, max_uncompressed_bytes=LIMIT, verify_crc=False)),
        lambda: validate_records(data, max_batch_size=LIMIT),
    ):
        try:
            fn()
        except CorruptRecordError:
            pass


@FUZZ
@given(st.binary(max_size=300))
@example(b"\x00" * 12 + b"\xff\xff\xff\xff")
def test_random_bytes_only_raise_corrupt_record_errors(data):
    decode_all_ways(data)


@FUZZ
@given(codecs, st.binary(max_size=200))
def test_random_bytes_to_decompressors_only_raise_compression_errors(codec, data):
    for magic in (0, 2):
        try:
            decompress(codec, data, max_uncompressed_bytes=LIMIT, magic=magic)
        except CorruptRecordError:
            pass


def fix_crc(raw: bytearray) -> None:
    if len(raw) >= h.HEADER_SIZE:
        struct.pack_into(">I", raw, h.CRC_OFFSET, crc32c.crc32c(memoryview(raw)[h.ATTRIBUTES_OFFSET:]))


mutations = st.lists(
    st.tuples(st.sampled_from(["flip", "cut", "insert", "set"]), st.integers(0, 10_000), st.integers(0, 255)),
    min_size=1, max_size=4,
)


def mutate(raw: bytes, ops) -> bytearray:
    out = bytearray(raw)
    for op, where, byte in ops:
        if not out:
            break
        i = where % len(out)
        if op == "flip":
            out[i] ^= 1 << (byte % 8)
        elif op == "cut":
            del out[i:]
        elif op == "insert":
            out.insert(i, byte)
        else:
            out[i] = byte
    return out


@FUZZ
@given(records, codecs, mutations, st.booleans())
def test_mutated_batches_only_raise_corrupt_record_errors(recs, codec, ops, recompute_crc):
    raw = mutate(build_batch(recs, compression=codec), ops)
    if recompute_crc:
        fix_crc(raw)  # let the mutation through the CRC check into the records parser
    decode_all_ways(bytes(raw))


@FUZZ
@given(record_lists(hdrs=no_headers, max_size=6),
       st.sampled_from([CompressionType.NONE, *LEGACY_CODECS]), st.integers(0, 1), mutations)
def test_mutated_message_sets_only_raise_corrupt_record_errors(recs, codec, magic, ops):
    decode_all_ways(bytes(mutate(build_message_set(recs, magic=magic, compression=codec), ops)))


def as_tuples(recs, base_offset=0):
    return [(base_offset + i, r.timestamp, r.key, r.value, [(x.key, x.value) for x in r.headers])
            for i, r in enumerate(recs)]


@FUZZ
@given(records, codecs, st.integers(0, 1 << 40), st.integers(-1, 1 << 30), st.booleans(),
       st.integers(-1, (1 << 31) - 1))
def test_roundtrip_and_kafka_python_agrees(recs, codec, base_offset, leader_epoch, transactional, base_sequence):
    pid = 12345 if base_sequence >= 0 else -1
    raw = build_batch(recs, base_offset=base_offset, compression=codec, producer_id=pid,
                      producer_epoch=3 if pid >= 0 else -1, base_sequence=base_sequence if pid >= 0 else -1,
                      is_transactional=transactional and pid >= 0, partition_leader_epoch=leader_epoch)
    b = decode_batch(raw)
    assert b.compression_type == codec and b.partition_leader_epoch == leader_epoch
    assert b.base_offset == base_offset and b.last_offset == base_offset + len(recs) - 1
    assert b.max_timestamp == max(r.timestamp for r in recs)
    assert as_tuples(b.records, base_offset) == as_tuples(recs, base_offset)
    assert build_batch(b.records, base_offset=base_offset, compression=codec, producer_id=pid,
                       producer_epoch=b.producer_epoch, base_sequence=b.base_sequence,
                       is_transactional=b.is_transactional, partition_leader_epoch=leader_epoch) == raw \
        or codec != CompressionType.NONE
    kp = KpBatch(raw)
    assert kp.validate_crc()
    theirs = [(r.offset, r.timestamp, r.key, r.value, [tuple(x) for x in r.headers]) for r in kp]
    assert theirs == as_tuples(recs, base_offset)


@FUZZ
@given(record_lists(ts=st.integers(0, 1 << 50), hdrs=no_headers, max_size=8),
       st.sampled_from([CompressionType.NONE, *LEGACY_CODECS]), st.integers(0, 1), st.integers(0, 1 << 40))
def test_legacy_roundtrip_and_kafka_python_agrees(recs, codec, magic, base_offset):
    raw = build_message_set(recs, magic=magic, compression=codec, base_offset=base_offset)
    want = [(base_offset + i, r.timestamp if magic else -1, r.key, r.value) for i, r in enumerate(recs)]
    got = [(r.offset, r.timestamp, r.key, r.value) for b in iter_batches(raw) for r in b.records]
    assert got == want
    mr = MemoryRecords(raw)
    theirs = []
    while mr.has_next():
        theirs += [(r.offset, r.timestamp if magic else -1, r.key, r.value) for r in mr.next_batch()]
    assert theirs == want


@FUZZ
@given(codecs, st.integers(-5, (1 << 31) - 1), st.binary(max_size=200), st.booleans())
def test_random_records_section_behind_a_valid_header(codec, count, section, log_append_time):
    """The CRC holds, so every byte of a random records section reaches the
    decompressor and record parser, including absurd recordsCount values."""
    raw = bytearray(build_batch([Record(timestamp=1, value=b"x")], compression=CompressionType.NONE,
                                timestamp_type=int(log_append_time)))
    del raw[h.HEADER_SIZE:]
    raw += section
    struct.pack_into(">i", raw, 8, len(raw) - h.LOG_OVERHEAD)
    struct.pack_into(">h", raw, h.ATTRIBUTES_OFFSET, int(codec) | (h.TIMESTAMP_TYPE_MASK if log_append_time else 0))
    struct.pack_into(">i", raw, 57, count)
    fix_crc(raw)
    decode_all_ways(bytes(raw))


@FUZZ
@given(records, codecs, st.integers(0, 1 << 50))
def test_log_append_time_stamping_keeps_crc_and_reports_max_timestamp(recs, codec, now_ms):
    raw = bytearray(build_batch(recs, compression=codec))
    h.set_log_append_time(raw, h.read_header(raw), now_ms)
    b = decode_batch(raw)  # verifies the recomputed CRC
    assert b.timestamp_type == 1 and b.max_timestamp == now_ms
    assert all(r.timestamp == now_ms for r in b.records)
    assert [(r.key, r.value) for r in b.records] == [(r.key, r.value) for r in recs]
    kp = KpBatch(bytes(raw))
    assert kp.validate_crc() and [r.timestamp for r in kp] == [now_ms] * len(recs)


@FUZZ
@given(st.sampled_from([ControlRecordType.COMMIT, ControlRecordType.ABORT]), st.integers(0, (1 << 63) - 1),
       st.integers(0, (1 << 15) - 1), st.integers(-1, (1 << 31) - 1), st.integers(0, 1 << 50))
def test_control_marker_roundtrip(kind, producer_id, producer_epoch, coordinator_epoch, base_offset):
    raw = build_end_transaction_marker(kind, producer_id=producer_id, producer_epoch=producer_epoch,
                                       coordinator_epoch=coordinator_epoch, timestamp=5, base_offset=base_offset)
    b = decode_batch(raw)
    assert b.is_control_batch and b.is_transactional and (b.producer_id, b.producer_epoch) == (producer_id, producer_epoch)
    assert control_markers(b) == [EndTransactionMarker(kind, coordinator_epoch)]
    [rec] = list(KpBatch(raw))
    assert rec.type == int(kind) and rec.offset == base_offset
