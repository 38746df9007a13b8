"""The connector's conversations with the broker, through a real Kafka client.

Theory of operation: the Spark connector speaks to kref (or any Kafka broker)
only through confluent-kafka (librdkafka), exactly as an application would:
Metadata to resolve the subscription, ListOffsets (KIP-79 EARLIEST=-2 /
LATEST=-1 sentinels) to plan offset ranges, Fetch via an assigned consumer
with no group to read one range, Produce with acks=all to write (Metadata
naming the topic first, which lets the broker auto-create it). Spark pickles
readers and writers, so no client crosses a process boundary: every task
opens its clients inside its Python worker. Spark reuses those workers (and
its driver-side planning workers) across tasks and queries, so a task or a
planning step that ends cleanly leaves its client idle in the process for
the next one with the same settings (_IdleSlot: one per kind, five minutes
at most), as Spark's Kafka connector pools its consumers and producers: the
next task skips the client's start-up, its connection, the topic's Metadata
round trip and the teardown. A failed or interrupted user closes its client.

Reading a range [from_offset, until_offset) ends when the consumer's position
reaches until_offset, not when a record with offset until_offset-1 arrives:
compaction and transaction markers leave offset gaps (KIP-98), and the
position moves past them. Records are turned into Arrow record batches of
bounded size so the Python worker hands Spark columns, not tuples; writes
take Arrow batches from Spark the same way. Where the time goes, measured,
is in docs/spark.md ("Performance").

The sink's common case (value, optional key, the topic option) skips
librdkafka when the compiled encoder is built: native_sink.py encodes the
Arrow batches into record batches and sends them over wire.py's own
connections; this module's librdkafka path stays the reference and takes
everything else.
"""

from __future__ import annotations

import gc
import logging
from array import array
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import chain

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


def end_within_log(where: str, until_offset: int, high: int, fail_on_data_loss: bool) -> int:
    """A read task's planned end against the partition's end now (the high
    watermark, or the last stable offset under read_committed): above it is
    data loss (the log was truncated or the topic recreated); the new end."""
    if until_offset > high:
        data_loss(
            f"{where}: the planned end offset {until_offset} is beyond the partition's "
            f"high watermark {high} (was the topic recreated or truncated?).",
            fail_on_data_loss,
        )
        return high
    return until_offset


def _base_config(config: dict[str, str]) -> dict:
    cfg = dict(config)
    # Spark's Kafka source reads uncommitted data by default (the Java client's
    # default); librdkafka's default is read_committed.
    cfg.setdefault("isolation.level", "read_uncommitted")
    cfg.setdefault("log_level", "3")
    return cfg


# A client idle longer than this is not reused: Kafka's metadata.max.age.ms,
# after which a Kafka client would refresh what it knows of its topics.
_CLIENT_MAX_IDLE_S = 300.0


class _IdleSlot:
    """At most one idle client of one kind in this process, for the next user
    with the same settings.

    Spark reuses its Python workers across tasks and queries (a worker runs
    one task at a time), and its planning workers across queries, as Spark's
    Kafka connector keeps its consumers and producers in per-executor pools
    (spark.kafka.consumer.cache.*, spark.kafka.producer.cache.timeout). A
    client taken from here is already connected and knows its topics: no
    start-up, no bootstrap connection and ApiVersions, no Metadata round trip
    and no teardown on the user's way out. Only a client whose user ended
    cleanly is kept; one of other settings, or idle longer than
    _CLIENT_MAX_IDLE_S, is closed when the next one is asked for.
    """

    def __init__(self, close=None) -> None:
        self._close = close
        self._item = None
        self._key: tuple = ()
        self._since = 0.0

    def take(self, key: tuple):
        """The idle client kept with `key`, or None (the slot is empty afterwards)."""
        item, self._item = self._item, None
        if item is None:
            return None
        if self._key == key and time.monotonic() - self._since < _CLIENT_MAX_IDLE_S:
            return item
        if self._close is not None:
            self._close(item)
        return None

    def keep(self, key: tuple, item) -> None:
        old, self._item = self._item, None
        if old is not None and self._close is not None:
            self._close(old)
        self._item, self._key, self._since = item, key, time.monotonic()

    @property
    def idle(self):
        return self._item

    def clear(self) -> None:
        """Close the idle client, if any (a process that is done with the broker)."""
        item, self._item = self._item, None
        if item is not None and self._close is not None:
            self._close(item)


