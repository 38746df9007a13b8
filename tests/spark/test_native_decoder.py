"""The reader's columnar decoder (kref/spark/_csource.c) against its pure-Python
reference (native_source.decode_reference, on kref/records), column for column.

No broker and no Spark here: record batches are built with kref/records
(every shape a Fetch response can hold: plain, null and empty keys and
values, CreateTime and LogAppendTime, control batches, compaction gaps,
each compression codec, a partial tail, a legacy v0/v1 message set,
malformed records) and both decoders must give the same Arrow columns and
the same next offset, or both refuse (Fallback). The compiled module is the
package's when built, else compiled into a temporary directory here
(scripts/build_cwalker.py). tests/spark/test_native_source.py compares the
whole fast path with the librdkafka path on a real broker.
"""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from kref.records.batch import Header, Record, build_batch
from kref.records.compression import CompressionType
from kref.records.control import ControlRecordType, build_end_transaction_marker
from kref.records.legacy import build_message_set
from kref.spark import native_source
from kref.spark.native_source import ArrowColumns, Fallback, decode_columns, decode_reference
from tests.compiled import built_or_compiled

SCHEMA = pa.schema([
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
    ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32()),
])  # fmt: skip
# includeHeaders=true: Spark's array<struct<key: string, value: binary>> as
# pyspark's to_arrow_schema gives it.
HEADERS_SCHEMA = SCHEMA.append(pa.field("headers", pa.list_(pa.field("element", pa.struct([
    ("key", pa.string()), ("value", pa.binary())])))))  # fmt: skip


@pytest.fixture(scope="module")
def csource(tmp_path_factory):
    return built_or_compiled(native_source._csource, "kref/spark/_csource.c", "kref.spark._csource",
                             tmp_path_factory.mktemp("csource"))


@pytest.fixture
def compiled(csource, monkeypatch):
    monkeypatch.setattr(native_source, "_csource", csource)


def native(buf: bytes, from_offset: int, until_offset: int, schema=SCHEMA):
    columns = ArrowColumns(schema, "t", 3)
    chunks, next_offset = decode_columns(buf, from_offset, until_offset, columns.headers)
    batches = [columns.batch(c) for c in chunks]
    for b in batches:
        b.validate(full=True)  # offsets, bitmaps and UTF-8 as Arrow requires
    table = pa.Table.from_batches(batches, schema=schema)
    return table.combine_chunks(), next_offset


def same(buf: bytes, from_offset: int = 0, until_offset: int = 1 << 62, schema=SCHEMA) -> pa.Table:
    if schema is SCHEMA:
        same(buf, from_offset, until_offset, HEADERS_SCHEMA)  # every case with headers too
    try:
        ref, ref_next = decode_reference(buf, from_offset, until_offset, schema, "t", 3)
    except Fallback:
        with pytest.raises(Fallback):
            native(buf, from_offset, until_offset, schema)
        return None
    got, got_next = native(buf, from_offset, until_offset, schema)
    ref = pa.Table.from_batches([ref]).combine_chunks()
    for name in schema.names:
        assert got.column(name).to_pylist() == ref.column(name).to_pylist(), name
    assert got.equals(ref)
    assert got_next == ref_next
    return got


def recs(n: int, start: int = 0, ts: int = 1_700_000_000_000, **kw) -> list[Record]:
    return [Record(start + i, ts + i, b"k%d" % i, b"v" * (i % 7) + b"%d" % i, **kw) for i in range(n)]


def test_plain_batches_and_range_bounds(compiled):
    buf = build_batch(recs(50)) + build_batch(recs(30, 50), base_offset=50) + build_batch(recs(20, 80), base_offset=80)
    table = same(buf)
    assert table.column("offset").to_pylist() == list(range(100))
    assert table.column("timestampType").to_pylist() == [0] * 100
    for lo, hi in [(0, 1), (10, 60), (49, 50), (50, 80), (79, 81), (99, 100), (100, 200), (5, 5)]:
        got = same(buf, lo, hi)
        assert got.column("offset").to_pylist() == list(range(lo, min(hi, 100)))
    _, nxt = native(buf, 0, 60)
    assert nxt == 80  # the batch starting at 80 >= until is not walked


def test_null_and_empty_keys_and_values(compiled):
    records = [Record(0, 5, None, None), Record(1, 6, b"", b""), Record(2, 7, None, b"x"),
               Record(3, 8, b"k", None), Record(4, -1, b"k" * 300, b"v" * 70_000)]
    got = same(build_batch(records))
    assert got.column("key").to_pylist() == [None, b"", None, b"k", b"k" * 300]
    assert got.column("value").null_count == 2
    only_nulls = same(build_batch([Record(0, 5, None, None), Record(1, 5, None, None)]))
    assert only_nulls.column("key").null_count == 2


def test_log_append_time_reports_max_timestamp(compiled):
    buf = build_batch(recs(10), timestamp_type=1, max_timestamp=1_800_000_000_123)
    got = same(buf)
    assert got.column("timestampType").to_pylist() == [1] * 10
    assert set(got.column("timestamp").cast(pa.int64()).to_pylist()) == {1_800_000_000_123_000}


def test_control_batches_skipped_but_counted(compiled):
    marker = build_end_transaction_marker(ControlRecordType.ABORT, producer_id=7, producer_epoch=0, coordinator_epoch=0,
                                          base_offset=10, timestamp=1)
    buf = build_batch(recs(10), producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True)
    buf += marker + build_batch(recs(5, 11), base_offset=11)
    got = same(buf)
    assert got.column("offset").to_pylist() == list(range(10)) + list(range(11, 16))
    assert native(buf + b"", 10, 11)[0].num_rows == 0
    assert native(buf, 10, 11)[1] == 11


