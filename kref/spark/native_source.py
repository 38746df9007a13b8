"""The read task's columnar fast path: Fetch record batches, decode them into Arrow in C.

Theory of operation: the librdkafka path (the rest of client.read_range)
builds one Message object per record and gathers its fields into Arrow
columns in Python; a bare consumer pays the first half of that and no more.
This path skips both: it sends FetchRequests (v12, the task's isolation
level, at most FETCH_MAX_BYTES a response) for the task's partition to the
partition's leader on the worker's own connection (kref/spark/wire.py,
pooled per process), and _csource.c turns each response's record batches
straight into Arrow buffers (key/value validity, offsets and data; offset;
timestamp; timestampType; with includeHeaders the headers column, Arrow's
list<struct<key: string, value: binary>>, null for a record without
headers as Spark's Kafka source and librdkafka give it), so no Python
object is made per record. Topic
and partition are constant columns. The next Fetch (from the offset after
the response's last whole batch, read from the batch headers) is sent before
the current response is decoded, so the broker reads the log while the task
decodes: at most two responses per task exist at once.

The same rules as the librdkafka path: records in [from_offset, until_offset)
only, the position (not the last record) ends the read, so compaction gaps
and transaction markers are passed over (control batches are skipped, their
offsets count); a planned end above the high watermark (the last stable
offset under read_committed) is data loss under failOnDataLoss. Compressed
batches are decompressed with kref.records.compression and their records
decoded in C too. A header key that is not UTF-8 (Arrow's string type needs
it) is unusual too.

Anything unusual hands the rest of the range to the librdkafka path, which
stays the reference: read() returns the (position, until_offset) it reached
and the caller goes on from there. Unusual is: any partition or request
error (OFFSET_OUT_OF_RANGE thus keeps its data-loss semantics), a legacy
magic 0/1 batch, a malformed batch, read_committed with aborted transactions
in a response, an empty response below the end, no leader, no Fetch v12, a
connection failure. Without the compiled _csource module this path is off
(one log line at import) and every read uses librdkafka.

decode_reference() is the pure-Python reference of the decoder, built on
kref/records/: tests compare its columns with _csource's, and both with the
librdkafka path's, column for column.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterator

from kref.records import header as h
from kref.records.batch import records_section
from kref.records.errors import CorruptRecordError

log = logging.getLogger("kref.spark")

try:
    from kref.spark import _csource
except ImportError:  # not built: scripts/build_cwalker.py
    _csource = None
    log.info("kref.spark: the reader's columnar decoder (_csource) is not built "
             "(python scripts/build_cwalker.py); reads use librdkafka")

FETCH_API_KEY = 1
FETCH_VERSION = 12
# librdkafka's max.partition.fetch.bytes and fetch.max.bytes defaults are
# 1 MiB and 50 MiB; one partition per request here, so one bound for both.
FETCH_MAX_BYTES = 1 << 20
# The largest response frame read (a batch larger than FETCH_MAX_BYTES still
# comes whole, KIP-74; the broker's message.max.bytes bounds it).
MAX_FRAME_BYTES = 64 << 20

# _csource.decode's status: where and why its walk stopped.
END, PARTIAL, COMPRESSED, UNUSUAL = 0, 1, 2, 3

_OFFSET_AND_LENGTH = struct.Struct(">qi")
_LAST_OFFSET_DELTA = struct.Struct(">i")


def _utf8(key: str) -> bool:
    """Whether a header key kref/records decoded (surrogateescape) was valid UTF-8."""
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class Fallback(Exception):
    """Something this path does not handle: the librdkafka path reads the rest."""


def available() -> bool:
    return _csource is not None


def next_fetch_offset(records: bytes, position: int) -> int:
    """The offset after the last whole batch of a response (position if none):
    where the next Fetch starts. Reads only the batch headers."""
    pos, n, nxt = 0, len(records), position
    while n - pos >= h.HEADER_SIZE:
        base, length = _OFFSET_AND_LENGTH.unpack_from(records, pos)
        if length < h.HEADER_SIZE - h.LOG_OVERHEAD or n - pos < h.LOG_OVERHEAD + length:
            break
        (last_delta,) = _LAST_OFFSET_DELTA.unpack_from(records, pos + 23)
        nxt = max(nxt, base + last_delta + 1)
        pos += h.LOG_OVERHEAD + length
    return nxt


def decode_columns(
    records: bytes, from_offset: int, until_offset: int, headers: bool = False
) -> tuple[list[tuple], int]:
    """_csource's column tuples for the records of one response in
    [from_offset, until_offset) (with the headers column's buffers when
    `headers`), and the offset after the last whole batch (-1 if none).
    Raises Fallback on what the librdkafka path must read."""
    chunks: list[tuple] = []
    pos, next_offset = 0, -1
    try:
        while True:
            status, stop, batch_next, cols = _csource.decode(records, pos, from_offset, until_offset, headers)
            next_offset = max(next_offset, batch_next)
            if cols[0]:
                chunks.append(cols)
            if status == UNUSUAL:
                raise Fallback(f"unusual batch (magic {records[stop + 16] if len(records) > stop + 16 else '?'})")
            if status != COMPRESSED:
                return chunks, next_offset
            header = h.read_header(records, stop)
            if header.next_offset > from_offset:
                cols = _csource.decode_section(
                    records_section(records, header), header.records_count, header.base_offset,
                    header.last_offset_delta, header.base_timestamp, header.is_log_append_time,
                    header.max_timestamp,
                    from_offset, until_offset, headers,
                )  # fmt: skip
                if cols[0]:
                    chunks.append(cols)
            next_offset = max(next_offset, header.next_offset)
            pos = header.next_position
    except (ValueError, CorruptRecordError) as exc:
        raise Fallback(f"cannot decode: {exc}") from None


class ArrowColumns:
    """Arrow record batches of one partition's records, from _csource's buffers."""

    def __init__(self, arrow_schema, topic: str, partition: int):
        import pyarrow as pa

        self._pa = pa
        self.schema = arrow_schema
        self._topic = pa.scalar(topic, pa.string())
        self._partition = pa.scalar(partition, pa.int32())
        self._stamp_type = arrow_schema.field("timestamp").type
        self.headers = "headers" in arrow_schema.names
        if self.headers:
            self._headers_type = arrow_schema.field("headers").type  # list<struct<key, value>>
            self._header_type = self._headers_type.value_type

    def batch(self, cols: tuple):
        pa = self._pa
        buf = pa.py_buffer
        n, key_nulls, kv, ko, kd, value_nulls, vv, vo, vd, offsets, stamps, types = cols[:12]
        arrays = {
            "key": pa.Array.from_buffers(pa.binary(), n, [kv and buf(kv), buf(ko), buf(kd)], key_nulls),
            "value": pa.Array.from_buffers(pa.binary(), n, [vv and buf(vv), buf(vo), buf(vd)], value_nulls),
            "topic": pa.repeat(self._topic, n),
            "partition": pa.repeat(self._partition, n),
            "offset": pa.Array.from_buffers(pa.int64(), n, [None, buf(offsets)], 0),
            "timestamp": pa.Array.from_buffers(self._stamp_type, n, [None, buf(stamps)], 0),
            "timestampType": pa.Array.from_buffers(pa.int32(), n, [None, buf(types)], 0),
        }
        if self.headers:
            empty, lv, lo, nh, hko, hkd, hv_nulls, hvv, hvo, hvd = cols[12:]
            keys = pa.Array.from_buffers(pa.string(), nh, [None, buf(hko), buf(hkd)], 0)
            values = pa.Array.from_buffers(pa.binary(), nh, [hvv and buf(hvv), buf(hvo), buf(hvd)], hv_nulls)
            pairs = pa.Array.from_buffers(self._header_type, nh, [None], 0, children=[keys, values])
            arrays["headers"] = pa.Array.from_buffers(
                self._headers_type, n, [lv and buf(lv), buf(lo)], empty, children=[pairs]
            )
        return pa.RecordBatch.from_arrays([arrays[name] for name in self.schema.names], schema=self.schema)


def decode_reference(records: bytes, from_offset: int, until_offset: int, arrow_schema, topic: str,
                     partition: int):
    """The pure-Python reference of decode_columns + ArrowColumns, on kref/records:
    (one RecordBatch, the offset after the last whole batch or -1). Raises
    Fallback where the fast path would."""
    import pyarrow as pa

    from kref.records.batch import RecordBatch
    from kref.records.memory_records import iter_batches

    keys, values, offsets, stamps, types, headers = [], [], [], [], [], []
    with_headers = "headers" in arrow_schema.names
    next_offset = -1
    try:
        for batch in iter_batches(records, verify_crc=False, allow_partial_tail=True):
            if not isinstance(batch, RecordBatch):
                raise Fallback("legacy batch")
            if batch.base_offset >= until_offset:
                break
            next_offset = max(next_offset, batch.header.next_offset)
            if batch.is_control_batch:
                continue
            for r in batch.records:
                if from_offset <= r.offset < until_offset:
                    keys.append(r.key)
                    values.append(r.value)
                    offsets.append(r.offset)
                    stamps.append(r.timestamp * 1000)
                    types.append(batch.timestamp_type)
                    if with_headers:
                        if any(not hd.key.isascii() and not _utf8(hd.key) for hd in r.headers):
                            raise Fallback("a header key is not UTF-8")
                        headers.append([{"key": hd.key, "value": hd.value} for hd in r.headers] or None)
    except CorruptRecordError as exc:
        raise Fallback(f"cannot decode: {exc}") from None
    n = len(offsets)
    columns = {
        "key": pa.array(keys, pa.binary()),
        "value": pa.array(values, pa.binary()),
        "topic": pa.array([topic] * n, pa.string()),
        "partition": pa.array([partition] * n, pa.int32()),
        "offset": pa.array(offsets, pa.int64()),
        "timestamp": pa.array(stamps, pa.int64()).view(arrow_schema.field("timestamp").type),
        "timestampType": pa.array(types, pa.int32()),
    }
    if with_headers:
        columns["headers"] = pa.array(headers, arrow_schema.field("headers").type)
    batch = pa.RecordBatch.from_arrays([columns[name] for name in arrow_schema.names], schema=arrow_schema)
    return batch, next_offset


def _fetch_request(topic: str, partition: int, offset: int, isolation: int):
    import datetime

    import kio.schema.fetch.v12.request as f12
    from kio.static.primitive import i32Timedelta

    return f12.FetchRequest(
        # Never parked: a task fetches below the end it planned, so data is
        # there; an empty answer means something unusual (fallback).
        max_wait=i32Timedelta.parse(datetime.timedelta(0)), min_bytes=1,
        max_bytes=FETCH_MAX_BYTES, isolation_level=isolation, session_id=0, session_epoch=-1,
        forgotten_topics_data=(), rack_id="",
        topics=(f12.FetchTopic(topic=topic, partitions=(
            f12.FetchPartition(partition=partition, fetch_offset=offset,
                               partition_max_bytes=FETCH_MAX_BYTES),)),),
    )  # fmt: skip


def read(
    config: dict[str, str],
    topic: str,
    partition: int,
    from_offset: int,
    until_offset: int,
    *,
    fail_on_data_loss: bool,
    rows_per_batch: int,
    arrow_schema,
    timeout_ms: int,
) -> Iterator:
    """Yield RecordBatches of [from_offset, until_offset); return None when the
    range is done, or (position, until_offset) for the librdkafka path to go on from."""
    from kref.protocol.codec import decode_response, response_class
    from kref.spark import client, wire

    where = f"{topic}-{partition}"
    isolation = 1 if config.get("isolation.level") == "read_committed" else 0
    if not wire.native_config(config):
        return from_offset, until_offset
    brokers = wire.brokers(config["bootstrap.servers"], timeout_s=timeout_ms / 1000)
    try:
        leaders = brokers.leaders(topic)
        if partition >= len(leaders) or leaders[partition] < 0:
            # Partitions added, or a leader elected, since the pooled Brokers
            # last asked: ask again once.
            leaders = brokers.leaders(topic, refresh=True)
        node = leaders[partition] if partition < len(leaders) else -1
        if node < 0 or brokers.api_version(node, FETCH_API_KEY, FETCH_VERSION, FETCH_VERSION) is None:
            wire.keep(brokers)
            return from_offset, until_offset
        conn = brokers.connection(node)
    except (OSError, client.KrefConnectorError) as exc:
        log.debug("%s: fast path off (%s)", where, exc)
        brokers.close()
        return from_offset, until_offset
    response_type = response_class(FETCH_API_KEY, FETCH_VERSION)
    columns = ArrowColumns(arrow_schema, topic, partition)
    position = from_offset
    checked_end = False
    in_flight: int | None = None  # the correlation id of the Fetch sent and not yet read
    clean = False  # the Brokers goes back to the worker's idle slot
    try:
        in_flight = conn.send(_fetch_request(topic, partition, position, isolation))
        while position < until_offset:
            frame = conn.read_frame()
            sent, in_flight = in_flight, None
            if frame is None:
                raise ConnectionError("the broker closed the connection")
            try:
                correlation_id, response = decode_response(frame, response_type)
            except Exception as exc:  # kio's errors on a malformed answer: not this connection again
                raise ConnectionError(f"undecodable Fetch response: {exc!r}") from None
            if correlation_id != sent:
                raise ConnectionError(f"correlation id {correlation_id}, expected {sent}")
            if response.error_code or len(response.responses) != 1 or len(response.responses[0].partitions) != 1:
                raise Fallback(f"Fetch error {int(response.error_code)}")
            data = response.responses[0].partitions[0]
            if data.error_code:
                # e.g. NOT_LEADER_OR_FOLLOWER: the next task asks for leaders afresh.
                try:
                    brokers.leaders(topic, refresh=True)
                except client.KrefConnectorError as exc:
                    raise ConnectionError(f"leader refresh failed: {exc}") from None
                raise Fallback(f"partition error {int(data.error_code)}")
            if not checked_end:
                # The librdkafka path's check, from the first answer instead
                # of a ListOffsets round trip of its own.
                high = int(data.last_stable_offset if isolation else data.high_watermark)
                until_offset = client.end_within_log(where, until_offset, high, fail_on_data_loss)
                checked_end = True
                if position >= until_offset:
                    break
            if isolation and data.aborted_transactions:
                raise Fallback("aborted transactions under read_committed")
            records = data.records or b""
            nxt = next_fetch_offset(records, position)
            if nxt <= position:
                raise Fallback(f"no whole batch at offset {position}")
            if nxt < until_offset:
                # Pipelined: the broker reads the next range while this one decodes.
                in_flight = conn.send(_fetch_request(topic, partition, nxt, isolation))
            chunks, next_offset = decode_columns(records, position, until_offset, columns.headers)
            position = max(nxt, next_offset)
            for cols in chunks:
                batch = columns.batch(cols)
                n = batch.num_rows
                if n <= rows_per_batch:
                    yield batch
                else:
                    for start in range(0, n, rows_per_batch):
                        yield batch.slice(start, rows_per_batch)
        clean = True
        return None
    except Fallback as why:
        log.debug("%s: librdkafka reads from offset %d (%s)", where, position, why)
        clean = True
        return position, until_offset
    except OSError as exc:
        # A connection failure (ConnectionError, socket timeout), an
        # undecodable answer or a failed leader refresh: this Brokers is not
        # reused. (A DataLossError is the task's failure, not a hand-over.)
        log.debug("%s: librdkafka reads from offset %d (%s)", where, position, exc)
        return position, until_offset
    finally:
        if in_flight is not None:
            # A Fetch still unanswered (a fallback, or Spark stopped the task
            # early): that connection is out of step for the next task.
            brokers.drop(node)
        if clean:
            wire.keep(brokers)
        else:
            brokers.close()