def _settings_key(cfg: dict) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in cfg.items()))


class Admin:
    """Driver-side metadata and offset look-ups (one AdminClient; admin() keeps it
    idle between planning steps)."""

    def __init__(self, config: dict[str, str], timeout_ms: int) -> None:
        from confluent_kafka.admin import AdminClient

        self.bootstrap = config["bootstrap.servers"]
        self.timeout_s = timeout_ms / 1000
        # The last few client errors, for the failure message (bounded: a long
        # outage reports one error per reconnect attempt).
        self._errors: deque[str] = deque(maxlen=3)
        cfg = _base_config(config)
        cfg.pop("isolation.level", None)
        # The callback holds the deque, not self: no reference cycle, so a
        # dropped Admin's client (threads, sockets) goes at once, not at the
        # next cyclic-GC pass.
        errors = self._errors
        cfg["error_cb"] = lambda err: errors.append(str(err))
        self._admin = AdminClient(cfg)
        self._isolation = config.get("isolation.level", "read_uncommitted")

    def _unreachable(self, exc: Exception) -> BrokerUnreachableError:
        seen = f" (client errors: {'; '.join(self._errors)})" if self._errors else ""
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

    def offset_bounds(
        self, partitions: list[TopicPartition]
    ) -> tuple[PartitionOffsets, PartitionOffsets]:
        """(log_start_offsets, high_watermarks) of the partitions.

        Both ListOffsets requests (EARLIEST, LATEST) are sent before either
        answer is awaited: one round trip of planning, not two.
        """
        from confluent_kafka import IsolationLevel, KafkaException
        from confluent_kafka import TopicPartition as KafkaTopicPartition
        from confluent_kafka.admin import OffsetSpec

        if not partitions:
            return {}, {}
        isolation = (
            IsolationLevel.READ_COMMITTED
            if self._isolation == "read_committed"
            else IsolationLevel.READ_UNCOMMITTED
        )
        pending = [
            self._admin.list_offsets(
                {KafkaTopicPartition(t, p): spec for t, p in partitions},
                isolation_level=isolation,
                request_timeout=self.timeout_s,
            )
            for spec in (OffsetSpec.earliest(), OffsetSpec.latest())
        ]
        bounds: list[PartitionOffsets] = []
        for futures in pending:
            out: PartitionOffsets = {}
            for tp, future in futures.items():
                try:
                    out[(tp.topic, tp.partition)] = future.result(
                        timeout=self.timeout_s + 5
                    ).offset
                except KafkaException as exc:
                    raise KrefConnectorError(
                        f"ListOffsets for {tp.topic}-{tp.partition} failed on kref broker "
                        f"{self.bootstrap!r}: {exc}"
                    ) from None
            bounds.append(out)
        return bounds[0], bounds[1]


def ensure_topic(list_topics, topic: str, bootstrap: str, timeout_s: float) -> None:
    """Make sure `topic` exists, as a Kafka producer would: by asking for it.

    A Metadata request naming the topic lets a broker with
    auto.create.topics.enable create it (Spark's Kafka sink relies on the
    same); a broker that refuses answers UNKNOWN_TOPIC_OR_PARTITION, which
    becomes one clear error instead of a task stuck until its timeout.
    `list_topics` is a client's list_topics (the task's Producer).
    """
    from confluent_kafka import KafkaError, KafkaException

    retriable = (KafkaError.LEADER_NOT_AVAILABLE, KafkaError._TRANSPORT)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            metadata = list_topics(topic=topic, timeout=max(0.1, deadline - time.monotonic()))
        except KafkaException as exc:
            raise BrokerUnreachableError(
                f"kref broker unreachable at {bootstrap!r}: no answer within {timeout_s:g} s: {exc}"
            ) from None
        found = metadata.topics.get(topic)
        error = None if found is None else found.error
        if found is not None and error is None and found.partitions:
            return
        if error is not None and error.code() not in retriable:
            break
        if time.monotonic() >= deadline:
            break
        time.sleep(0.1)  # e.g. LEADER_NOT_AVAILABLE just after creation
    raise topic_refused(topic, bootstrap, error.str() if error is not None else None)


def topic_refused(topic: str, bootstrap: str, detail: str | None) -> UnknownTopicError:
    """The sink's error for a topic the broker neither has nor creates (both write paths)."""
    return UnknownTopicError(
        f"cannot write to topic {topic!r}: it does not exist on kref broker {bootstrap!r} and "
        f"the broker did not create it (is auto.create.topics.enable=false?)"
        + (f": {detail}" if detail else "")
    )


