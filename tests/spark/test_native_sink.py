"""The sink's columnar fast path (kref/spark/native_sink.py, kref/spark/_csink.c).

* the C encoder equals the pure-Python reference (kref/records/batch.py)
  byte for byte: hypothesis cases with nulls, empty values, string columns,
  sliced arrays (non-zero offsets), big values and small batch bounds; and
  so do its batches compressed (compress_batch) for each of Kafka's codecs;
* against a real broker, read back with a real consumer: the fast path
  writes exactly what the librdkafka path writes (keys, values, partitions of
  keyed rows, null keys and values, string columns); null-key rows of one
  Arrow batch share one partition;
* a headers column (list<struct<key: string, value: binary>>): encoded in C
  equal to the reference byte for byte (null lists, empty lists, null
  values, non-ASCII keys, slices), and through a real broker and consumer
  equal to what the librdkafka path writes;
* the librdkafka path still serves partition/topic columns, column
  types the encoder does not read, rows too large for the topic, and the
  whole sink when the extension is not built;
* compression.type (gzip, snappy, lz4, zstd): the broker takes the fast
  path's compressed batches, kref's records code decodes them as fetched,
  and a real consumer reads what the librdkafka path wrote;
* broker errors mid-write: a deleted topic and a stopped broker give the
  clear errors of the librdkafka path, or the write completes at least once.

The Spark-level tests (test_spark_connector.py) run the fast path too: every
`format("kref")` write with the topic option goes through it.
"""

from __future__ import annotations

import array
import os
import random
import subprocess
import sys
import time
import uuid

import pytest

pa = pytest.importorskip("pyarrow")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from kref.spark import client, native_sink  # noqa: E402

needs_csink = pytest.mark.skipif(native_sink._csink is None, reason="kref/spark/_csink.c not built")
LIMITS = {"metadata_timeout_ms": 30_000, "flush_timeout_ms": 30_000}


def _rows(encoded):
    return [(p, data, list(array.array("i", rows))) for p, data, rows in encoded]


def _c_encode(keys, values, n_partitions, sticky, ts, max_bytes):
    return _rows(
        native_sink._csink.encode(
            None if keys is None else native_sink.column_spec(keys),
            native_sink.column_spec(values),
            len(values), n_partitions, sticky, ts, max_bytes,
        )
    )  # fmt: skip


cell = st.one_of(st.none(), st.binary(max_size=40), st.binary(min_size=200, max_size=3000))
text_cell = st.one_of(st.none(), st.text(max_size=30))


@needs_csink
@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    data=st.data(),
    n_partitions=st.integers(1, 7),
    as_text=st.booleans(),
    large=st.booleans(),
    keyed=st.booleans(),
    max_bytes=st.sampled_from([100, 500, 4000, native_sink.MAX_BATCH_BYTES]),
)
def test_c_encoder_equals_the_python_reference(data, n_partitions, as_text, large, keyed, max_bytes):
    one = text_cell if as_text else cell
    rows = data.draw(st.lists(st.tuples(one, one), max_size=40))
    if as_text:
        kind = pa.large_string() if large else pa.string()
    else:
        kind = pa.large_binary() if large else pa.binary()
    keys = pa.array([k for k, _ in rows], kind) if keyed else None
    values = pa.array([v for _, v in rows], kind)
    # A slice: the arrays' offsets into their buffers are not zero.
    start = data.draw(st.integers(0, len(rows)))
    length = data.draw(st.integers(0, len(rows) - start))
    values = values.slice(start, length)
    keys = None if keys is None else keys.slice(start, length)
    sticky = data.draw(st.integers(0, n_partitions - 1))
    ts = data.draw(st.integers(0, 1 << 42))
    expected = native_sink.encode_python(
        None if keys is None else keys.to_pylist(), values.to_pylist(), n_partitions, sticky, ts, max_bytes
    )
    assert _c_encode(keys, values, n_partitions, sticky, ts, max_bytes) == expected


@needs_csink
@pytest.mark.parametrize("codec", [1, 2, 3, 4], ids=["gzip", "snappy", "lz4", "zstd"])
@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    rows=st.lists(st.tuples(cell, cell), max_size=40),
    n_partitions=st.integers(1, 4),
    max_bytes=st.sampled_from([100, 4000, native_sink.MAX_BATCH_BYTES]),
    level=st.sampled_from([None, 1, 5]),
)
def test_compressed_batches_equal_the_python_reference(codec, rows, n_partitions, max_bytes, level):
    keys = pa.array([k for k, _ in rows], pa.binary())
    values = pa.array([v for _, v in rows], pa.binary())
    if codec == 2:
        level = None  # snappy has no level
    expected = native_sink.encode_python(
        keys.to_pylist(), values.to_pylist(), n_partitions, 0, 1234, max_bytes, compression=codec,
        compression_level=level,
    )
    got = [
        (p, native_sink.compress_batch(data, codec, level), rows_)
        for p, data, rows_ in _c_encode(keys, values, n_partitions, 0, 1234, max_bytes)
    ]
    assert got == expected
    from kref.records.memory_records import iter_batches

    for _, data, rows_ in got:
        (batch,) = iter_batches(data)
        assert batch.header.compression_type == codec
        assert [(r.key, r.value) for r in batch.records] == [rows[i] for i in rows_]


