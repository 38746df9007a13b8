"""`format("kref")`: kref topics as a PySpark batch/streaming source and sink.

Theory of operation (Python Data Source API, pyspark >= 4):

* Batch read: on the driver, Metadata resolves the subscription and
  ListOffsets turns startingOffsets/endingOffsets into one offset range per
  topic partition; each range is one InputPartition, read by one Spark task
  that opens its own consumer (readers are pickled, so no socket crosses
  the process boundary).
* Streaming read: the stream offset is Spark Kafka's JSON,
  {"topic": {"partition": next_offset}}. latestOffset() asks ListOffsets
  for every high_watermark, caps the step by maxOffsetsPerTrigger (spread
  over partitions in proportion to their lag) and, after
  prepareForTriggerAvailableNow(), by the high watermarks seen at that
  moment. partitions(start, end) is a pure function of the two offsets, so
  a batch replayed from the checkpoint after a restart reads exactly the
  same records: no loss, no duplicate. commit() has nothing to do: the
  checkpoint, not the broker, holds the consumed offsets.
* Write (batch and streaming): Spark hands each task its rows as Arrow
  record batches (DataSourceArrowWriter), so no Row object is built per
  record; the task produces them with acks=all, batched by librdkafka, and
  waits for every acknowledgement before it reports success; a refused
  record fails the task. A topic that does not exist is asked for by name,
  so a broker with auto.create.topics.enable creates it (as with Spark's
  Kafka sink); a broker that refuses is one clear error. As with Spark's
  Kafka sink this is at-least-once: a retried task may write its rows again.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from . import client
from .options import (
    EARLIEST,
    KrefOptionError,
    PartitionOffsets,
    SourceOptions,
    offsets_from_json,
    offsets_to_json,
    sink_options,
    source_options,
)

HEADERS_TYPE = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)


def kafka_schema(include_headers: bool) -> StructType:
    """Spark's Kafka source schema, field for field."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


class OffsetRangePartition(InputPartition):
    """One Spark task's work: records [from_offset, until_offset) of one partition.

    from_offset is EARLIEST (-2) for a partition new to a stream: the task
    resolves it against the partition's log_start_offset.
    """

    def __init__(self, topic: str, partition: int, from_offset: int, until_offset: int):
        super().__init__((topic, partition, from_offset, until_offset))
        self.topic = topic
        self.partition = partition
        self.from_offset = from_offset
        self.until_offset = until_offset


def _read_partition(options: SourceOptions, part: InputPartition):
    from pyspark.sql.pandas.types import to_arrow_schema

    if not isinstance(part, OffsetRangePartition):
        # Spark plans one placeholder InputPartition(None) when partitions() is empty.
        return iter(())

    return client.read_range(
        options.client_config,
        part.topic,
        part.partition,
        part.from_offset,
        part.until_offset,
        fail_on_data_loss=options.fail_on_data_loss,
        poll_timeout_ms=options.poll_timeout_ms,
        include_headers=options.include_headers,
        rows_per_batch=options.rows_per_arrow_batch,
        arrow_schema=to_arrow_schema(kafka_schema(options.include_headers), timezone="UTC"),
        fetch_path=options.fetch_path,
    )


def _ranges(
    start: PartitionOffsets, end: PartitionOffsets, fail_on_data_loss: bool
) -> list[OffsetRangePartition]:
    parts = []
    for (topic, partition), until in sorted(end.items()):
        from_offset = start.get((topic, partition), EARLIEST)
        if from_offset != EARLIEST and until < from_offset:
            client.data_loss(
                f"{topic}-{partition}: end offset {until} is before start offset "
                f"{from_offset} (was the topic recreated?).",
                fail_on_data_loss,
            )
            continue
        if from_offset == until:
            continue
        parts.append(OffsetRangePartition(topic, partition, from_offset, until))
    return parts


class KrefBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions):
        self.options = options

    def partitions(self):
        o = self.options
        with client.admin(o.client_config, o.metadata_timeout_ms) as admin:
            tps = admin.topic_partitions(o.subscription)
            earliest, latest = admin.offset_bounds(tps)
        start = client.resolve_offsets(o.starting, tps, "startingOffsets", earliest, latest)
        end = client.resolve_offsets(o.ending, tps, "endingOffsets", earliest, latest)
        for tp in tps:
            if start[tp] < earliest[tp]:
                client.data_loss(
                    f"startingOffsets {start[tp]} for {tp[0]}-{tp[1]} is below the earliest "
                    f"available offset {earliest[tp]}.",
                    o.fail_on_data_loss,
                )
                start[tp] = earliest[tp]
            if end[tp] < start[tp]:
                raise KrefOptionError(
                    f"endingOffsets {end[tp]} for {tp[0]}-{tp[1]} is before startingOffsets "
                    f"{start[tp]}"
                )
        return _ranges(start, end, o.fail_on_data_loss)

    def read(self, partition):
        return _read_partition(self.options, partition)


def _cap_by_rows(start: PartitionOffsets, latest: PartitionOffsets, max_rows: int):
    """Advance at most max_rows records in total, shared in proportion to lag.

    Floors of the proportional shares, the remainder handed out by largest
    fraction, so the total is exactly min(max_rows, lag) and every call makes
    progress when there is any lag.
    """
    lag = {tp: max(0, latest[tp] - start[tp]) for tp in latest}
    total = sum(lag.values())
    if total <= max_rows:
        return dict(latest)
    shares = {tp: max_rows * n / total for tp, n in lag.items()}
    take = {tp: int(s) for tp, s in shares.items()}
    rest = max_rows - sum(take.values())
    for tp in sorted(shares, key=lambda tp: (take[tp] - shares[tp], tp))[:rest]:
        take[tp] += 1
    # A partition whose log went back (data loss, reported already) jumps to its new end.
    return {tp: min(latest[tp], start[tp] + take[tp]) for tp in latest}


class KrefStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions):
        self.options = options
        # (log_start_offsets, high_watermarks) pinned by Trigger.AvailableNow.
        self._target: tuple[PartitionOffsets, PartitionOffsets] | None = None

    def _snapshot(self) -> tuple[PartitionOffsets, PartitionOffsets]:
        o = self.options
        with client.admin(o.client_config, o.metadata_timeout_ms) as admin:
            tps = admin.topic_partitions(o.subscription)
            return admin.offset_bounds(tps)

    def initialOffset(self) -> dict:
        earliest, latest = self._snapshot()
        start = client.resolve_offsets(
            self.options.starting, sorted(latest), "startingOffsets", earliest, latest
        )
        return offsets_to_json(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.options.max_offsets_per_trigger
        return ReadAllAvailable() if n is None else ReadMaxRows(n)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._snapshot()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = offsets_from_json(start)
        earliest, latest = self._target if self._target is not None else self._snapshot()
        latest = dict(latest)
        # A partition that appeared since `start` is read from its beginning.
        for tp in latest:
            begin.setdefault(tp, earliest[tp])
        for tp, offset in begin.items():
            if tp in latest and latest[tp] < offset:
                # Topic recreated or log truncated: Spark's Kafka source fails, or
                # (failOnDataLoss=false) warns and goes on from the new end.
                client.data_loss(
                    f"{tp[0]}-{tp[1]}: offset went back from {offset} to {latest[tp]}.",
                    self.options.fail_on_data_loss,
                )
        if isinstance(limit, ReadMaxRows):
            latest = _cap_by_rows(begin, latest, limit.max_rows)
        # Never drop a partition the stream already tracks (e.g. a transient metadata gap).
        for tp, offset in begin.items():
            latest.setdefault(tp, offset)
        return offsets_to_json(latest)

    def reportLatestOffset(self):
        return None

    def partitions(self, start: dict, end: dict):
        return _ranges(
            offsets_from_json(start), offsets_from_json(end), self.options.fail_on_data_loss
        )

    def read(self, partition):
        return _read_partition(self.options, partition)

    def commit(self, end: dict) -> None:
        # The checkpoint holds the progress; kref keeps no consumer-group state for us.
        pass


@dataclass
class WriteReport(WriterCommitMessage):
    records: int


def _arrow_writer(schema: StructType, options):
    """Check the input columns once on the driver; return a picklable task
    body that writes an iterator of Arrow record batches."""
    o = sink_options(options)
    names = {f.name.lower(): f for f in schema.fields}

    def require(name: str, allowed: tuple, required: bool):
        field = names.get(name)
        if field is None:
            if required:
                raise KrefOptionError(f"required column {name!r} not found in {schema.simpleString()}")
            return None
        if not isinstance(field.dataType, allowed):
            raise KrefOptionError(
                f"column {name!r} must be of type "
                f"{' or '.join(t.typeName() for t in allowed)}, got {field.dataType.simpleString()}"
            )
        return field.name

    columns = client.SinkColumns(
        value=require("value", (BinaryType, StringType), True),
        key=require("key", (BinaryType, StringType), False),
        topic=o.topic,
        topic_column=require("topic", (StringType,), o.topic is None) if o.topic is None else None,
        partition=require("partition", (IntegerType, LongType), False),
        headers=require("headers", (ArrayType,), False),
    )
    if columns.headers is not None and names["headers"].dataType != HEADERS_TYPE:
        raise KrefOptionError(
            f"column 'headers' must be {HEADERS_TYPE.simpleString()}, got "
            f"{names['headers'].dataType.simpleString()}"
        )
    # The topic is not looked up here, as Spark's Kafka sink does not look it
    # up on the driver: each task's producer asks for it by name (and a broker
    # with auto.create.topics.enable creates it). A look-up here cost the
    # planning worker a confluent-kafka import and a client (0.1-1 s measured),
    # paid by every write query.

    def write(batches) -> WriteReport:
        return WriteReport(
            client.write_batches(
                o.client_config,
                columns,
                batches,
                metadata_timeout_ms=o.metadata_timeout_ms,
                flush_timeout_ms=o.flush_timeout_ms,
            )
        )

    return write


class KrefBatchWriter(DataSourceArrowWriter):
    def __init__(self, schema: StructType, options):
        self._write = _arrow_writer(schema, options)

    def write(self, iterator):
        return self._write(iterator)


class KrefStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, schema: StructType, options):
        self._write = _arrow_writer(schema, options)

    def write(self, iterator):
        return self._write(iterator)

    def commit(self, messages, batchId) -> None:
        # Every record of the micro-batch was acknowledged (acks=all) before its task ended.
        pass

    def abort(self, messages, batchId) -> None:
        # Records already acknowledged stay in kref (at-least-once, as Spark's Kafka sink).
        pass


class KrefDataSource(DataSource):
    """spark.read / readStream / write / writeStream .format("kref")."""

    @classmethod
    def name(cls) -> str:
        return "kref"

    def schema(self):
        return kafka_schema(
            str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        )

    def reader(self, schema):
        return KrefBatchReader(source_options(self.options, streaming=False))

    def streamReader(self, schema):
        return KrefStreamReader(source_options(self.options, streaming=True))

    def writer(self, schema, overwrite):
        return KrefBatchWriter(schema, self.options)

    def streamWriter(self, schema, overwrite):
        return KrefStreamWriter(schema, self.options)
