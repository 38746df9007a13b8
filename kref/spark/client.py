"""The connector's conversations with the broker, through a real Kafka client.

Theory of operation: the Spark connector speaks to kref (or any Kafka broker)
only through confluent-kafka (librdkafka), exactly as an application would:
Metadata to resolve the subscription, ListOffsets (KIP-79 EARLIEST=-2 /
LATEST=-1 sentinels) to plan offset ranges, Fetch via an assigned consumer
with no group to read one range, Produce with acks=all to write. Nothing here
keeps a connection past one call: Spark pickles readers and writers, so every
task opens its own client inside the task and closes it on the way out.

Reading a range [from_offset, until_offset) ends when the consumer's position
reaches until_offset, not when a record with offset until_offset-1 arrives:
compaction and transaction markers leave offset gaps (KIP-98), and the
position moves past them. Records are turned into Arrow record batches of
bounded size so the Python worker hands Spark columns, not tuples.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

from .options import EARLIEST, LATEST, PartitionOffsets, Subscription, TopicPartition

log = logging.getLogger("kref.spark")


class KrefConnectorError(RuntimeError):
    """A broker-side condition the connector reports to Spark as a failure."""


class BrokerUnreachableError(KrefConnectorError):
    pass


class UnknownTopicError(KrefConnectorError):
    pass


class DataLossError(KrefConnectorError):
    pass


_DATA_LOSS_HINT = (
    "Some data may have been lost because it is no longer available in kref (deleted by "
    "retention, DeleteRecords, or the topic was recreated). If you want the query to go on "
    "and skip the missing records, set the option failOnDataLoss=false."
)


def data_loss(message: str, fail_on_data_loss: bool) -> None:
    """Spark's Kafka source rule: fail, or log a warning and carry on."""
    if fail_on_data_loss:
        raise DataLossError(f"{message} {_DATA_LOSS_HINT}")
    log.warning("%s Skipping (failOnDataLoss=false).", message)


def _base_config(config: dict[str, str]) -> dict:
    cfg = dict(config)
    # Spark's Kafka source reads uncommitted data by default (the Java client's
    # default); librdkafka's default is read_committed.
    cfg.setdefault("isolation.level", "read_uncommitted")
    cfg.setdefault("log_level", "3")
    return cfg


class Admin:
    """Driver-side metadata and offset look-ups (one short-lived AdminClient)."""

    def __init__(self, config: dict[str, str], timeout_ms: int) -> None:
        from confluent_kafka.admin import AdminClient

        self.bootstrap = config["bootstrap.servers"]
        self.timeout_s = timeout_ms / 1000
        self._errors: list[str] = []
        cfg = _base_config(config)
        cfg.pop("isolation.level", None)
        cfg["error_cb"] = lambda err: self._errors.append(str(err))
        self._admin = AdminClient(cfg)
        self._isolation = config.get("isolation.level", "read_uncommitted")

    def _unreachable(self, exc: Exception) -> BrokerUnreachableError:
        seen = f" (client errors: {'; '.join(self._errors[-3:])})" if self._errors else ""
        return BrokerUnreachableError(
            f"kref broker unreachable at {self.bootstrap!r}: no answer within "
            f"{self.timeout_s:g} s: {exc}{seen}"
        )

    def topic_partitions(self, subscription: Subscription) -> list[TopicPartition]:
        """All partitions the subscription names, sorted; unknown named topics raise."""
        from confluent_kafka import KafkaException

        try:
            metadata = self._admin.list_topics(timeout=self.timeout_s)
        except KafkaException as exc:
            raise self._unreachable(exc) from None
        found: dict[str, list[int]] = {
            name: sorted(t.partitions)
            for name, t in metadata.topics.items()
            if t.error is None and not name.startswith("__")
        }
        if subscription.pattern is not None:
            return sorted(
                (topic, p)
                for topic, parts in found.items()
                if subscription.matches(topic)
                for p in parts
            )
        wanted = subscription.topics or tuple(sorted({t for t, _ in subscription.assignment}))
        missing = [t for t in wanted if t not in found]
        if missing:
            raise UnknownTopicError(
                f"unknown topic(s) {', '.join(missing)} on kref broker {self.bootstrap!r} "
                f"(existing topics: {', '.join(sorted(found)) or 'none'})"
            )
        if subscription.assignment:
            absent = [f"{t}-{p}" for t, p in subscription.assignment if p not in found[t]]
            if absent:
                raise UnknownTopicError(f"unknown partition(s) {', '.join(absent)}")
            return list(subscription.assignment)
        return sorted((topic, p) for topic in wanted for p in found[topic])

    def list_offsets(self, partitions: list[TopicPartition], which: int) -> PartitionOffsets:
        """log_start_offset (EARLIEST) or high_watermark (LATEST) of each partition."""
        from confluent_kafka import IsolationLevel, KafkaException
        from confluent_kafka import TopicPartition as KafkaTopicPartition
        from confluent_kafka.admin import OffsetSpec

        if not partitions:
            return {}
        spec = OffsetSpec.earliest() if which == EARLIEST else OffsetSpec.latest()
        isolation = (
            IsolationLevel.READ_COMMITTED
            if self._isolation == "read_committed"
            else IsolationLevel.READ_UNCOMMITTED
        )
        futures = self._admin.list_offsets(
            {KafkaTopicPartition(t, p): spec for t, p in partitions},
            isolation_level=isolation,
            request_timeout=self.timeout_s,
        )
        out: PartitionOffsets = {}
        for tp, future in futures.items():
            try:
                out[(tp.topic, tp.partition)] = future.result(timeout=self.timeout_s + 5).offset
            except KafkaException as exc:
                raise KrefConnectorError(
                    f"ListOffsets for {tp.topic}-{tp.partition} failed on kref broker "
                    f"{self.bootstrap!r}: {exc}"
                ) from None
        return out

    def topic_exists(self, topic: str) -> bool:
        from confluent_kafka import KafkaException

        try:
            # All topics, not list_topics(topic=...): asking for one topic by name
            # lets a broker with auto.create.topics.enable create it.
            metadata = self._admin.list_topics(timeout=self.timeout_s)
        except KafkaException as exc:
            raise self._unreachable(exc) from None
        return _topic_ok(metadata, topic)