HEADERS_TYPE = pa.list_(pa.field("element", pa.struct([("key", pa.string()), ("value", pa.binary())])))
header = st.fixed_dictionaries({
    "key": st.sampled_from(["", "h", "trace-id", "clé", "键", "😀", "k" * 200]),
    "value": st.one_of(st.none(), st.binary(max_size=30)),
})  # fmt: skip


@needs_csink
@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    data=st.data(),
    n_partitions=st.integers(1, 4),
    max_bytes=st.sampled_from([100, 1000, native_sink.MAX_BATCH_BYTES]),
    codec=st.sampled_from([0, 0, 3]),
)
def test_headers_encode_equal_the_python_reference(data, n_partitions, max_bytes, codec):
    rows = data.draw(st.lists(st.tuples(cell, cell, st.one_of(st.none(), st.lists(header, max_size=6))),
                              max_size=30))
    keys = pa.array([k for k, _, _ in rows], pa.binary())
    values = pa.array([v for _, v, _ in rows], pa.binary())
    headers = pa.array([h for _, _, h in rows], HEADERS_TYPE)
    start = data.draw(st.integers(0, len(rows)))
    length = data.draw(st.integers(0, len(rows) - start))
    keys, values, headers = (a.slice(start, length) for a in (keys, values, headers))
    expected = native_sink.encode_python(
        keys.to_pylist(), values.to_pylist(), n_partitions, 0, 99, max_bytes, compression=codec,
        headers=headers.to_pylist(),
    )
    got = _rows(native_sink._csink.encode(
        native_sink.column_spec(keys), native_sink.column_spec(values), len(values), n_partitions, 0, 99, max_bytes,
        native_sink.headers_spec(headers),
    ))  # fmt: skip
    got = [(p, native_sink.compress_batch(d, codec, None) if codec else d, r) for p, d, r in got]
    assert got == expected


@needs_csink
def test_headers_the_encoder_does_not_read_go_to_librdkafka():
    spec = native_sink.headers_spec
    assert spec(pa.array([[{"key": "a", "value": b"x"}], None], HEADERS_TYPE)) is not None
    # A null struct or a null key: Kafka has no such header.
    assert spec(pa.array([[None]], HEADERS_TYPE)) is None
    assert spec(pa.array([[{"key": None, "value": b"x"}]], HEADERS_TYPE)) is None
    # Other layouts: binary keys, string values, a large list, other field names.
    binary_keys = pa.list_(pa.struct([("key", pa.binary()), ("value", pa.binary())]))
    assert spec(pa.array([[{"key": b"a", "value": b"x"}]], binary_keys)) is None
    assert spec(pa.array([[{"key": "a", "value": b"x"}]], pa.large_list(HEADERS_TYPE.value_type))) is None
    other = pa.list_(pa.struct([("name", pa.string()), ("value", pa.binary())]))
    assert spec(pa.array([[{"name": "a", "value": b"x"}]], other)) is None
    # A struct array sliced under its list: the children are read as sliced.
    pairs = pa.array([{"key": "skip", "value": b"0"}, {"key": "a", "value": b"1"}, {"key": "b", "value": None}],
                     HEADERS_TYPE.value_type).slice(1)
    headers = pa.ListArray.from_arrays(pa.array([0, 1, 2], pa.int32()), pairs)
    values = pa.array([b"v1", b"v2"])
    got = _rows(native_sink._csink.encode(None, native_sink.column_spec(values), 2, 1, 0, 5, 10_000, spec(headers)))
    assert got == native_sink.encode_python(None, values.to_pylist(), 1, 0, 5, 10_000, headers=headers.to_pylist())
    with pytest.raises(ValueError, match="outside the 2 headers"):
        bad = (None, pa.py_buffer(array.array("i", [0, 5, 6]).tobytes()), 0, 2) + spec(headers)[4:]
        native_sink._csink.encode(None, native_sink.column_spec(values), 2, 1, 0, 5, 10_000, bad)


@needs_csink
@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_a_headers_column_is_written_as_the_librdkafka_path_writes_it(broker, monkeypatch, codec):
    seed = 1260 + (codec == "zstd")
    print(f"seed {seed}")
    rng = random.Random(seed)
    batches = []
    for size in (0, 1, 300, 700):
        rows = []
        for i in range(size):
            h = rng.choice([None, [], None])
            if rng.random() < 0.6:
                h = [{"key": rng.choice(["h", "", "clé", "键-%d" % j, "😀"]),
                      "value": rng.choice([None, b"", b"v%d" % j, rng.randbytes(rng.randrange(40))])}
                     for j in range(rng.choice([1, 2, 5, 30]))]
            rows.append((f"k{rng.randrange(40)}".encode(), f"v{i}".encode(), h))
        batches.append(pa.RecordBatch.from_arrays(
            [pa.array([r[0] for r in rows], pa.binary()), pa.array([r[1] for r in rows], pa.binary()),
             pa.array([r[2] for r in rows], HEADERS_TYPE)], names=["key", "value", "headers"]))
    n = sum(b.num_rows for b in batches)
    fast, slow = broker.create_topic(2), broker.create_topic(2)
    settings = {"compression.type": codec}
    for topic, native in ((fast, True), (slow, False)):
        columns = client.SinkColumns(value="value", key="key", headers="headers", topic=topic)
        assert _write(broker, topic, batches, native=native, monkeypatch=monkeypatch, columns=columns,
                      settings=settings) == n
    got_fast, got_slow = broker.consume_all(fast, 2), broker.consume_all(slow, 2)
    assert len(got_fast) == len(got_slow) == n
    # Keyed rows: same partition, key, value and headers (each partition in row order on both paths).
    rows = lambda got: [(p, k, v, h) for p, _, k, v, h in got]  # noqa: E731
    assert rows(got_fast) == rows(got_slow)
    assert any(h is None for *_, h in got_fast) and any(h and any(v is None for _, v in h) for *_, h in got_fast)


