"""The v2 batch header reader against batches written by kafka-python's
independent encoder (an oracle from a real Kafka client)."""

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from kref.records import header as h
from kref.records.errors import InvalidCrcError, TruncatedBatchError


def build_batch(n=3, base_offset=0):
    b = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20,
    )
    for i in range(n):
        b.append(i, timestamp=1000 + i, key=None, value=b"v%d" % i, headers=[])
    raw = bytearray(b.build())
    return raw


def test_header_fields_match_client_encoder():
    raw = build_batch(3)
    hdr = h.read_header(raw)
    assert hdr.magic == 2 and hdr.last_offset_delta == 2 and hdr.records_count == 3
    assert hdr.max_timestamp == 1002 and hdr.size_in_bytes == len(raw)
    h.verify_crc(raw, hdr)


def test_offset_and_epoch_stamping_keep_crc_valid():
    raw = build_batch(2)
    hdr = h.read_header(raw)
    h.set_base_offset(raw, hdr, 42)
    h.set_partition_leader_epoch(raw, hdr, 7)
    hdr2 = h.read_header(raw)
    assert (hdr2.base_offset, hdr2.partition_leader_epoch, hdr2.last_offset) == (42, 7, 43)
    h.verify_crc(raw, hdr2)


def test_flipped_byte_fails_crc_and_cut_batch_is_truncated():
    raw = build_batch(2)
    raw[-1] ^= 0xFF
    with pytest.raises(InvalidCrcError):
        h.verify_crc(raw, h.read_header(raw))
    with pytest.raises(TruncatedBatchError):
        h.read_header(build_batch(2)[:-1])


def test_iter_headers_walks_concatenated_batches():
    raw = build_batch(2) + build_batch(5)
    headers = list(h.iter_headers(raw, verify=True))
    assert [x.records_count for x in headers] == [2, 5]
    assert headers[1].position == headers[0].next_position


def test_log_append_time_stamp_recomputes_crc():
    raw = build_batch(2)
    h.set_log_append_time(raw, h.read_header(raw), 99_999)
    hdr = h.read_header(raw)
    assert hdr.is_log_append_time and hdr.max_timestamp == 99_999
    h.verify_crc(raw, hdr)
