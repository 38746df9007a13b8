"""format("kref") end to end: a real local SparkSession against a real broker.

Checks the connector's contract with Spark's Kafka source/sink semantics:
* batch read = one input partition per topic partition offset range, every
  record exactly once with the Kafka schema (key, value, topic, partition,
  offset, timestamp, timestampType, headers);
* startingOffsets / endingOffsets (earliest, latest, per-partition JSON with
  the ListOffsets sentinels -2 / -1);
* streaming with Trigger.AvailableNow and maxOffsetsPerTrigger (admission
  control), and restart from the checkpoint after a crash between the offset
  log and the commit log: the replayed micro-batch reads exactly the same
  records (partitions(start, end) is deterministic), so nothing is lost or
  repeated;
* batch and streaming writes (acks=all) read back with a real Kafka client;
* clear errors: unknown topic, unreachable broker, failOnDataLoss.
Records are produced and checked with confluent-kafka, never with the
connector under test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from kref.spark.options import Subscription

pytest.importorskip("pyspark")

KAFKA_SCHEMA = (
    "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
    "timestamp:timestamp,timestampType:int>"
)


def _reader(spark, broker, topic, **options):
    r = spark.read.format("kref").option("kref.bootstrap.servers", broker.bootstrap)
    r = r.option("subscribe", topic)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def _stream(spark, broker, topic, **options):
    r = spark.readStream.format("kref").option("kref.bootstrap.servers", broker.bootstrap)
    r = r.option("subscribe", topic).option("startingOffsets", "earliest")
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def _records(n, partitions, prefix="v"):
    out = []
    for i in range(n):
        key = None if i % 7 == 0 else f"k{i}".encode()
        headers = [("h", f"{i}".encode()), ("kind", b"test")] if i % 2 == 0 else None
        out.append((key, f"{prefix}{i}".encode(), i % partitions, headers))
    return out


def _row_tuples(rows):
    return sorted(
        (
            r.partition,
            r.offset,
            r.key,
            r.value,
            None if r.headers is None else [(h.key, h.value) for h in r.headers],
        )
        for r in rows
    )


@pytest.fixture(scope="module")
def filled(broker):
    """A 3-partition topic holding 90 records (some null keys, some headers)."""
    topic = broker.create_topic(3)
    delivered = broker.produce(topic, _records(90, 3))
    return topic, delivered


def test_registered_by_name_and_schema_is_spark_kafka_schema(spark, broker, filled):
    topic, _ = filled
    # No kref.spark.register(spark): the installed pyspark_kref module is discovered.
    df = _reader(spark, broker, topic)
    assert df.schema.simpleString() == KAFKA_SCHEMA
    with_headers = _reader(spark, broker, topic, includeHeaders="true")
    assert with_headers.schema.simpleString() == (
        KAFKA_SCHEMA[:-1] + ",headers:array<struct<key:string,value:binary>>>"
    )


def test_batch_read_returns_every_record_once_one_task_per_partition(spark, broker, filled):
    topic, delivered = filled
    df = _reader(spark, broker, topic, includeHeaders="true")
    assert df.rdd.getNumPartitions() == 3
    rows = df.collect()
    assert _row_tuples(rows) == delivered
    assert {r.topic for r in rows} == {topic}
    assert {r.timestampType for r in rows} == {0}  # CreateTime
    # CreateTime of records produced by this module, not 1970 nor the future.
    now = time.time()
    assert all(now - 3600 < r.timestamp.timestamp() <= now + 60 for r in rows)


def test_starting_and_ending_offsets(spark, broker, filled):
    topic, delivered = filled
    start = json.dumps({topic: {"0": 3, "1": -2, "2": 25}})
    end = json.dumps({topic: {"0": 10, "1": 4, "2": -1}})
    rows = _reader(spark, broker, topic, startingOffsets=start, endingOffsets=end).collect()
    expected = sorted(
        (p, o)
        for p, o, *_ in delivered
        if (p == 0 and 3 <= o < 10) or (p == 1 and o < 4) or (p == 2 and o >= 25)
    )
    assert sorted((r.partition, r.offset) for r in rows) == expected
    # A range that is empty on every partition plans no task and reads nothing.
    same = json.dumps({topic: {"0": 5, "1": 5, "2": 5}})
    empty = _reader(spark, broker, topic, startingOffsets=same, endingOffsets=same)
    assert empty.count() == 0
    # As in Spark's Kafka source, a batch cannot start at latest.
    latest = json.dumps({topic: {"0": -1, "1": 0, "2": 0}})
    with pytest.raises(Exception, match="startingOffsets.*not valid for a batch query"):
        _reader(spark, broker, topic, startingOffsets=latest).collect()


def test_starting_offsets_json_must_name_every_partition(spark, broker, filled):
    topic, _ = filled
    with pytest.raises(Exception, match="must name every subscribed partition"):
        _reader(spark, broker, topic, startingOffsets=json.dumps({topic: {"0": 1}})).collect()


def test_streaming_available_now_respects_max_offsets_per_trigger(spark, broker, tmp_path):
    topic = broker.create_topic(3)
    delivered = broker.produce(topic, _records(60, 3))
    query = (
        _stream(spark, broker, topic, maxOffsetsPerTrigger="25")
        .writeStream.format("memory")
        .queryName("avail_now")
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    sizes = [p["numInputRows"] for p in query.recentProgress]
    assert sizes == [25, 25, 10]
    rows = spark.sql("select partition, offset, value from avail_now").collect()
    assert sorted((r.partition, r.offset, r.value) for r in rows) == sorted(
        (p, o, v) for p, o, _, v, _ in delivered
    )


def test_available_now_target_is_fixed_when_prepared(broker):
    """prepareForTriggerAvailableNow pins the high watermarks: later records wait."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    from kref.spark.options import source_options
    from kref.spark.source import KrefStreamReader

    topic = broker.create_topic(2)
    broker.produce(topic, _records(10, 2))
    reader = KrefStreamReader(
        source_options(
            {"kref.bootstrap.servers": broker.bootstrap, "subscribe": topic,
             "startingOffsets": "earliest"},
            streaming=True,
        )
    )
    start = reader.initialOffset()
    assert start == {topic: {"0": 0, "1": 0}}
    reader.prepareForTriggerAvailableNow()
    broker.produce(topic, _records(6, 2, prefix="late"))
    assert reader.latestOffset(start, ReadAllAvailable()) == {topic: {"0": 5, "1": 5}}
    # maxOffsetsPerTrigger shares the step among partitions by lag, never over the cap.
    assert reader.latestOffset(start, ReadMaxRows(3)) in (
        {topic: {"0": 2, "1": 1}}, {topic: {"0": 1, "1": 2}}
    )
    parts = reader.partitions(start, {topic: {"0": 5, "1": 5}})
    assert [(p.topic, p.partition, p.from_offset, p.until_offset) for p in parts] == [
        (topic, 0, 0, 5), (topic, 1, 0, 5)
    ]