def test_compression_settings_are_librdkafkas():
    of = native_sink.compression_of
    assert of({}) == (0, None)
    assert of({"compression.type": "none"}) == (0, None)
    assert of({"compression.type": "GZIP"}) == (1, None)
    assert of({"compression.codec": "snappy"}) == (2, None)
    assert of({"compression.type": "lz4", "compression.level": "7"}) == (3, 7)
    assert of({"compression.type": "zstd", "compression.level": "-1"}) == (4, None)
    assert of({"compression.type": "gzip", "compression.level": "12"}) == (1, 9)  # clamped, as librdkafka
    assert of({"compression.type": "snappy", "compression.level": "5"}) == (2, None)
    # Values librdkafka refuses: its path takes the task and reports them.
    assert of({"compression.type": "brotli"}) is None
    assert of({"compression.type": "gzip", "compression.level": "13"}) is None
    assert of({"compression.type": "gzip", "compression.level": "high"}) is None


@needs_csink
def test_murmur2_is_kafkas():
    # Values from Kafka's UtilsTest (murmur2 of these strings' bytes).
    for text, want in [("21", -973932308), ("foobar", -790332482), ("a-little-bit-long-string", -985981536),
                       ("a-little-bit-longer-string", -1486304829),
                       ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971), ("abc", 479470107)]:
        got = native_sink.murmur2(text.encode())
        signed = got - (1 << 32) if got >= 1 << 31 else got
        assert signed == want, text
        assert native_sink._csink.murmur2(text.encode()) == native_sink.murmur2(text.encode())


@needs_csink
def test_crc32c_both_paths_equal_the_crc32c_package():
    import crc32c

    rng = random.Random(1208)
    for size in [0, 1, 7, 8, 9, 63, 64, 65, 1000, 4099]:
        data = rng.randbytes(size)
        for offset in (0, 1, 3):  # unaligned starts
            view = memoryview(data)[offset:]
            want = crc32c.crc32c(view)
            assert native_sink._csink.crc32c(view) == want
            assert native_sink._csink.crc32c(view, True) == want


@needs_csink
def test_encoder_refuses_buffers_that_do_not_hold_the_rows():
    values = pa.array([b"a", b"bc"])
    validity, offsets, data = values.buffers()
    with pytest.raises(ValueError, match="offsets buffer shorter"):
        native_sink._csink.encode(None, (None, offsets, data, 0, 4), 5, 1, 0, 0, 1000)
    with pytest.raises(ValueError, match="offsets buffer shorter"):  # int32 offsets read as int64
        native_sink._csink.encode(None, (None, offsets, data, 0, 8), 2, 1, 0, 0, 1000)
    bad = pa.py_buffer(array.array("i", [0, 1, 99]).tobytes())
    with pytest.raises(ValueError, match="outside its"):
        native_sink._csink.encode(None, (None, bad, data, 0, 4), 2, 1, 0, 0, 1000)
    with pytest.raises(ValueError, match="partition"):
        native_sink._csink.encode(None, native_sink.column_spec(values), 2, 2, 2, 0, 1000)


@pytest.mark.parametrize("version", range(3, 9))
def test_produce_request_is_what_kio_writes(version):
    """The hand-written ProduceRequest frame equals kio's (the schemas' own writer)."""
    import datetime
    import importlib

    from kio.static.primitive import i16, i32, i32Timedelta

    from kref.protocol.codec import encode_request

    m = importlib.import_module(f"kio.schema.produce.v{version}.request")
    partitions = [(0, b"first batch"), (7, b""), (2, bytes(range(256)) * 3)]
    body = m.ProduceRequest(
        transactional_id=None,
        acks=i16(-1),
        timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=30_000)),
        topic_data=(
            m.TopicProduceData(
                name="t\u00e9",
                partition_data=tuple(m.PartitionProduceData(index=i32(p), records=r) for p, r in partitions),
            ),
        ),
    )
    mine = native_sink.produce_request(41, version, -1, 30_000, "t\u00e9".encode(), partitions)
    assert mine == encode_request(body, 41, "kref-spark")


# --- against a real broker ----------------------------------------------------------


def _write(broker, topic, batches, *, native: bool, monkeypatch, columns=None, settings=None, **limits):
    monkeypatch.setattr(native_sink, "ENABLED", native)
    columns = columns or client.SinkColumns(value="value", key="key", topic=topic)
    try:
        cfg = {"bootstrap.servers": broker.bootstrap, **(settings or {})}
        return client.write_batches(cfg, columns, batches, **{**LIMITS, **limits})
    finally:
        client._producers.take(())  # each write starts without a pooled producer