def _topic_ok(metadata, topic: str) -> bool:
    t = metadata.topics.get(topic)
    return t is not None and t.error is None and len(t.partitions) > 0


@contextmanager
def admin(config: dict[str, str], timeout_ms: int) -> Iterator[Admin]:
    # AdminClient has no close(); dropping the reference stops its threads.
    handle = Admin(config, timeout_ms)
    try:
        yield handle
    finally:
        del handle


def resolve_offsets(
    requested: str | PartitionOffsets,
    partitions: list[TopicPartition],
    option: str,
    earliest: PartitionOffsets,
    latest: PartitionOffsets,
) -> PartitionOffsets:
    """Turn "earliest"/"latest"/JSON into concrete offsets (JSON keeps -2/-1 sentinels
    resolved here too). As in Spark, JSON must name every subscribed partition."""
    if requested == "earliest":
        return {tp: earliest[tp] for tp in partitions}
    if requested == "latest":
        return {tp: latest[tp] for tp in partitions}
    assert isinstance(requested, dict)
    missing = [f"{t}-{p}" for t, p in partitions if (t, p) not in requested]
    if missing:
        raise KrefConnectorError(
            f"option {option!r} names specific offsets, so it must name every subscribed "
            f"partition; missing: {', '.join(missing)}"
        )
    unknown = [f"{t}-{p}" for t, p in requested if (t, p) not in set(partitions)]
    if unknown:
        raise UnknownTopicError(
            f"option {option!r} names partition(s) not in the subscription: {', '.join(unknown)}"
        )
    out: PartitionOffsets = {}
    for tp in partitions:
        offset = requested[tp]
        out[tp] = earliest[tp] if offset == EARLIEST else latest[tp] if offset == LATEST else offset
    return out


def _arrow_column(pa, values: list, arrow_type):
    if arrow_type == pa.binary():
        # pyarrow converts a list of bytes ~50x faster when it infers the type
        # than when given type=binary; an all-null column infers as null.
        array = pa.array(values)
        if array.type == arrow_type:
            return array
        # All null (no cast: it would import pyarrow.compute, ~1 s per worker).
        return pa.nulls(len(values), arrow_type)
    if pa.types.is_timestamp(arrow_type):
        # Microseconds as int64, reinterpreted: converting Python ints straight to a
        # tz-aware timestamp type imports pandas machinery on first use (~1.5 s).
        return pa.array(values, type=pa.int64()).view(arrow_type)
    return pa.array(values, type=arrow_type)