def test_compaction_gaps(compiled):
    kept = [Record(o, 100 + o, b"k%d" % o, b"v") for o in (0, 3, 4, 9)]
    buf = build_batch(kept) + build_batch([], base_offset=10, last_offset_delta=4)
    buf += build_batch([Record(20, 5, b"a", b"b")], base_offset=20)
    got = same(buf)
    assert got.column("offset").to_pylist() == [0, 3, 4, 9, 20]
    assert native(buf, 1, 15)[0].column("offset").to_pylist() == [3, 4, 9]
    assert native(buf, 0, 1 << 40)[1] == 21


@pytest.mark.parametrize("codec", [c for c in CompressionType if c != CompressionType.NONE])
def test_each_codec_between_plain_batches(compiled, codec):
    buf = build_batch(recs(20)) + build_batch(recs(40, 20), base_offset=20, compression=codec)
    buf += build_batch(recs(10, 60), base_offset=60)
    got = same(buf)
    assert got.column("offset").to_pylist() == list(range(70))
    assert same(buf, 25, 65).num_rows == 40


def test_partial_tail_ends_the_walk(compiled):
    whole = build_batch(recs(10)) + build_batch(recs(10, 10), base_offset=10)
    for cut in (len(whole) - 1, len(whole) - 40, len(whole) - (len(whole) // 2) + 5, 5):
        got = same(whole[:cut])
        assert got.num_rows in (0, 10)


def test_legacy_message_sets_fall_back(compiled):
    for magic in (0, 1):
        legacy = build_message_set([Record(-1, 1000, b"k", b"v")] * 3, magic=magic)
        with pytest.raises(Fallback):
            native(legacy, 0, 100)
        with pytest.raises(Fallback):
            native(build_batch(recs(3)) + legacy, 0, 100)


def test_malformed_records_fall_back(compiled):
    good = bytearray(build_batch(recs(5)))
    rng = random.Random(1214)
    print("seed 1214")
    for _ in range(300):
        bad = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            bad[rng.randrange(61, len(bad))] = rng.randrange(256)
        same(bytes(bad))  # same columns, or both Fallback


def test_headers_are_passed_over(compiled):
    buf = build_batch([Record(0, 1, b"k", b"v", (Header("h", b"x"), Header("n", None)))] * 1)
    assert same(buf).num_rows == 1


def _with_headers(seed: int, n: int) -> list[Record]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        headers = []
        for j in range(rng.choice([0, 0, 1, 2, 5, 40])):
            key = rng.choice(["", "h", "trace-id", "clé", "键\u00e9-%d" % j, "😀", "x" * 300])
            value = rng.choice([None, b"", b"v%d" % j, bytes(rng.randrange(256) for _ in range(rng.randrange(90)))])
            headers.append(Header(key, value))
        out.append(Record(i, 10 + i, b"k%d" % i, b"v%d" % i, tuple(headers)))
    return out


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.GZIP, CompressionType.ZSTD])
def test_headers_column_equals_the_reference(compiled, codec):
    seed = 1240 + int(codec)
    print(f"seed {seed}")
    records = _with_headers(seed, 300)
    buf = build_batch(records[:100], compression=codec)
    buf += build_batch(records[100:], base_offset=100, compression=codec)
    for lo, hi in [(0, 1 << 62), (0, 1), (3, 97), (99, 101), (150, 300), (299, 300), (300, 400)]:
        got = same(buf, lo, hi, HEADERS_SCHEMA)
        want = [
            [{"key": h.key, "value": h.value} for h in r.headers] or None
            for r in records[lo:min(hi, 300)]
        ]
        assert got.column("headers").to_pylist() == want
    got = same(buf, schema=HEADERS_SCHEMA)
    headers = got.column("headers")
    assert headers.null_count == sum(1 for r in records if not r.headers)  # no headers: null, as Spark gives it
    assert any(r.headers and any(h.value is None for h in r.headers) for r in records)


def test_only_records_without_headers_and_only_null_values(compiled):
    got = same(build_batch(recs(5)), schema=HEADERS_SCHEMA)
    assert got.column("headers").to_pylist() == [None] * 5
    one = build_batch([Record(0, 1, None, None, (Header("a", None), Header("b", None)))])
    assert same(one, schema=HEADERS_SCHEMA).column("headers").to_pylist() == [
        [{"key": "a", "value": None}, {"key": "b", "value": None}]
    ]


def test_a_header_key_that_is_not_utf8_falls_back(compiled):
    for raw in (b"\xff", b"ok\xc3", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf4\x90\x80\x80"):
        key = raw.decode("utf-8", "surrogateescape")
        buf = build_batch([Record(0, 1, b"k", b"v", (Header(key, b"x"),))])
        with pytest.raises(Fallback):
            native(buf, 0, 10, HEADERS_SCHEMA)
        same(buf)  # without headers the record decodes; with them both refuse
    # Valid 2-, 3- and 4-byte forms at the edges of their ranges.
    for key in ["\u0080", "\u07ff", "\u0800", "\ud7ff", "\ue000", "\uffff", "\U00010000", "\U0010ffff"]:
        got = same(build_batch([Record(0, 1, b"k", b"v", (Header(key, b"x"),))]), schema=HEADERS_SCHEMA)
        assert got.column("headers").to_pylist() == [[{"key": key, "value": b"x"}]]


def test_next_fetch_offset_reads_headers_only():
    buf = build_batch(recs(10)) + build_batch(recs(5, 10), base_offset=10)
    assert native_source.next_fetch_offset(buf, 0) == 15
    assert native_source.next_fetch_offset(buf[:-1], 0) == 10
    assert native_source.next_fetch_offset(b"", 7) == 7