def _mixed_batches(seed: int, as_text: bool):
    rng = random.Random(seed)
    out = []
    for size in (0, 1, 37, 500):
        keys, values = [], []
        for i in range(size):
            keys.append(None if rng.random() < 0.2 else f"key-{rng.randrange(50)}")
            roll = rng.random()
            values.append(None if roll < 0.1 else "" if roll < 0.2 else f"v{i}-" + "x" * rng.randrange(300))
        kind = pa.string() if as_text else pa.binary()
        if not as_text:
            keys = [None if k is None else k.encode() for k in keys]
            values = [None if v is None else v.encode() for v in values]
        arrays = [pa.array(keys, kind), pa.array(values, kind)]
        out.append(pa.RecordBatch.from_arrays(arrays, names=["key", "value"]))
    return out


@needs_csink
@pytest.mark.parametrize("as_text", [False, True])
def test_fast_path_writes_what_the_librdkafka_path_writes(broker, monkeypatch, as_text):
    seed = 1200 + as_text
    print(f"seed {seed}")
    _, _, got_fast = _both_paths_write_the_same(broker, _mixed_batches(seed, as_text), 3, monkeypatch)
    assert any(k is None for _, _, k, _, _ in got_fast) and any(v is None for _, _, _, v, _ in got_fast)


def _both_paths_write_the_same(broker, batches, partitions: int, monkeypatch, settings=None):
    """Write `batches` to a new topic through each path, read both back with a
    real consumer and check they hold the same rows: (fast topic, slow topic,
    the fast topic's rows)."""
    n = sum(b.num_rows for b in batches)
    fast, slow = broker.create_topic(partitions), broker.create_topic(partitions)
    assert _write(broker, fast, batches, native=True, monkeypatch=monkeypatch, settings=settings) == n
    assert _write(broker, slow, batches, native=False, monkeypatch=monkeypatch, settings=settings) == n
    got_fast, got_slow = broker.consume_all(fast, partitions), broker.consume_all(slow, partitions)
    assert len(got_fast) == len(got_slow) == n
    # Keyed rows: the same partition on both paths (murmur2); every row: the
    # same key and value. Null-key rows may land anywhere on either path.
    keyed = lambda got: sorted(((p, k, v) for p, _, k, v, _ in got if k is not None), key=repr)  # noqa: E731
    assert keyed(got_fast) == keyed(got_slow)
    pairs = lambda got: sorted(((k, v) for _, _, k, v, _ in got), key=repr)  # noqa: E731
    assert pairs(got_fast) == pairs(got_slow)
    return fast, slow, got_fast


def _fetch_batches(broker, topic: str, partitions: int):
    """Every stored batch of the topic, fetched raw and decoded by kref's records code."""
    from kref.protocol.codec import response_class
    from kref.records.memory_records import iter_batches
    from kref.spark import native_source, wire

    brokers = wire.Brokers(broker.bootstrap)
    out = []
    try:
        leaders = brokers.leaders(topic, refresh=True)
        for p in range(partitions):
            offset = 0
            while True:
                conn = brokers.connection(leaders[p])
                answer = conn.request(native_source._fetch_request(topic, p, offset, 0), response_class(1, 12))
                data = answer.responses[0].partitions[0]
                assert data.error_code == 0
                got = list(iter_batches(data.records or b"", allow_partial_tail=True))
                if not got:
                    break
                out.extend(got)
                offset = got[-1].header.last_offset + 1
    finally:
        brokers.close()
    return out


@needs_csink
@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_writes_equal_the_librdkafka_paths(broker, monkeypatch, codec):
    seed = 1220 + ["gzip", "snappy", "lz4", "zstd"].index(codec)
    print(f"seed {seed}")
    settings = {"compression.type": codec}
    assert native_sink.usable(settings | {"bootstrap.servers": broker.bootstrap})
    batches = _mixed_batches(seed, as_text=False)
    n = sum(b.num_rows for b in batches)
    # Through a real consumer (librdkafka decompresses): the same rows.
    fast, slow, got_fast = _both_paths_write_the_same(broker, batches, 2, monkeypatch, settings)
    # As stored: compressed batches with the codec, decoded by kref (CRC checked).
    want = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}[codec]
    for topic in (fast, slow):
        stored = _fetch_batches(broker, topic, 2)
        assert stored and all(b.header.compression_type == want for b in stored), topic
        assert sum(len(b.records) for b in stored) == n
    assert sorted(((r.key, r.value) for b in _fetch_batches(broker, fast, 2) for r in b.records), key=repr) == \
        sorted(((k, v) for _, _, k, v, _ in got_fast), key=repr)


@needs_csink
def test_null_keys_of_one_arrow_batch_share_a_partition_and_rotate(broker, monkeypatch):
    topic = broker.create_topic(3)
    batches = [
        pa.RecordBatch.from_arrays([pa.array([f"{b}-{i}".encode() for i in range(20)])], names=["value"])
        for b in range(3)
    ]
    columns = client.SinkColumns(value="value", topic=topic)
    assert _write(broker, topic, batches, native=True, monkeypatch=monkeypatch, columns=columns) == 60
    got = broker.consume_all(topic, 3)
    partition_of_batch = {}
    for p, _, _, v, _ in got:
        partition_of_batch.setdefault(v.split(b"-")[0], set()).add(p)
    assert all(len(ps) == 1 for ps in partition_of_batch.values()), partition_of_batch
    assert len({next(iter(ps)) for ps in partition_of_batch.values()}) == 3  # rotating