# The planning workers' AdminClient (Spark reuses them across queries, and a
# streaming query asks for offsets every micro-batch). AdminClient has no
# close(): dropping the last reference stops its threads.
_admins = _IdleSlot()


@contextmanager
def admin(config: dict[str, str], timeout_ms: int) -> Iterator[Admin]:
    """An Admin for one planning step, from this process's idle slot when one
    with the same settings is there; kept for the next step only if this one
    ended cleanly (a failure drops it, so no broken client is reused)."""
    key = _settings_key({**config, "kref.timeout.ms": timeout_ms})
    handle = _admins.take(key)
    if handle is None:
        handle = Admin(config, timeout_ms)
    else:
        handle._errors.clear()
    yield handle
    _admins.keep(key, handle)


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


class _ArrowBatchBuilder:
    """Records of one partition, gathered column by column into Arrow record batches.

    The per-record work is one C-level map() per field (unbound Message
    methods, no Python frame per record); everything else is per batch:
    topic and partition are constants (pa.repeat), offsets are a range when
    contiguous, timestamps are scaled with numpy. Measured, this halves the
    Python time per record of one comprehension per field.
    """

    def __init__(self, arrow_schema, topic: str, partition: int):
        import numpy as np
        import pyarrow as pa
        from confluent_kafka import Message

        self._np, self._pa = np, pa
        self._schema = arrow_schema
        self._topic = pa.scalar(topic, pa.string())
        self._partition = pa.scalar(partition, pa.int32())
        self._get = (Message.key, Message.value, Message.offset, Message.timestamp, Message.headers)
        self._headers: list | None = [] if "headers" in arrow_schema.names else None
        self._keys: list = []
        self._values: list = []
        self._offsets: list[int] = []
        # (type, ms) of each record, flattened as they arrive: the tuples
        # Message.timestamp() returns die at once instead of living (GC-tracked)
        # until the batch is built.
        self._stamps = array("q")

    def __len__(self) -> int:
        return len(self._offsets)

    def add(self, records: list) -> None:
        key, value, offset, timestamp, headers = self._get
        self._keys.extend(map(key, records))
        self._values.extend(map(value, records))
        first, last = records[0].offset(), records[-1].offset()
        if last - first + 1 == len(records):
            self._offsets.extend(range(first, last + 1))
        else:  # gaps: compaction, transaction markers
            self._offsets.extend(map(offset, records))
        self._stamps.extend(chain.from_iterable(map(timestamp, records)))
        if self._headers is not None:
            self._headers.extend(map(headers, records))

    def _binary(self, values: list):
        pa = self._pa
        # pyarrow converts a list of bytes ~50x faster when it infers the type
        # than when given type=binary; an all-null column infers as null.
        column = pa.array(values)
        if column.type == pa.binary():
            return column
        # All null (no cast: it would import pyarrow.compute, ~1 s per worker).
        return pa.nulls(len(values), pa.binary())

    def build(self):
        np, pa, schema = self._np, self._pa, self._schema
        n = len(self._offsets)
        stamps = np.frombuffer(self._stamps, np.int64).reshape(n, 2)
        kinds = stamps[:, 0]
        columns = {
            "key": self._binary(self._keys),
            "value": self._binary(self._values),
            "topic": pa.repeat(self._topic, n),
            "partition": pa.repeat(self._partition, n),
            "offset": pa.array(self._offsets, pa.int64()),
            # Microseconds as int64, reinterpreted: converting Python ints straight
            # to a tz-aware timestamp imports pandas machinery on first use (~1.5 s).
            "timestamp": pa.array(stamps[:, 1] * 1000).view(schema.field("timestamp").type),
            # librdkafka: 1 = CreateTime, 2 = LogAppendTime; Kafka/Spark: 0 and 1.
            "timestampType": pa.array(np.where(kinds > 0, kinds - 1, -1).astype(np.int32)),
        }
        if self._headers is not None:
            columns["headers"] = pa.array(self._headers, type=schema.field("headers").type)
            self._headers = []
        self._keys, self._values, self._offsets, self._stamps = [], [], [], array("q")
        return pa.RecordBatch.from_arrays([columns[name] for name in schema.names], schema=schema)