def test_restart_from_checkpoint_after_crash_loses_and_repeats_nothing(spark, broker, tmp_path):
    topic = broker.create_topic(2)
    first = broker.produce(topic, _records(40, 2, prefix="a"))
    checkpoint = tmp_path / "cp"
    out = tmp_path / "out"
    out.mkdir()

    def sink(batch_df, batch_id):
        # Idempotent per batch id (overwrite), as a deterministic sink must be:
        # a replayed batch must therefore read exactly the records it read before.
        rows = sorted((r.partition, r.offset, r.value.decode()) for r in batch_df.collect())
        (out / f"{batch_id}.json").write_text(json.dumps(rows))

    def run():
        q = (
            _stream(spark, broker, topic, maxOffsetsPerTrigger="15")
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(120)
        assert q.exception() is None

    run()
    assert sorted(os.listdir(out)) == ["0.json", "1.json", "2.json"]
    # Crash after batch 2 was planned and written but before it was committed:
    # Spark must replay batch 2 with the offsets it logged, although more data arrived.
    last_commit = checkpoint / "commits" / "2"
    assert last_commit.exists()
    last_commit.unlink()
    (checkpoint / "commits" / ".2.crc").unlink(missing_ok=True)
    replayed_before = (out / "2.json").read_text()
    second = broker.produce(topic, _records(20, 2, prefix="b"))
    run()
    assert (out / "2.json").read_text() == replayed_before
    seen = [tuple(x) for f in sorted(out.iterdir()) for x in json.loads(f.read_text())]
    assert len(seen) == len(set(seen)), "a record was delivered twice"
    assert sorted(seen) == sorted((p, o, v.decode()) for p, o, _, v, _ in first + second)


def test_batch_write_is_read_back_by_a_kafka_client(spark, broker):
    from pyspark.sql.types import (
        ArrayType, BinaryType, IntegerType, StringType, StructField, StructType,
    )

    topic = broker.create_topic(2)
    schema = StructType(
        [
            StructField("key", StringType()),
            StructField("value", BinaryType()),
            StructField("topic", StringType()),
            StructField("partition", IntegerType()),
            StructField(
                "headers",
                ArrayType(
                    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
                ),
            ),
        ]
    )
    data = [
        (f"k{i}" if i % 5 else None, f"value-{i}".encode(), topic, i % 2,
         [("n", str(i).encode())] if i % 3 == 0 else None)
        for i in range(50)
    ]
    spark.createDataFrame(data, schema).repartition(2).write.format("kref").option(
        "kref.bootstrap.servers", broker.bootstrap
    ).mode("append").save()
    got = broker.consume_all(topic, 2)
    assert len(got) == 50
    assert sorted(((p, k, v, h) for p, _, k, v, h in got), key=repr) == sorted(
        ((p, None if k is None else k.encode(), v, h) for k, v, _, p, h in data), key=repr
    )


def test_streaming_write_is_read_back_by_a_kafka_client(spark, broker, tmp_path):
    source = broker.create_topic(3, prefix="events")
    sink = broker.create_topic(2, prefix="results")
    delivered = broker.produce(source, _records(45, 3))
    query = (
        _stream(spark, broker, source)
        .selectExpr("key", "upper(cast(value as string)) as value")
        .writeStream.format("kref")
        .option("kref.bootstrap.servers", broker.bootstrap)
        .option("topic", sink)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    # The stream offset in the checkpoint is Spark Kafka's {"topic":{"partition":offset}}.
    logged = (tmp_path / "cp" / "offsets" / "0").read_text().strip().splitlines()[-1]
    assert json.loads(logged) == {source: {"0": 15, "1": 15, "2": 15}}
    got = broker.consume_all(sink, 2)
    assert sorted(((k, v) for _, _, k, v, _ in got), key=repr) == sorted(
        ((k, v.decode().upper().encode()) for _, _, k, v, _ in delivered), key=repr
    )


def test_unknown_topic_is_a_clear_error_on_read(spark, broker):
    with pytest.raises(Exception, match="unknown topic.*no-such-topic"):
        _reader(spark, broker, "no-such-topic").collect()


def test_write_to_a_new_topic_auto_creates_it_or_fails_clearly(
    spark, broker, tmp_path, start_kref_broker
):
    """As Spark's Kafka sink: the producer's Metadata request creates the topic when
    the broker's auto.create.topics.enable allows, and a refusal is one clear error."""
    import uuid

    topic = f"new-{uuid.uuid4().hex[:8]}"
    df = spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(20)], ["key", "value"])
    df.write.format("kref").option("kref.bootstrap.servers", broker.bootstrap).option(
        "topic", topic
    ).mode("append").save()
    got = broker.consume_all(topic, 1)
    assert sorted(v for *_, v, _ in got) == sorted(f"v{i}".encode() for i in range(20))

    with start_kref_broker(tmp_path, {"auto.create.topics.enable": "false"}) as refusing:
        refused = "does not exist on kref broker .* the broker did not create it"
        with pytest.raises(Exception, match=refused):  # the topic option: in the task
            df.write.format("kref").option("kref.bootstrap.servers", refusing).option(
                "topic", topic
            ).mode("append").save()
        with pytest.raises(Exception, match=refused):  # a topic column: in the task
            df.selectExpr("key", "value", f"'{topic}' as topic").write.format("kref").option(
                "kref.bootstrap.servers", refusing
            ).option("metadataTimeoutMs", "3000").mode("append").save()