@needs_csink
def test_fallback_serves_what_the_fast_path_does_not(broker, monkeypatch):
    monkeypatch.setattr(native_sink, "ENABLED", True)
    topic = broker.create_topic(2)
    cfg = {"bootstrap.servers": broker.bootstrap}

    def sink(**columns):
        return client.BatchProducer(cfg, client.SinkColumns(value="value", **columns), **LIMITS)

    assert sink(topic=topic).native is not None
    assert sink(topic=topic, key="key").native is not None
    assert sink(topic_column="topic").native is None
    assert sink(topic=topic, partition="partition").native is None
    assert sink(topic=topic, headers="headers").native is not None
    monkeypatch.setattr(native_sink, "ENABLED", False)
    assert sink(topic=topic).native is None
    monkeypatch.setattr(native_sink, "ENABLED", True)
    # Client settings the fast path does not serve: librdkafka.
    plain_columns = client.SinkColumns(value="value", topic=topic)
    assert client.BatchProducer({**cfg, "acks": "0"}, plain_columns, **LIMITS).native is None
    assert client.BatchProducer({**cfg, "compression.type": "brotli"}, plain_columns, **LIMITS).native is None
    assert client.BatchProducer({**cfg, "compression.type": "lz4"}, plain_columns, **LIMITS).native._codec == 3
    assert client.BatchProducer({**cfg, "acks": "1"}, plain_columns, **LIMITS).native._acks == 1

    # A column type the encoder does not read (dictionary-encoded): that batch
    # goes to librdkafka; the next one takes the fast path again.
    large = pa.RecordBatch.from_arrays([pa.array([b"big-1", b"big-2"]).dictionary_encode()], names=["value"])
    plain = pa.RecordBatch.from_arrays([pa.array([b"plain-1"])], names=["value"])
    producer = sink(topic=topic)
    producer.write(large)
    assert producer._client is not None  # librdkafka took it
    producer.write(plain)
    assert producer.flush() == 3
    producer.native.done()
    client._producers.take(())
    assert sorted(v for *_, v, _ in broker.consume_all(topic, 2)) == [b"big-1", b"big-2", b"plain-1"]


@needs_csink
def test_rows_too_large_for_the_topic_fail_as_on_the_librdkafka_path(broker, monkeypatch):
    small = broker.create_topic(1, config={"max.message.bytes": "300"})
    big = pa.RecordBatch.from_arrays([pa.array([b"x" * 1000])], names=["value"])
    columns = client.SinkColumns(value="value", topic=small)
    with pytest.raises(client.KrefConnectorError, match=f"1 record.s. not acknowledged .*{small}-0"):
        _write(broker, small, [big], native=True, monkeypatch=monkeypatch, columns=columns)
    # A row larger than a whole batch may be goes to librdkafka before any request.
    topic = broker.create_topic(1)
    huge_row = b"y" * (native_sink.MAX_BATCH_BYTES + 10)
    huge = pa.RecordBatch.from_arrays([pa.array([huge_row, b"z"])], names=["value"])
    columns = client.SinkColumns(value="value", topic=topic)
    with pytest.raises(client.KrefConnectorError, match="1 record.s. not acknowledged|too large"):
        _write(broker, topic, [huge], native=True, monkeypatch=monkeypatch, columns=columns)


@needs_csink
def test_a_topic_deleted_mid_write_is_a_clear_error_or_written_at_least_once(broker, monkeypatch):
    from confluent_kafka.admin import AdminClient

    seed = 1207
    print(f"seed {seed}")
    topic = broker.create_topic(2)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    rows = pa.array([b"r%d" % i for i in range(2000)])

    def batches():
        for i in range(30):
            if i == 10:
                for future in admin.delete_topics([topic]).values():
                    future.result(30)
            yield pa.RecordBatch.from_arrays([rows], names=["value"])

    columns = client.SinkColumns(value="value", topic=topic)
    try:
        written = _write(broker, topic, batches(), native=True, monkeypatch=monkeypatch, columns=columns,
                         metadata_timeout_ms=5000, flush_timeout_ms=5000)
    except client.KrefConnectorError as exc:
        print(f"failed clearly: {exc}")
        assert topic in str(exc) and ("does not exist" in str(exc) or "not acknowledged" in str(exc)), exc
    else:
        # The broker auto-created the topic again: every row after the delete is there.
        print("written at least once")
        assert written == 60_000
        assert len(broker.consume_all(topic, 2)) >= 20 * 2000


@needs_csink
def test_a_broker_stopped_mid_write_fails_the_task_clearly(tmp_path, start_kref_broker, monkeypatch):
    from tests.spark.conftest import _load_kref_broker_class

    monkeypatch.setattr(native_sink, "ENABLED", True)
    handle = _load_kref_broker_class()(tmp_path).start()
    try:
        cfg = {"bootstrap.servers": handle.bootstrap}
        producer = client.BatchProducer(
            cfg, client.SinkColumns(value="value", topic=f"gone-{uuid.uuid4().hex[:6]}"),
            metadata_timeout_ms=3000, flush_timeout_ms=2000,
        )  # fmt: skip
        batch = pa.RecordBatch.from_arrays([pa.array([b"v" * 100] * 1000)], names=["value"])
        producer.write(batch)
        producer.flush()
        handle.kill()
        started = time.monotonic()
        gone = "kref broker unreachable|still unacknowledged"
        with pytest.raises(client.BrokerUnreachableError, match=gone) as failure:
            for _ in range(10):
                producer.write(batch)
            producer.flush()
        print(f"failed clearly: {failure.value}")
        assert time.monotonic() - started < 60
        producer.native.abandon()
    finally:
        handle.kill()
        client._producers.take(())