@contextmanager
def _gc_paused():
    """No cyclic-GC pass inside one consume() or one batch.add().

    Both allocate one GC-tracked object per record (a Message, a timestamp
    tuple), none of them in a cycle, so CPython's collector would run every
    700 records and scan the worker's heap (pyspark, pyarrow) each time for
    nothing. Pausing it over one bounded step (at most rowsPerArrowBatch
    records) leaves one pass per step: measured, a reader's CPU per record
    went down by about 15% (docs/spark.md). Never held across a yield, so
    Spark's code between batches runs with the collector as it found it.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def consumer_config(config: dict[str, str]) -> dict:
    """The reader's librdkafka settings (the bench's bare consumer uses them too)."""
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
    # librdkafka prefetches until its local queue holds queued.min.messages,
    # then waits fetch.queue.backoff.ms (default 1 s) before fetching again.
    # A task drains 100,000 queued records in a fraction of that second and
    # then sits idle: measured, reads swung between 0.2 and 0.8 M rows/s.
    # A short back-off keeps the fetches flowing; the queue stays bounded.
    cfg.setdefault("fetch.queue.backoff.ms", "10")
    # A task's range ends at or below the high watermark seen at planning, so
    # it never needs a Fetch parked at the end of the log; but librdkafka
    # sends one after the last records, and the broker holds it up to
    # fetch.wait.max.ms (default 500). A pooled consumer's next task cannot
    # fetch on that connection until it returns: measured, 504 ms before the
    # first records of the next range. 10 ms bounds that wait; it costs
    # nothing while there is data to fetch.
    cfg.setdefault("fetch.wait.max.ms", "10")
    cfg.setdefault("queued.max.messages.kbytes", "65536")
    # librdkafka's 1 MiB per partition, not more: larger Fetch responses
    # measured slower here (less overlap between broker and task).
    return cfg


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
    fetch_path: str = "auto",
) -> Iterator:
    """Yield pyarrow RecordBatches of the records in [from_offset, until_offset).

    from_offset may be EARLIEST (a partition that appeared after the stream's
    previous batch was planned). Runs inside a Spark task. The columnar fast
    path (native_source: Fetch, decoded into Arrow in C) reads what it can;
    the librdkafka path, the reference, reads the rest: everything when
    fetch_path is "librdkafka", from_offset is EARLIEST
    or the decoder is not built, and from wherever the fast path met
    something unusual otherwise.
    """
    from . import native_source

    if (
        fetch_path != "librdkafka"
        and native_source.available()
        and from_offset != EARLIEST
    ):
        rest = yield from native_source.read(
            config, topic, partition, from_offset, until_offset,
            fail_on_data_loss=fail_on_data_loss, rows_per_batch=rows_per_batch,
            arrow_schema=arrow_schema, timeout_ms=poll_timeout_ms,
        )  # fmt: skip
        if rest is None:
            return
        from_offset, until_offset = rest
        if from_offset >= until_offset:
            return
    # The librdkafka path (the reference).
    from confluent_kafka import Consumer, KafkaError, KafkaException, Message
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    cfg = consumer_config(config)
    key = _settings_key(cfg)
    consumer = _consumers.take(key)
    if consumer is None:
        consumer = Consumer(cfg)
    where = f"{topic}-{partition}"
    # Back to the pool only after the whole range was handed to Spark: a task
    # that failed or that Spark stopped early (a limit) closes its consumer.
    clean = False
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
        until_offset = end_within_log(where, until_offset, high, fail_on_data_loss)
        if from_offset >= until_offset:
            clean = True
            return
        consumer.assign([KafkaTopicPartition(topic, partition, from_offset)])
        batch = _ArrowBatchBuilder(arrow_schema, topic, partition)
        position = from_offset
        deadline = time.monotonic() + poll_timeout_ms / 1000

        while position < until_offset:
            with _gc_paused():
                messages = consumer.consume(min(rows_per_batch, until_offset - position), 0.5)
            if not messages:
                if time.monotonic() > deadline:
                    raise KrefConnectorError(
                        f"reading {where}: no progress at offset {position} (until "
                        f"{until_offset}) within kafkaConsumer.pollTimeoutMs={poll_timeout_ms}"
                    )
                continue
            deadline = time.monotonic() + poll_timeout_ms / 1000
            errors = list(map(Message.error, messages))
            records = messages
            # any(), not errors.count(None): list.count compares with ==, and
            # KafkaError == None raises inside it (a SystemError), so the first
            # PARTITION_EOF or out-of-range report crashed the task.
            if any(errors):
                records = [m for m, err in zip(messages, errors) if err is None]
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
            if records and records[0].offset() < position:
                # Nothing from before this task's offset (a pooled consumer's
                # earlier assignment is fenced by librdkafka; this is cheap).
                records = [m for m in records if m.offset() >= position]
            if records and records[-1].offset() >= until_offset:
                records = [m for m in records if m.offset() < until_offset]
                position = until_offset
            if records:
                position = max(position, records[-1].offset() + 1)
                with _gc_paused():
                    batch.add(records)
            if len(batch) >= rows_per_batch:
                yield batch.build()
            if position < until_offset:
                # The consumer's own position covers gaps (compaction, control records).
                pos = consumer.position([KafkaTopicPartition(topic, partition)])[0].offset
                if pos >= 0:
                    position = max(position, pos)
        if len(batch):
            yield batch.build()
        clean = True
    finally:
        if clean:
            consumer.unassign()
            _consumers.keep(key, consumer)
        else:
            consumer.close()


# The read tasks' consumer pool (one idle consumer per worker), as Spark's
# Kafka source pools its consumers: a task skips the consumer's start-up, its
# connection, the topic's Metadata and the close (measured at load 14: 20-80
# ms a task in all, against 250-400 ms of reading 100,000 records).
_consumers = _IdleSlot(close=lambda consumer: consumer.close())


def producer_config(config: dict[str, str], *, flush_timeout_ms: int) -> dict:
    """The sink's librdkafka settings (the bench's bare producer uses them too)."""
    cfg = _base_config(config)
    cfg.pop("isolation.level", None)
    cfg.setdefault("acks", "all")
    cfg.setdefault("partitioner", "murmur2_random")
    cfg.setdefault("linger.ms", "5")
    # One bounded local queue per task: Spark hands over 10,000-row Arrow
    # batches, so 64 MiB / 100,000 records leaves room for several in flight.
    cfg.setdefault("queue.buffering.max.kbytes", "65536")
    cfg.setdefault("queue.buffering.max.messages", "100000")
    # Never let a bad topic hang the task for librdkafka's 5-minute default.
    cfg.setdefault("message.timeout.ms", str(flush_timeout_ms))
    # Success needs no report: flush() returning 0 with no failure reported
    # means every record was acknowledged. Only failures call back.
    cfg["delivery.report.only.error"] = True
    return cfg


@dataclass(frozen=True)
class SinkColumns:
    """Where each Kafka field comes from in the input rows (resolved on the driver).

    Column names are those of the DataFrame; None = the column is absent.
    `topic` is the `topic` option, which wins over a `topic` column as in
    Spark's Kafka sink.
    """

    value: str
    key: str | None = None
    topic: str | None = None
    topic_column: str | None = None
    partition: str | None = None
    headers: str | None = None


# Failures kept for the task's error message; the rest are only counted.
_MAX_REPORTED_FAILURES = 10


# A bound on the topics one producer remembers as existing (topic columns).
_MAX_KNOWN_TOPICS = 10_000


class _DeliveryReports:
    """What a producer's callbacks report; each task that borrows it resets it.

    Its own object, not the _PooledProducer: callbacks bound to the object
    that holds the Producer would make a reference cycle, so a producer
    dropped after a failed task would keep its threads and socket until a
    cyclic-GC pass.
    """

    def __init__(self) -> None:
        # The last few client errors, for the failure message (bounded: a long
        # outage reports one error per reconnect attempt).
        self.errors: deque[str] = deque(maxlen=3)
        self.failures: list[str] = []
        self.failed = 0

    def reset(self) -> None:
        self.errors.clear()
        self.failures.clear()
        self.failed = 0

    def on_error(self, err) -> None:
        self.errors.append(str(err))

    def on_failure(self, err, msg) -> None:
        if err is None:
            return
        self.failed += 1
        if len(self.failures) < _MAX_REPORTED_FAILURES:
            self.failures.append(f"{msg.topic()}-{msg.partition()}: {err.str()}")


class _PooledProducer:
    """One librdkafka producer, what its callbacks report, and the topics it knows."""

    def __init__(self, key: tuple, cfg: dict):
        from confluent_kafka import Producer

        self.key = key
        self.reports = _DeliveryReports()
        # Topics this producer has seen in Metadata (no look-up again).
        self.known_topics: set[str] = set()
        self.producer = Producer(
            {**cfg, "error_cb": self.reports.on_error, "on_delivery": self.reports.on_failure}
        )


# The write tasks' producer pool (one idle producer per worker).
_producers = _IdleSlot()


def _take_producer(cfg: dict) -> _PooledProducer:
    key = _settings_key(cfg)
    pooled = _producers.take(key)
    if pooled is None:
        return _PooledProducer(key, cfg)
    pooled.reports.reset()
    return pooled


class BatchProducer:
    """Produce Arrow record batches with acks=all inside one Spark task; any failure raises.

    Each batch is turned into Python lists one column at a time (Arrow's C
    conversion), then one produce() call per record queues it in librdkafka,
    which batches records per partition into ProduceRequests (linger.ms).
    No per-record callback: delivery.report.only.error makes librdkafka
    report failures only, checked after every batch (so a failing task stops
    early) and at flush. Partitioning matches the Java client (murmur2) so
    keyed records land where a Spark Kafka sink would put them. The
    librdkafka producer comes from the worker's pool (_take_producer) when
    first needed and goes back only after a clean flush (write_batches).

    The common case (value, optional key and headers, the `topic` option, no
    partition column) takes the columnar fast path instead when it is built
    (native_sink.NativeSink: Arrow buffers to record batches in C, sent by
    the connector itself); rows it cannot send (too large for the topic, or
    a column type it does not read) come back here to librdkafka.
    """

    def __init__(
        self,
        config: dict[str, str],
        columns: SinkColumns,
        *,
        metadata_timeout_ms: int,
        flush_timeout_ms: int,
    ):
        from . import native_sink

        self.columns = columns
        self.bootstrap = config["bootstrap.servers"]
        self._cfg = producer_config(config, flush_timeout_ms=flush_timeout_ms)
        # The librdkafka producer, taken from the pool when first needed.
        self._client: _PooledProducer | None = None
        self._metadata_timeout_s = metadata_timeout_ms / 1000
        self._flush_timeout_s = flush_timeout_ms / 1000
        self.records = 0
        self.native = None
        c = columns
        if c.topic is not None and c.partition is None and native_sink.usable(self._cfg):
            self.native = native_sink.NativeSink(
                self._cfg, c.topic, metadata_timeout_ms=metadata_timeout_ms,
                flush_timeout_ms=flush_timeout_ms, fallback=self._produce_fallback,
            )  # fmt: skip

    @property
    def _pooled(self) -> _PooledProducer:
        if self._client is None:
            self._client = _take_producer(self._cfg)
        return self._client

    @property
    def _producer(self):
        return self._pooled.producer

    @property
    def _failures(self) -> list[str]:
        return self._pooled.reports.failures

    @property
    def _errors(self) -> deque[str]:
        return self._pooled.reports.errors

    @property
    def _known_topics(self) -> set[str]:
        return self._pooled.known_topics

    def _ensure_topic(self, topic) -> None:
        if topic is None:
            raise KrefConnectorError(
                "a row has a null topic: set the 'topic' column or the 'topic' option"
            )
        ensure_topic(self._producer.list_topics, topic, self.bootstrap, self._metadata_timeout_s)
        if len(self._known_topics) >= _MAX_KNOWN_TOPICS:
            self._known_topics.clear()
        self._known_topics.add(topic)

    def write(self, batch) -> None:
        """Queue every row of one pyarrow RecordBatch (waits while the queue is full)."""
        c = self.columns
        n = batch.num_rows
        if n == 0:
            return
        if self.native is not None and self.native.write(
            batch.column(c.key) if c.key else None, batch.column(c.value),
            batch.column(c.headers) if c.headers else None,
        ):
            self.records += n
            return
        values = batch.column(c.value).to_pylist()
        keys = batch.column(c.key).to_pylist() if c.key else [None] * n
        if c.topic is not None and c.partition is None and c.headers is None:
            if c.topic not in self._known_topics:
                self._ensure_topic(c.topic)
            self._produce_simple(c.topic, values, keys)
        else:
            self._produce_general(batch, values, keys)
        self.records += n
        self._producer.poll(0)  # serve failure reports without waiting
        if self._failures:
            self._raise_failures()

    def _produce_simple(self, topic: str, values: list, keys: list) -> None:
        # The hot loop: one C call per record, nothing else.
        produce = self._producer.produce
        i, n = 0, len(values)
        while i < n:
            try:
                for i in range(i, n):  # noqa: B020 (resume at the record that did not fit)
                    produce(topic, values[i], keys[i])
                i = n
            except BufferError:
                self._wait_for_room()
            except Exception as exc:
                self._cannot_produce(topic, None, exc)

    def _produce_fallback(self, keys: list, values: list, headers: list | None = None) -> None:
        """Rows the fast path hands back (native_sink), produced with librdkafka."""
        topic = self.columns.topic
        if topic not in self._known_topics:
            self._ensure_topic(topic)
        if headers is None:
            self._produce_simple(topic, values, keys)
        else:
            n = len(values)
            self._produce_rows([topic] * n, values, keys, [None] * n, headers)
        self._producer.poll(0)
        if self._failures:
            self._raise_failures()

    def _produce_general(self, batch, values: list, keys: list) -> None:
        c = self.columns
        n = len(values)
        topics = (
            [c.topic] * n if c.topic is not None else batch.column(c.topic_column).to_pylist()
        )
        for topic in set(topics) - self._known_topics:
            self._ensure_topic(topic)
        partitions = batch.column(c.partition).to_pylist() if c.partition else [None] * n
        headers = batch.column(c.headers).to_pylist() if c.headers else [None] * n
        self._produce_rows(topics, values, keys, partitions, headers)

    def _produce_rows(self, topics: list, values: list, keys: list, partitions: list, headers: list) -> None:
        produce = self._producer.produce
        for i in range(len(values)):
            partition = partitions[i]
            kwargs = {"partition": -1 if partition is None else int(partition)}
            if headers[i]:
                kwargs["headers"] = [(h["key"], h["value"]) for h in headers[i]]
            while True:
                try:
                    produce(topics[i], values[i], keys[i], **kwargs)
                    break
                except BufferError:
                    self._wait_for_room()
                except Exception as exc:
                    self._cannot_produce(topics[i], partition, exc)

    def _wait_for_room(self) -> None:
        # librdkafka's queue is bounded: room comes back as acknowledgements arrive.
        self._producer.poll(0.05)
        if self._failures:
            self._raise_failures()

    def _cannot_produce(self, topic: str, partition, exc: Exception):
        where = topic if partition is None else f"{topic}-{partition}"
        detail = exc.args[0].str() if exc.args and hasattr(exc.args[0], "str") else exc
        raise KrefConnectorError(
            f"kref sink: cannot produce to {where} on kref broker {self.bootstrap!r}: {detail}"
        ) from None

    def _raise_failures(self) -> None:
        raise KrefConnectorError(
            f"kref sink: {self._pooled.reports.failed} record(s) not acknowledged by kref broker "
            f"{self.bootstrap!r}: {'; '.join(self._failures)}"
        )

    def flush(self) -> int:
        """Wait for every acknowledgement; return the number of records written."""
        if self.native is not None:
            self.native.flush()
        if self._client is None:
            return self.records
        left = self._producer.flush(self._flush_timeout_s)
        if self._failures:
            self._raise_failures()
        if left:
            seen = f" (client errors: {'; '.join(self._errors)})" if self._errors else ""
            raise BrokerUnreachableError(
                f"kref sink: {left} record(s) still unacknowledged after flushTimeoutMs="
                f"{int(self._flush_timeout_s * 1000)} by kref broker {self.bootstrap!r}{seen}"
            )
        return self.records


def write_batches(
    config: dict[str, str],
    columns: SinkColumns,
    batches,
    *,
    metadata_timeout_ms: int,
    flush_timeout_ms: int,
) -> int:
    """A write task's body: produce every Arrow batch, then wait for every acknowledgement."""
    producer = BatchProducer(
        config, columns, metadata_timeout_ms=metadata_timeout_ms, flush_timeout_ms=flush_timeout_ms
    )
    # Kept for the next task only after a clean end: a failed task's producer
    # may hold queued records and failure reports, and is dropped with it
    # (and the fast path's connections, which may have answers on the way).
    try:
        for batch in batches:
            producer.write(batch)
        written = producer.flush()
    except BaseException:
        if producer.native is not None:
            producer.native.abandon()
        raise
    if producer.native is not None:
        producer.native.done()
    if producer._client is not None:
        _producers.keep(producer._client.key, producer._client)
    return written