def test_missing_value_column_is_a_clear_error(spark, broker, filled):
    topic, _ = filled
    df = spark.createDataFrame([("a",)], ["key"])
    with pytest.raises(Exception, match="required column 'value' not found"):
        df.write.format("kref").option("kref.bootstrap.servers", broker.bootstrap).option(
            "topic", topic
        ).mode("append").save()


def test_unreachable_broker_is_a_clear_error(spark):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(Exception, match="kref broker unreachable at '127.0.0.1:"):
        spark.read.format("kref").option("kref.bootstrap.servers", f"127.0.0.1:{port}").option(
            "subscribe", "t"
        ).option("metadataTimeoutMs", "1500").load().collect()


def test_offsets_out_of_range_fail_or_are_skipped_per_fail_on_data_loss(spark, broker, filled):
    topic, delivered = filled
    beyond = json.dumps({topic: {"0": 1000, "1": -1, "2": -1}})
    with pytest.raises(Exception, match="failOnDataLoss=false"):
        _reader(spark, broker, topic, endingOffsets=beyond).collect()
    rows = _reader(spark, broker, topic, endingOffsets=beyond, failOnDataLoss="false").collect()
    assert sorted((r.partition, r.offset) for r in rows) == sorted(
        (p, o) for p, o, *_ in delivered
    )