def read_range(
    config: dict[str, str],
    topic: str,
    partition: int,
    from_offset: int,
    until_offset: int,
    *,
    fail_on_data_loss: bool,
    poll_timeout_ms: int,
    include_headers: bool,
    rows_per_batch: int,
    arrow_schema,
) -> Iterator:
    """Yield pyarrow RecordBatches of the records in [from_offset, until_offset).

    from_offset may be EARLIEST (a partition that appeared after the stream's
    previous batch was planned). Runs inside a Spark task.
    """
    import pyarrow as pa
    from confluent_kafka import Consumer, KafkaError, KafkaException
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    cfg = _base_config(config)
    cfg.update(
        {
            "group.id": "kref-spark-reader",  # required by librdkafka; never joined nor committed
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "error",
            "enable.partition.eof": True,
        }
    )
    # Bigger fetches than librdkafka's 1 MiB per partition: a task reads one
    # partition only, so this bounds its memory, not the broker's.
    cfg.setdefault("max.partition.fetch.bytes", str(8 * 1024 * 1024))
    consumer = Consumer(cfg)
    where = f"{topic}-{partition}"
    try:
        try:
            low, high = consumer.get_watermark_offsets(
                KafkaTopicPartition(topic, partition), timeout=poll_timeout_ms / 1000
            )
        except KafkaException as exc:
            raise BrokerUnreachableError(
                f"reading {where}: no ListOffsets answer from kref broker "
                f"{config['bootstrap.servers']!r} within {poll_timeout_ms} ms: {exc}"
            ) from None
        if from_offset == EARLIEST:
            from_offset = low
        if from_offset < low:
            data_loss(
                f"Cannot fetch offset {from_offset} of {where}: the earliest available "
                f"offset is {low}.",
                fail_on_data_loss,
            )
            from_offset = low
        if until_offset > high:
            data_loss(
                f"{where}: the planned end offset {until_offset} is beyond the partition's "
                f"high watermark {high} (was the topic recreated or truncated?).",
                fail_on_data_loss,
            )
            until_offset = high
        if from_offset >= until_offset:
            return
        consumer.assign([KafkaTopicPartition(topic, partition, from_offset)])
        columns: dict[str, list] = {name: [] for name in arrow_schema.names}
        key, value, offs, ts, ts_type = (
            columns["key"],
            columns["value"],
            columns["offset"],
            columns["timestamp"],
            columns["timestampType"],
        )
        headers = columns.get("headers")
        position = from_offset
        deadline = time.monotonic() + poll_timeout_ms / 1000

        def flush_batch():
            n = len(offs)
            columns["topic"] = [topic] * n
            columns["partition"] = [partition] * n
            batch = pa.RecordBatch.from_arrays(
                [_arrow_column(pa, columns[f.name], f.type) for f in arrow_schema],
                schema=arrow_schema,
            )
            for col in columns.values():
                col.clear()
            return batch

        while position < until_offset:
            messages = consumer.consume(min(rows_per_batch, until_offset - position), 0.5)
            if not messages:
                if time.monotonic() > deadline:
                    raise KrefConnectorError(
                        f"reading {where}: no progress at offset {position} (until "
                        f"{until_offset}) within kafkaConsumer.pollTimeoutMs={poll_timeout_ms}"
                    )
                continue
            deadline = time.monotonic() + poll_timeout_ms / 1000
            records = [m for m in messages if m.error() is None]
            if len(records) != len(messages):
                for msg in messages:
                    err = msg.error()
                    if err is None:
                        continue
                    if err.code() == KafkaError._PARTITION_EOF:
                        # The position is the high watermark now; anything below
                        # until_offset that never came is a gap (e.g. truncation).
                        eof_at = msg.offset()
                        if eof_at < until_offset and not records:
                            data_loss(
                                f"{where}: reached the end of the log at {eof_at} before "
                                f"the planned end offset {until_offset}.",
                                fail_on_data_loss,
                            )
                            until_offset = eof_at
                    elif err.code() == KafkaError._AUTO_OFFSET_RESET:
                        data_loss(f"{where}: offset {position} is out of range: {err.str()}",
                                  fail_on_data_loss)
                        until_offset = position
                    else:
                        raise KrefConnectorError(
                            f"reading {where} at offset {position}: {err.str()}"
                        )
            if records and records[-1].offset() >= until_offset:
                records = [m for m in records if m.offset() < until_offset]
                position = until_offset
            if records:
                # Column-wise comprehensions: this loop is the connector's hot path.
                position = max(position, records[-1].offset() + 1)
                key.extend([m.key() for m in records])
                value.extend([m.value() for m in records])
                offs.extend([m.offset() for m in records])
                stamps = [m.timestamp() for m in records]
                ts.extend([stamp * 1000 for _, stamp in stamps])
                # librdkafka: 1 = CreateTime, 2 = LogAppendTime; Kafka/Spark: 0 and 1.
                ts_type.extend([kind - 1 if kind > 0 else -1 for kind, _ in stamps])
                if headers is not None:
                    headers.extend([m.headers() for m in records])
            if len(offs) >= rows_per_batch:
                yield flush_batch()
            if position < until_offset:
                # The consumer's own position covers gaps (compaction, control records).
                pos = consumer.position([KafkaTopicPartition(topic, partition)])[0].offset
                if pos >= 0:
                    position = max(position, pos)
        if offs:
            yield flush_batch()
    finally:
        consumer.close()