def test_without_the_extension_the_sink_uses_librdkafka(broker):
    """The .so absent (its import blocked): the sink logs one line and writes through librdkafka."""
    topic = broker.create_topic(2)
    code = f"""
import sys, logging
logging.basicConfig(level=logging.INFO)
sys.modules["kref.spark._csink"] = None  # as if never built
import pyarrow as pa
from kref.spark import client, native_sink
assert native_sink._csink is None and not native_sink.ENABLED
batch = pa.RecordBatch.from_arrays([pa.array([b"k1", None]), pa.array([b"v1", b"v2"])], names=["key", "value"])
columns = client.SinkColumns(value="value", key="key", topic={topic!r})
producer = client.BatchProducer({{"bootstrap.servers": {broker.bootstrap!r}}}, columns,
                                metadata_timeout_ms=30000, flush_timeout_ms=30000)
assert producer.native is None
producer.write(batch)
print(producer.flush())
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["2"]
    assert out.stderr.count("compiled encoder not built") == 1
    assert sorted(v for *_, v, _ in broker.consume_all(topic, 2)) == [b"v1", b"v2"]


@needs_csink
def test_connections_are_kept_after_a_clean_task_and_closed_after_a_failure(broker, monkeypatch):
    from kref.spark import wire

    topic = broker.create_topic(2)
    batch = pa.RecordBatch.from_arrays([pa.array([b"k1", b"k2"]), pa.array([b"v1", b"v2"])], names=["key", "value"])
    wire._idle.take(())  # start without an idle handle
    assert _write(broker, topic, [batch], native=True, monkeypatch=monkeypatch) == 2
    first = wire._idle.idle
    assert first is not None and first._connections  # kept, connected
    assert _write(broker, topic, [batch], native=True, monkeypatch=monkeypatch) == 2
    assert wire._idle.idle is first  # the next task borrowed it

    def failing():
        yield batch
        raise RuntimeError("the task's input failed")

    with pytest.raises(RuntimeError, match="input failed"):
        _write(broker, topic, failing(), native=True, monkeypatch=monkeypatch)
    assert wire._idle.idle is None and not first._connections  # closed, not kept
    assert len(broker.consume_all(topic, 2)) >= 6


@needs_csink
@pytest.mark.skipif(os.environ.get("KREF_SPARK_NATIVE_SINK") == "0", reason="fast path off in Spark's workers")
def test_a_spark_write_takes_the_fast_path_and_writes_what_librdkafka_writes(spark, broker, monkeypatch):
    """format("kref") with the topic option, in real Spark workers: the same
    keys, values and keyed partitions as the librdkafka path writing the same
    rows in this process; and the null-key rows of the one task's one Arrow
    batch share one partition (the fast path's sticky rule: librdkafka's
    random choice would put 30 rows on one of 3 partitions with p = 3**-29)."""
    rows = [(None if i % 4 == 0 else f"key-{i % 7}", None if i % 9 == 0 else f"value-{i}" * (i % 3))
            for i in range(120)]
    fast, slow = broker.create_topic(3), broker.create_topic(3)
    df = spark.createDataFrame(rows, "key string, value string").repartition(1)
    df.write.format("kref").option("kref.bootstrap.servers", broker.bootstrap).option(
        "topic", fast
    ).mode("append").save()
    batch = pa.RecordBatch.from_arrays(
        [pa.array([k for k, _ in rows], pa.string()), pa.array([v for _, v in rows], pa.string())],
        names=["key", "value"],
    )
    assert _write(broker, slow, [batch], native=False, monkeypatch=monkeypatch) == 120
    got_fast, got_slow = broker.consume_all(fast, 3), broker.consume_all(slow, 3)
    assert len(got_fast) == len(got_slow) == 120
    keyed = lambda got: sorted(((p, k, v) for p, _, k, v, _ in got if k is not None), key=repr)  # noqa: E731
    assert keyed(got_fast) == keyed(got_slow)
    pairs = lambda got: sorted(((k, v) for _, _, k, v, _ in got), key=repr)  # noqa: E731
    assert pairs(got_fast) == pairs(got_slow)
    assert len({p for p, _, k, _, _ in got_fast if k is None}) == 1



@needs_csink
@pytest.mark.skipif(os.environ.get("KREF_SPARK_NATIVE_SINK") == "0", reason="fast path off in Spark's workers")
def test_a_spark_write_with_headers_and_compression_takes_the_fast_path(spark, broker):
    """kafka.compression.type and a headers column, in real Spark workers: the
    rows, headers and codec read back; the null-key rows of the one task's one
    Arrow batch share a partition (the fast path's rule, not librdkafka's)."""
    rows = [(None if i % 4 == 0 else f"key-{i % 7}", f"value-{i}".encode(),
             [("n", str(i).encode()), ("clé", None)] if i % 3 == 0 else None)
            for i in range(120)]
    topic = broker.create_topic(3)
    df = spark.createDataFrame(
        rows, "key string, value binary, headers array<struct<key: string, value: binary>>"
    ).repartition(1)
    df.write.format("kref").option("kafka.bootstrap.servers", broker.bootstrap).option(
        "kafka.compression.type", "zstd").option("topic", topic).mode("append").save()
    got = broker.consume_all(topic, 3)
    assert sorted(((k, v, h) for _, _, k, v, h in got), key=repr) == sorted(
        ((None if k is None else k.encode(), v, h) for k, v, h in rows), key=repr)
    assert len({p for p, _, k, _, _ in got if k is None}) == 1
    stored = _fetch_batches(broker, topic, 3)
    assert stored and all(b.header.compression_type == 4 for b in stored)


@needs_csink
def test_batches_a_topic_finds_too_large_are_split_and_written(broker, monkeypatch):
    """A topic whose max.message.bytes is under the fast path's batch bound:
    its batches are split until they fit (as the Java producer does), keeping
    every row in its partition; only a lone row too large fails."""
    topic = broker.create_topic(2, config={"max.message.bytes": "2000"})
    keys = [None if i % 5 == 0 else b"k%d" % (i % 11) for i in range(300)]
    values = [b"v%03d-" % i + b"x" * 90 for i in range(300)]
    batch = pa.RecordBatch.from_arrays([pa.array(keys), pa.array(values)], names=["key", "value"])
    assert _write(broker, topic, [batch], native=True, monkeypatch=monkeypatch) == 300
    got = broker.consume_all(topic, 2)
    assert sorted(v for *_, v, _ in got) == sorted(values)
    slow = broker.create_topic(2)
    _write(broker, slow, [batch], native=False, monkeypatch=monkeypatch)
    keyed = lambda got: sorted(((p, k, v) for p, _, k, v, _ in got if k is not None), key=repr)  # noqa: E731
    assert keyed(got) == keyed(broker.consume_all(slow, 2))
    assert len({p for p, _, k, _, _ in got if k is None}) == 1  # one Arrow batch: one sticky partition
    # Rows that fit the topic only one by one (1,500 of its 2,000 bytes).
    big = pa.RecordBatch.from_arrays([pa.array([b"%d" % i + b"y" * 1500 for i in range(6)])], names=["value"])
    columns = client.SinkColumns(value="value", topic=topic)
    assert _write(broker, topic, [big], native=True, monkeypatch=monkeypatch, columns=columns) == 6
    assert len(broker.consume_all(topic, 2)) == 306


@needs_csink
def test_a_broker_restarted_mid_write_gets_every_row_at_least_once(tmp_path, monkeypatch):
    """The broker is killed between two Arrow batches and started again (same
    port, same log) while the task goes on: the batches sent meanwhile are
    sent again once the leaders are back, within flushTimeoutMs, and every
    row is there at least once."""
    import threading

    from tests.spark.conftest import _load_kref_broker_class

    seed = int(os.environ.get("KREF_TEST_SEED", "1214"))
    rng = random.Random(seed)
    kill_at, down_s = rng.randrange(1, 6), rng.uniform(0.5, 2.0)
    print(f"seed {seed}: kill before batch {kill_at}, down {down_s:.2f} s")
    monkeypatch.setattr(native_sink, "ENABLED", True)
    lost, really_lost = [], native_sink.NativeSink._lost
    monkeypatch.setattr(native_sink.NativeSink, "_lost", lambda self, *a: (lost.append(a[-1]), really_lost(self, *a)))
    handle = _load_kref_broker_class()(tmp_path).start()
    restarter = None
    try:
        topic = f"restart-{uuid.uuid4().hex[:6]}"
        values = [[b"%d-%d" % (b, i) for i in range(2000)] for b in range(8)]

        def batches():
            nonlocal restarter
            for b, vals in enumerate(values):
                if b == kill_at:
                    handle.kill()
                    restarter = threading.Timer(down_s, handle.start)
                    restarter.start()
                yield pa.RecordBatch.from_arrays([pa.array(vals)], names=["value"])

        columns = client.SinkColumns(value="value", topic=topic)
        written = client.write_batches({"bootstrap.servers": handle.bootstrap}, columns, batches(),
                                       metadata_timeout_ms=5000, flush_timeout_ms=60_000)
        assert written == 16_000
        assert lost, "the fast path never saw the connection go"
        print(f"lost: {lost[0]}")
        restarter.join(30)
        from tests.spark.conftest import Broker

        got = Broker(handle.bootstrap).consume_all(topic, 1)
        assert {v for *_, v, _ in got} == {v for vals in values for v in vals}
    finally:
        if restarter is not None:
            restarter.join(30)
        handle.kill()
        client._producers.take(())


@needs_csink
@pytest.mark.timeout(300)
@pytest.mark.parametrize("native", [True, False], ids=["fast-path", "librdkafka"])
def test_a_leader_killed_mid_write_on_a_cluster_loses_no_row(tmp_path, monkeypatch, native):
    """Three brokers, a topic of replication factor 3 (acks=all): a partition
    leader is killed between two Arrow batches (seeded choice). The fast path
    sees the connection go, asks for the leaders again until the controller
    has moved them, sends the lost batches to the new leaders, and every row
    is in the topic at least once; keyed rows in their murmur2 partitions."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from kref.node import local_cluster
    from tests.clusterkit import FAST_CLUSTER_SETTINGS, running_cluster, wait_unfenced, wait_until
    from tests.spark.conftest import Broker

    seed = int(os.environ.get("KREF_TEST_SEED", "1216"))
    rng = random.Random(seed)
    kill_before = rng.randrange(2, 8)
    print(f"seed {seed}: kill a leader before batch {kill_before}")
    monkeypatch.setattr(native_sink, "ENABLED", native)
    # The dead follower leaves the ISR after 3 s, so acks=all answers come
    # back within the test (Kafka's default is 30 s).
    settings = {**FAST_CLUSTER_SETTINGS, "replica.lag.time.max.ms": "3000"}
    with running_cluster(tmp_path, 1, 3, settings) as (specs, processes, _start):
        bootstrap = local_cluster.bootstrap_servers(specs)
        wait_unfenced(specs, processes)
        topic = "replicated"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.create_topics([NewTopic(topic, 4, 3)]).values():
            future.result(30)
        meta = lambda: admin.list_topics(topic, timeout=30).topics[topic].partitions  # noqa: E731
        wait_until(lambda: all(meta()[p].leader >= 0 for p in range(4)), "every partition led")
        # A leader that is not the (only) controller: without a controller no
        # ISR could shrink and no leader move, on either path.
        brokers_only = {s.node_id for s in specs if s.roles == ("broker",)}
        led = [meta()[p].leader for p in range(4)]
        victim = rng.choice(sorted({n for n in led if n in brokers_only}))
        print(f"victim: node {victim} (leaders {led})")
        keys = [[None if i % 3 == 0 else b"k%d" % (i % 101) for i in range(2000)] for _ in range(10)]
        values = [[b"%d-%d" % (b, i) for i in range(2000)] for b in range(10)]

        def batches():
            for b in range(10):
                if b == kill_before:
                    processes[victim].kill()
                    processes[victim].wait(30)
                yield pa.RecordBatch.from_arrays([pa.array(keys[b]), pa.array(values[b])], names=["key", "value"])

        lost, really_lost = [], native_sink.NativeSink._lost
        monkeypatch.setattr(native_sink.NativeSink, "_lost", lambda self, *a: (lost.append(a[-1]), really_lost(self, *a)))
        columns = client.SinkColumns(value="value", key="key", topic=topic)
        written = client.write_batches({"bootstrap.servers": bootstrap}, columns, batches(),
                                       metadata_timeout_ms=10_000, flush_timeout_ms=60_000)
        assert written == 20_000
        if native:
            assert lost, "the fast path never saw the leader go"
            print(f"first loss: {lost[0]}")
        got = Broker(bootstrap).consume_all(topic, 4, idle_s=3)
        assert {v for *_, v, _ in got} == {v for vals in values for v in vals}
        for p, _, k, _, _ in got:
            if k is not None:
                assert p == (native_sink.murmur2(k) & 0x7FFFFFFF) % 4