def test_starting_offset_below_log_start_offset_fails_or_skips(spark, broker):
    """DeleteRecords moves log_start_offset: the records before it are gone."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    topic = broker.create_topic(1)
    broker.produce(topic, [(None, f"v{i}".encode(), 0, None) for i in range(12)])
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 5)]).values():
        future.result(timeout=30)
    from_zero = json.dumps({topic: {"0": 0}})
    with pytest.raises(Exception, match="below the earliest available offset 5"):
        _reader(spark, broker, topic, startingOffsets=from_zero).collect()
    rows = _reader(spark, broker, topic, startingOffsets=from_zero, failOnDataLoss="false")
    assert sorted(r.offset for r in rows.collect()) == list(range(5, 12))


def test_write_tasks_in_one_worker_reuse_a_producer_but_not_after_a_failure(broker, monkeypatch):
    """A write task's body (client.write_batches), run twice in one process as a
    reused Python worker would: the second borrows the first's producer; a
    failed task's producer is dropped, not handed to the next task. (The
    librdkafka path: the columnar fast path, which needs no producer, is off.)"""
    import pyarrow as pa

    from kref.spark import client, native_sink

    monkeypatch.setattr(native_sink, "ENABLED", False)

    topic = broker.create_topic(2)
    cfg = {"bootstrap.servers": broker.bootstrap}
    limits = {"metadata_timeout_ms": 30_000, "flush_timeout_ms": 30_000}
    columns = client.SinkColumns(value="value", key="key", topic=topic)
    batch = pa.RecordBatch.from_arrays(
        [pa.array([b"k1", b"k2"]), pa.array([b"v1", b"v2"])], names=["key", "value"]
    )
    try:
        assert client.write_batches(cfg, columns, [batch], **limits) == 2
        first = client._producers.idle
        assert first is not None and topic in first.known_topics
        assert client.write_batches(cfg, columns, [batch], **limits) == 2
        assert client._producers.idle is first
        to_partition_7 = pa.RecordBatch.from_arrays(
            [batch.column(0), batch.column(1), pa.array([7, 7], pa.int32())],
            names=["key", "value", "partition"],
        )
        with pytest.raises(client.KrefConnectorError, match=f"cannot produce to {topic}-7"):
            client.write_batches(
                cfg,
                client.SinkColumns(value="value", key="key", topic=topic, partition="partition"),
                [to_partition_7],
                **limits,
            )
        assert client._producers.idle is None
        assert client.write_batches(cfg, columns, [batch], **limits) == 2
        assert client._producers.idle is not first
    finally:
        client._producers.take(())  # leave the slot empty for the next test
    assert len(broker.consume_all(topic, 2)) == 6


def test_read_tasks_in_one_worker_reuse_a_consumer_only_after_a_whole_range(broker, filled):
    """Read tasks' bodies (client.read_range), run in one process as a reused
    Python worker would: each reads exactly its range, switching partitions
    and offsets on one pooled consumer; a task Spark stops early (a limit)
    closes its consumer instead of handing it on."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from kref.spark import client
    from kref.spark.source import kafka_schema

    topic, delivered = filled
    arrow_schema = to_arrow_schema(kafka_schema(True), timezone="UTC")

    def read(partition, start, end, batches=None):
        it = client.read_range(
            {"bootstrap.servers": broker.bootstrap}, topic, partition, start, end,
            fail_on_data_loss=True, poll_timeout_ms=30_000, include_headers=True,
            rows_per_batch=4, arrow_schema=arrow_schema,
            fetch_path="librdkafka",  # the consumer pool is the librdkafka path's
        )
        got = []
        for n, batch in enumerate(it):
            got += zip(batch.column("partition").to_pylist(), batch.column("offset").to_pylist(),
                       batch.column("value").to_pylist())
            if batches is not None and n + 1 == batches:
                it.close()  # what Spark does to a task's iterator under a limit
                break
        return got

    def expected(partition, start, end):
        return [(p, o, v) for p, o, _, v, _ in delivered if p == partition and start <= o < end]

    client._consumers.take(())  # start from an empty slot
    try:
        assert read(0, 0, 30) == expected(0, 0, 30)
        first = client._consumers.idle
        assert first is not None
        assert read(1, 5, 12) == expected(1, 5, 12)
        assert read(0, 3, 9) == expected(0, 3, 9)  # back to an earlier offset
        assert client._consumers.idle is first
        assert read(2, 0, 30, batches=1) == expected(2, 0, 4)
        assert client._consumers.idle is None
        assert read(2, 10, 30) == expected(2, 10, 30)
        assert client._consumers.idle not in (None, first)
    finally:
        client._consumers.take(())


