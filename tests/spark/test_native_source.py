"""The reader's columnar fast path against the librdkafka path, on a real broker.

Every read here is done twice, by client.read_range with fetch_path="auto"
(Fetch + _csource, kref/spark/native_source.py) and with "librdkafka" (the
reference), and the two must give the same Arrow columns, row for row: plain
keyed records over several batches and partitions with sub-ranges, null and
empty keys and values, each compression codec librdkafka and kref share,
LogAppendTime topics, record headers (includeHeaders: null values, records
without headers, many headers, non-ASCII keys), compacted topics (offset gaps left by the cleaner),
a planned end above the high watermark and a start below the log start
offset (data loss, both failOnDataLoss settings), and real Spark reads. The
fast path must really be taken where it should (native_source.read returns
None: it read the whole range itself), and hand over to librdkafka where it
should (a start below log_start_offset: OFFSET_OUT_OF_RANGE). Without the
compiled decoder every read takes the librdkafka path.

Transactions: kref has no transaction coordinator (producers' transactional
batches and control batches are refused, tests/clients/test_transactions_refused.py),
so no live topic holds markers or aborted records; control batches,
transactional batches and the aborted-transactions fallback are covered by
tests/spark/test_native_decoder.py and the read loop's check of
aborted_transactions under read_committed (documented in docs/spark.md).
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from kref.spark import client, native_source

pytest.importorskip("pyspark")

pytestmark = pytest.mark.skipif(not native_source.available(),
                                reason="the reader's decoder is not built (python scripts/build_cwalker.py)")


@pytest.fixture(scope="module")
def arrow_schema():
    from pyspark.sql.pandas.types import to_arrow_schema

    from kref.spark.source import kafka_schema

    return to_arrow_schema(kafka_schema(False), timezone="UTC")


@pytest.fixture(scope="module")
def headers_schema():
    from pyspark.sql.pandas.types import to_arrow_schema

    from kref.spark.source import kafka_schema

    return to_arrow_schema(kafka_schema(True), timezone="UTC")


def read(broker, arrow_schema, topic, partition, lo, hi, *, path, rows_per_batch=500,
         fail_on_data_loss=True, bootstrap=None, **config):
    batches = list(client.read_range(
        {"bootstrap.servers": bootstrap or broker.bootstrap, **config}, topic, partition, lo, hi,
        fail_on_data_loss=fail_on_data_loss, poll_timeout_ms=30_000, include_headers=False,
        rows_per_batch=rows_per_batch, arrow_schema=arrow_schema, fetch_path=path,
    ))  # fmt: skip
    assert all(b.num_rows <= rows_per_batch for b in batches)
    return pa.Table.from_batches(batches, schema=arrow_schema).combine_chunks()


def fast_path_reads_all(broker, arrow_schema, topic, partition, lo, hi, bootstrap=None) -> bool:
    """True when native_source.read read [lo, hi) itself (no hand-over to librdkafka)."""
    gen = native_source.read({"bootstrap.servers": bootstrap or broker.bootstrap}, topic, partition, lo, hi,
                             fail_on_data_loss=True, rows_per_batch=1000, arrow_schema=arrow_schema,
                             timeout_ms=30_000)
    while True:
        try:
            next(gen)
        except StopIteration as done:
            return done.value is None


def same_both_ways(broker, arrow_schema, topic, partition, lo, hi, **kw) -> pa.Table:
    fast = read(broker, arrow_schema, topic, partition, lo, hi, path="auto", **kw)
    ref = read(broker, arrow_schema, topic, partition, lo, hi, path="librdkafka", **kw)
    for name in arrow_schema.names:
        assert fast.column(name).to_pylist() == ref.column(name).to_pylist(), name
    assert fast.equals(ref)
    return fast


def produce(bootstrap, topic, records, **config):
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, **config})
    for key, value, partition in records:
        producer.produce(topic, value=value, key=key, partition=partition)
    assert producer.flush(30) == 0


def test_plain_records_subranges_and_batch_sizes(broker, arrow_schema):
    topic = broker.create_topic(2)
    produce(broker.bootstrap, topic, [(b"k%d" % i, b"v" * (i % 300) + b"%d" % i, i % 2) for i in range(6000)])
    for lo, hi in [(0, 3000), (1, 2), (17, 2999), (1500, 1501), (2999, 3000)]:
        table = same_both_ways(broker, arrow_schema, topic, 0, lo, hi)
        assert table.column("offset").to_pylist() == list(range(lo, hi))
    same_both_ways(broker, arrow_schema, topic, 1, 0, 3000, rows_per_batch=7)
    assert fast_path_reads_all(broker, arrow_schema, topic, 1, 0, 3000)


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_both_isolation_levels(broker, arrow_schema, isolation):
    topic = broker.create_topic(1)
    produce(broker.bootstrap, topic, [(b"k%d" % i, b"v%d" % i, 0) for i in range(500)],
            **{"enable.idempotence": True})  # batches with a producer id and sequences
    table = same_both_ways(broker, arrow_schema, topic, 0, 0, 500, **{"isolation.level": isolation})
    assert table.num_rows == 500
    with pytest.raises(client.DataLossError, match="high watermark 500"):
        read(broker, arrow_schema, topic, 0, 0, 501, path="auto", **{"isolation.level": isolation})


def test_null_and_empty_keys_and_values(broker, arrow_schema):
    topic = broker.create_topic(1)
    records = [(None, None, 0), (b"", b"", 0), (None, b"v", 0), (b"k", None, 0)] * 50
    produce(broker.bootstrap, topic, records)
    table = same_both_ways(broker, arrow_schema, topic, 0, 0, 200)
    assert table.column("key").null_count == 100 and table.column("value").null_count == 100
    only_null_keys = broker.create_topic(1)
    produce(broker.bootstrap, only_null_keys, [(None, b"v%d" % i, 0) for i in range(10)])
    same_both_ways(broker, arrow_schema, only_null_keys, 0, 0, 10)
    assert fast_path_reads_all(broker, arrow_schema, only_null_keys, 0, 0, 10)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_each_compression_codec(broker, arrow_schema, codec):
    topic = broker.create_topic(1)
    produce(broker.bootstrap, topic, [(b"k%d" % i, b"value-%d" % i * 3, 0) for i in range(3000)],
            **{"compression.type": codec})
    same_both_ways(broker, arrow_schema, topic, 0, 0, 3000)
    same_both_ways(broker, arrow_schema, topic, 0, 1234, 2345)
    assert fast_path_reads_all(broker, arrow_schema, topic, 0, 0, 3000)


@pytest.mark.parametrize("codec", ["none", "lz4"])
def test_headers_column_equals_the_librdkafka_paths(broker, headers_schema, codec):
    import random

    from confluent_kafka import Producer

    seed = 1250 + (codec == "lz4")
    print(f"seed {seed}")
    rng = random.Random(seed)
    topic = broker.create_topic(1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5,
                         "compression.type": codec})
    sent = []
    for i in range(2000):
        headers = [
            (rng.choice(["h", "", "trace-id", "clé", "键-%d" % j, "😀"]),
             rng.choice([None, b"", b"v%d" % j, rng.randbytes(rng.randrange(60))]))
            for j in range(rng.choice([0, 0, 1, 3, 30]))
        ]
        sent.append(headers)
        producer.produce(topic, value=b"v%d" % i, key=b"k%d" % i, headers=headers or None)
    assert producer.flush(30) == 0
    for lo, hi in [(0, 2000), (5, 6), (777, 1999)]:
        table = same_both_ways(broker, headers_schema, topic, 0, lo, hi)
        want = [[{"key": k, "value": v} for k, v in h] or None for h in sent[lo:hi]]
        assert table.column("headers").to_pylist() == want
    assert fast_path_reads_all(broker, headers_schema, topic, 0, 0, 2000)
    table = same_both_ways(broker, headers_schema, topic, 0, 0, 2000)
    assert table.column("headers").null_count == sum(1 for h in sent if not h)  # no headers: null


def test_log_append_time_topic(broker, arrow_schema):
    topic = broker.create_topic(1, config={"message.timestamp.type": "LogAppendTime"})
    produce(broker.bootstrap, topic, [(b"k", b"v%d" % i, 0) for i in range(100)])
    table = same_both_ways(broker, arrow_schema, topic, 0, 0, 100)
    assert set(table.column("timestampType").to_pylist()) == {1}


def test_planned_end_beyond_the_high_watermark_is_data_loss(broker, arrow_schema):
    topic = broker.create_topic(1)
    produce(broker.bootstrap, topic, [(None, b"v%d" % i, 0) for i in range(20)])
    for path in ("auto", "librdkafka"):
        with pytest.raises(client.DataLossError, match="beyond the partition's high watermark 20"):
            read(broker, arrow_schema, topic, 0, 0, 25, path=path)
    with pytest.raises(client.DataLossError, match="high watermark 20"):  # the fast path's own check
        fast_path_reads_all(broker, arrow_schema, topic, 0, 0, 25)
    table = same_both_ways(broker, arrow_schema, topic, 0, 0, 25, fail_on_data_loss=False)
    assert table.num_rows == 20


def test_start_below_log_start_hands_over_to_librdkafka(broker, arrow_schema):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    topic = broker.create_topic(1)
    produce(broker.bootstrap, topic, [(None, b"v%d" % i, 0) for i in range(12)])
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 5)]).values():
        future.result(timeout=30)
    assert not fast_path_reads_all(broker, arrow_schema, topic, 0, 0, 12)  # OFFSET_OUT_OF_RANGE
    assert fast_path_reads_all(broker, arrow_schema, topic, 0, 5, 12)
    for path in ("auto", "librdkafka"):
        with pytest.raises(client.DataLossError, match="earliest available offset is 5"):
            read(broker, arrow_schema, topic, 0, 0, 12, path=path)
    table = same_both_ways(broker, arrow_schema, topic, 0, 0, 12, fail_on_data_loss=False)
    assert table.column("offset").to_pylist() == list(range(5, 12))


def test_compacted_topic_with_offset_gaps(start_kref_broker, tmp_path, arrow_schema):
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.clusterkit import wait_until

    overrides = {"log.cleaner.backoff.ms": "100"}
    with start_kref_broker(tmp_path, overrides) as bootstrap:
        topic = "compacted"
        config = {"cleanup.policy": "compact", "segment.bytes": "1024", "min.cleanable.dirty.ratio": "0.01",
                  "delete.retention.ms": "0"}
        admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future
        admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(30)
        for round_ in range(20):
            produce(bootstrap, topic, [(b"k%d" % k, b"r%d-%d" % (round_, k), 0) for k in range(8)])
        for round_ in range(20):  # k4..k7 keep their last records: gaps between them
            produce(bootstrap, topic, [(b"k%d" % k, b"s%d-%d" % (round_, k), 0) for k in range(4)])
        produce(bootstrap, topic, [(b"k1", None, 0)])  # a tombstone
        high = 20 * 8 + 20 * 4 + 1

        class At:
            def __init__(self, bootstrap):
                self.bootstrap = bootstrap

        def rows():
            return read(At(bootstrap), arrow_schema, topic, 0, 0, high, path="librdkafka").num_rows

        wait_until(lambda: rows() < high // 2, "the cleaner to leave offset gaps", 60)
        table = same_both_ways(At(bootstrap), arrow_schema, topic, 0, 0, high)
        offsets = table.column("offset").to_pylist()
        assert offsets != list(range(offsets[0], offsets[0] + len(offsets)))  # gaps
        same_both_ways(At(bootstrap), arrow_schema, topic, 0, 3, high - 1)
        assert fast_path_reads_all(None, arrow_schema, topic, 0, 0, high, bootstrap=bootstrap)


def test_a_task_stopped_early_leaves_no_stale_answer_for_the_next(broker, arrow_schema):
    topic = broker.create_topic(1)
    produce(broker.bootstrap, topic, [(None, b"x" * 200, 0) for _ in range(20_000)])
    it = client.read_range({"bootstrap.servers": broker.bootstrap}, topic, 0, 0, 20_000,
                           fail_on_data_loss=True, poll_timeout_ms=30_000, include_headers=False,
                           rows_per_batch=100, arrow_schema=arrow_schema)
    first = next(it)
    it.close()  # Spark under a limit: a pipelined Fetch may be unanswered
    assert first.column("offset").to_pylist() == list(range(100))
    table = same_both_ways(broker, arrow_schema, topic, 0, 100, 20_000)
    assert table.num_rows == 19_900


def test_without_the_decoder_every_read_uses_librdkafka(broker, arrow_schema, monkeypatch):
    topic = broker.create_topic(1)
    produce(broker.bootstrap, topic, [(b"k", b"v%d" % i, 0) for i in range(50)])
    with_decoder = read(broker, arrow_schema, topic, 0, 0, 50, path="auto")
    monkeypatch.setattr(native_source, "_csource", None)
    assert not native_source.available()
    taken = []
    monkeypatch.setattr(native_source, "read", lambda *a, **k: taken.append(a) or iter(()))
    without = read(broker, arrow_schema, topic, 0, 0, 50, path="auto")
    assert taken == [] and without.equals(with_decoder)


def test_spark_reads_the_same_rows_on_both_paths(spark, broker):
    topic = broker.create_topic(3)
    produce(broker.bootstrap, topic,
            [(None if i % 5 == 0 else b"k%d" % i, b"v%d" % i, i % 3) for i in range(3000)],
            **{"compression.type": "lz4"})

    def rows(path, **options):
        reader = (spark.read.format("kref").option("kref.bootstrap.servers", broker.bootstrap)
                  .option("subscribe", topic).option("fetchPath", path))
        for k, v in options.items():
            reader = reader.option(k, v)
        return sorted((tuple(r) for r in reader.load().collect()), key=lambda r: (r[3], r[4]))

    fast = rows("auto")
    assert len(fast) == 3000
    assert fast == rows("librdkafka")
    ends = json.dumps({topic: {"0": 500, "1": -1, "2": 7}})
    starts = json.dumps({topic: {"0": 10, "1": -2, "2": 0}})
    assert rows("auto", startingOffsets=starts, endingOffsets=ends) == rows(
        "librdkafka", startingOffsets=starts, endingOffsets=ends)
    with pytest.raises(Exception, match="fetchPath"):
        rows("bogus")


def test_a_partition_added_later_is_read_on_the_fast_path(broker, arrow_schema):
    """The worker's pooled connections cache leaders; a partition they do not
    know yet makes them ask again rather than hand every such task over."""
    from confluent_kafka.admin import AdminClient, NewPartitions

    topic = broker.create_topic(1)
    produce(broker.bootstrap, topic, [(None, b"a", 0)] * 5)
    assert fast_path_reads_all(broker, arrow_schema, topic, 0, 0, 5)  # leaders cached: one partition
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # must outlive the future
    admin.create_partitions([NewPartitions(topic, 2)])[topic].result(30)
    produce(broker.bootstrap, topic, [(None, b"b", 1)] * 5)
    assert fast_path_reads_all(broker, arrow_schema, topic, 1, 0, 5)
    same_both_ways(broker, arrow_schema, topic, 1, 0, 5)