@needs_csink
def test_a_row_handed_to_librdkafka_keeps_its_headers(broker, monkeypatch):
    """A row larger than a batch may be goes to the librdkafka path, headers
    and all (the bound lowered here, so that librdkafka can write the row)."""
    monkeypatch.setattr(native_sink, "MAX_BATCH_BYTES", 500)
    topic = broker.create_topic(1)
    headers = [{"key": "trace-id", "value": b"t" * 100}, {"key": "clé", "value": None}]
    batch = pa.RecordBatch.from_arrays(
        [pa.array([b"big", b"small"]), pa.array([b"v" * 450, b"s"]), pa.array([headers, None], HEADERS_TYPE)],
        names=["key", "value", "headers"],
    )
    taken = []
    real = client.BatchProducer._produce_fallback
    monkeypatch.setattr(client.BatchProducer, "_produce_fallback",
                        lambda self, *rows: (taken.append(rows), real(self, *rows)))
    columns = client.SinkColumns(value="value", key="key", headers="headers", topic=topic)
    assert _write(broker, topic, [batch], native=True, monkeypatch=monkeypatch, columns=columns) == 2
    assert taken == [([b"big"], [b"v" * 450], [headers])]
    got = broker.consume_all(topic, 1)
    assert sorted((k, v, h) for _, _, k, v, h in got) == [
        (b"big", b"v" * 450, [("trace-id", b"t" * 100), ("clé", None)]), (b"small", b"s", None)]


@needs_csink
def test_split_batches_keep_their_headers(broker, monkeypatch):
    topic = broker.create_topic(1, config={"max.message.bytes": "2000"})
    headers = [[{"key": "n", "value": b"%d" % i}] if i % 3 else None for i in range(100)]
    batch = pa.RecordBatch.from_arrays(
        [pa.array([b"v%03d-" % i + b"x" * 60 for i in range(100)]), pa.array(headers, HEADERS_TYPE)],
        names=["value", "headers"],
    )
    columns = client.SinkColumns(value="value", headers="headers", topic=topic)
    assert _write(broker, topic, [batch], native=True, monkeypatch=monkeypatch, columns=columns) == 100
    got = broker.consume_all(topic, 1)
    # (Split batches may land out of order, as documented: compare sorted.)
    assert sorted((v[:4], h) for *_, v, h in got) == [
        (b"v%03d" % i, [("n", b"%d" % i)] if i % 3 else None) for i in range(100)
    ]