def test_planning_reuses_an_admin_client_only_after_a_clean_step(broker, filled):
    from kref.spark import client

    topic, _ = filled
    cfg = {"bootstrap.servers": broker.bootstrap}
    client._admins.take(())
    try:
        with client.admin(cfg, 30_000) as first:
            assert first.topic_partitions(Subscription(topics=(topic,))) == [
                (topic, p) for p in range(3)
            ]
        with client.admin(cfg, 30_000) as again:
            assert again is first
        with pytest.raises(client.UnknownTopicError):
            with client.admin(cfg, 30_000) as failing:
                failing.topic_partitions(Subscription(topics=("no-such-topic",)))
        assert client._admins.idle is None
        with client.admin(cfg, 20_000) as other:  # other settings: a new client
            assert other is not first
    finally:
        client._admins.take(())


def test_write_failures_fail_the_task_with_a_clear_message(spark, broker):
    topic = broker.create_topic(2)
    df = spark.createDataFrame([("k", "v", 7)], "key string, value string, partition int")
    with pytest.raises(Exception, match=f"kref sink: cannot produce to {topic}-7"):
        df.write.format("kref").option("kref.bootstrap.servers", broker.bootstrap).option(
            "topic", topic
        ).mode("append").save()
    # Refused by the broker after sending (MESSAGE_TOO_LARGE): only a delivery
    # report says so, and it must fail the task, not vanish.
    small = broker.create_topic(1, config={"max.message.bytes": "300"})
    big = spark.createDataFrame([("k", "x" * 1000)], "key string, value string")
    with pytest.raises(Exception, match=f"1 record.s. not acknowledged .*{small}-0"):
        big.write.format("kref").option("kref.bootstrap.servers", broker.bootstrap).option(
            "topic", small
        ).mode("append").save()


def test_daemon_preload_imports_the_connector_and_starts_no_thread():
    """kref.spark.daemon forks workers, so its preload must leave one thread."""
    code = (
        "import sys; from kref.spark import daemon; daemon.preload(); "
        "assert 'kref.spark.source' in sys.modules and 'pyspark.worker' in sys.modules; "
        "print(daemon._threads())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1"]