class RowProducer:
    """Produce rows with acks=all inside one Spark task; any failure raises.

    Delivery reports are collected through on_delivery and checked at flush, so
    a record the broker refused fails the task (and Spark retries or fails the
    job) instead of vanishing. Partitioning matches the Java client (murmur2)
    so keyed records land where a Spark Kafka sink would put them.
    """

    def __init__(self, config: dict[str, str], *, metadata_timeout_ms: int, flush_timeout_ms: int):
        from confluent_kafka import Producer

        cfg = _base_config(config)
        cfg.pop("isolation.level", None)
        cfg.setdefault("acks", "all")
        cfg.setdefault("partitioner", "murmur2_random")
        cfg.setdefault("linger.ms", "5")
        # Never let a bad topic hang the task for librdkafka's 5-minute default.
        cfg.setdefault("message.timeout.ms", str(flush_timeout_ms))
        self._errors: list[str] = []
        cfg["error_cb"] = lambda err: self._errors.append(str(err))
        self.bootstrap = config["bootstrap.servers"]
        self._producer = Producer(cfg)
        self._metadata_timeout_s = metadata_timeout_ms / 1000
        self._flush_timeout_s = flush_timeout_ms / 1000
        self._known_topics: set[str] = set()
        self._failures: list[str] = []
        self.records = 0

    def _on_delivery(self, err, msg) -> None:
        if err is not None and len(self._failures) < 10:
            self._failures.append(f"{msg.topic()}-{msg.partition()}: {err.str()}")

    def _check_topic(self, topic: str) -> None:
        from confluent_kafka import KafkaException

        if topic in self._known_topics:
            return
        try:
            md = self._producer.list_topics(timeout=self._metadata_timeout_s)
        except KafkaException as exc:
            raise BrokerUnreachableError(
                f"kref broker unreachable at {self.bootstrap!r}: {exc}"
            ) from None
        if not _topic_ok(md, topic):
            raise UnknownTopicError(
                f"cannot write to unknown topic {topic!r} on kref broker {self.bootstrap!r}"
            )
        self._known_topics.add(topic)

    def produce(self, topic, key, value, partition=None, headers=None) -> None:
        from confluent_kafka import KafkaException

        if topic is None:
            raise KrefConnectorError(
                "a row has a null topic: set the 'topic' column or the 'topic' option"
            )
        self._check_topic(topic)
        if self._failures:
            self._raise_failures()
        kwargs = {"on_delivery": self._on_delivery}
        if partition is not None:
            kwargs["partition"] = int(partition)
        if headers:
            kwargs["headers"] = [(h[0], h[1]) for h in headers]
        while True:
            try:
                self._producer.produce(topic, value=value, key=key, **kwargs)
                break
            except BufferError:
                # The local queue is bounded (queue.buffering.max.messages): wait for room.
                self._producer.poll(0.05)
            except KafkaException as exc:
                where = topic if partition is None else f"{topic}-{partition}"
                raise KrefConnectorError(
                    f"kref sink: cannot produce to {where} on kref broker "
                    f"{self.bootstrap!r}: {exc.args[0].str() if exc.args else exc}"
                ) from None
        self.records += 1
        if self.records % 1000 == 0:
            self._producer.poll(0)

    def _raise_failures(self) -> None:
        raise KrefConnectorError(
            f"kref sink: {len(self._failures)} record(s) not acknowledged by kref broker "
            f"{self.bootstrap!r}: {'; '.join(self._failures)}"
        )

    def flush(self) -> int:
        left = self._producer.flush(self._flush_timeout_s)
        if self._failures:
            self._raise_failures()
        if left:
            seen = f" (client errors: {'; '.join(self._errors[-3:])})" if self._errors else ""
            raise BrokerUnreachableError(
                f"kref sink: {left} record(s) still unacknowledged after flushTimeoutMs="
                f"{int(self._flush_timeout_s * 1000)} by kref broker {self.bootstrap!r}{seen}"
            )
        return self.records
