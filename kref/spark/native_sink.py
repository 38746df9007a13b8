"""The Spark sink's columnar fast path: Arrow batches to ProduceRequests, no per-row Python.

Theory of operation
-------------------
The librdkafka path (client.BatchProducer) turns every Arrow batch into
Python lists and calls produce() once per row; librdkafka then copies and
batches each record again. For the sink's common case (a binary or string
`value` column, an optional `key` column of the same kinds, an optional
`headers` column, the `topic` option, no `partition` column, plain
connections, acks 1 or all, any compression.type) this module does the whole job per Arrow batch instead:

1. `_csink.encode` (kref/spark/_csink.c) reads the Arrow buffers (offsets,
   data, validity bitmaps), picks each row's partition (keyed rows: Kafka's
   murmur2, made positive, modulo the partition count, as the Java client
   and librdkafka's murmur2_random do; rows with a null key: one partition
   per Arrow batch, rotating from a random start, as the Java client's
   sticky partitioner does) and writes record batches v2 (CreateTime = now,
   no producer id, uncompressed, CRC-32C), each at most MAX_BATCH_BYTES
   before compression. With `compression.type` set (gzip, snappy, lz4,
   zstd; `compression.level` honoured), `compress_batch` then compresses
   each batch's records section with kref/records/compression.py (Kafka's
   framings), sets the codec bits and the length, and computes the CRC
   again: a few dozen batches per 200k rows, so Python costs nothing here.
   `encode_python` below is the pure-Python reference, built on
   kref/records/batch.py; tests compare the two byte for byte.
2. The batches go to each partition's leader (kref/spark/wire.py's
   connections and Metadata) in ProduceRequests v3-v8 of at most
   MAX_REQUEST_BYTES and one batch per partition (Kafka's rule for v2
   records), pipelined: at most MAX_IN_FLIGHT requests per connection,
   answers read in order.
3. Each partition's answer: no error, the batch is acknowledged. A retriable
   error (NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, REQUEST_TIMED_OUT,
   a lost connection, ...): the leaders are asked again and the batch is
   sent again after RETRY_BACKOFF_S, until the batch's deadline
   (flushTimeoutMs after it was first queued, librdkafka's
   message.timeout.ms in the other path), then the task fails. A batch the
   broker finds too large (MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE: a
   topic's max.message.bytes below MAX_BATCH_BYTES) is split in two and
   sent again, and the task's batches stay at most that size from then on
   (the Java producer splits the same way); a single row too large for the
   topic, or larger than MAX_BATCH_BYTES, goes to the librdkafka path, which
   reports it as it always has. Any other error fails the task with the
   same message the librdkafka path gives.

The partition leaders (and count) come from wire.py's cache, refreshed on
retriable errors and, as a Kafka client's metadata.max.age.ms, when this
process last asked for the topic more than METADATA_MAX_AGE_S ago, so a
topic that gained partitions is seen within that time.

At-least-once, as the librdkafka path: a batch is only counted once the
broker answered it without error; a retry may write a batch twice (a lost
answer) and may reorder batches of one partition across a retry.

Without the compiled encoder (or with KREF_SPARK_NATIVE_SINK=0 in the
environment) nothing here runs and every write takes the librdkafka path;
the module logs that once at import.
"""

from __future__ import annotations

import logging
import os
import random
import struct
import time
from collections import deque
from typing import NamedTuple

from kref.protocol.codec import decode_response, response_class
from kref.protocol.errors import ErrorCode, is_retriable

from . import client, wire

log = logging.getLogger("kref.spark")

try:
    from . import _csink
except ImportError:  # not built: the librdkafka path serves every write
    _csink = None
    log.info("kref sink: compiled encoder not built (python scripts/build_cwalker.py): writes use librdkafka")

ENABLED = _csink is not None and os.environ.get("KREF_SPARK_NATIVE_SINK", "1") != "0"

PRODUCE_KEY = 0
# v3-v8 share one layout (topics by name, no tagged fields); every broker
# since Kafka 0.11 serves them.
_PRODUCE_VERSIONS = (3, 8)
# librdkafka's message.max.bytes default, under Kafka's and kref's default
# max.message.bytes (1 MiB + 12): a batch no default topic refuses.
MAX_BATCH_BYTES = 1_000_000
# A bound on one ProduceRequest (one batch per partition of one leader).
MAX_REQUEST_BYTES = 8 * 1024 * 1024
# Requests awaiting an answer on one connection (librdkafka's
# max.in.flight.requests.per.connection is 1,000,000; the Java client's 5).
MAX_IN_FLIGHT = 5
# How much longer than request.timeout.ms a Produce answer is waited for.
_ANSWER_MARGIN_MS = 5_000
# retry.backoff.ms, both clients' default.
RETRY_BACKOFF_S = 0.1
# metadata.max.age.ms, both clients' default.
METADATA_MAX_AGE_S = 300.0
_MAX_TOPICS_REMEMBERED = 10_000
# (bootstrap, topic) -> when this process last refreshed the topic's leaders.
_refreshed: dict[tuple[str, str], float] = {}
_TOO_LARGE = frozenset({int(ErrorCode.MESSAGE_TOO_LARGE), int(ErrorCode.RECORD_LIST_TOO_LARGE)})
_UNKNOWN_SERVER_ERROR = int(ErrorCode.UNKNOWN_SERVER_ERROR)
_KNOWN_CODES = frozenset(int(c) for c in ErrorCode)
_CLIENT_ID = b"kref-spark"
_I32 = struct.Struct(">i")
_PARTITION = struct.Struct(">ii")
# librdkafka's compression.type (alias compression.codec) names -> Kafka's codec ids.
_CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
# librdkafka clamps compression.level to each codec's range (snappy has none).
_MAX_LEVEL = {1: 9, 2: None, 3: 12, 4: 22}


# --- the reference encoder ------------------------------------------------------


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (Utils.murmur2) as an unsigned 32-bit int."""
    mask = 0xFFFFFFFF
    m = 0x5BD1E995
    length = len(data)
    h = (0x9747B28C ^ length) & mask
    quads = length // 4
    for i in range(quads):
        k = int.from_bytes(data[4 * i : 4 * i + 4], "little")
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    tail = data[4 * quads :]
    if len(tail) == 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if tail:
        h ^= tail[0]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h


def _as_bytes(item) -> bytes | None:
    return item.encode("utf-8") if isinstance(item, str) else item


def compression_of(cfg: dict) -> tuple[int, int | None] | None:
    """(codec, level or None for the codec's default) of the sink's librdkafka
    settings; None for a value librdkafka refuses (its path reports it)."""
    name = str(cfg.get("compression.type", cfg.get("compression.codec", "none"))).strip().lower()
    codec = _CODECS.get(name)
    if codec is None:
        return None
    try:
        level = int(cfg.get("compression.level", -1))
    except (TypeError, ValueError):
        return None
    if not -1 <= level <= 12:
        return None  # librdkafka's own range
    if codec == 0 or level == -1 or _MAX_LEVEL[codec] is None:
        return codec, None
    return codec, min(level, _MAX_LEVEL[codec])


def compress_batch(batch: bytes, codec: int, level: int | None) -> bytes:
    """One uncompressed v2 batch (as _csink.encode writes it) with its records
    section compressed: the codec in the attributes, batchLength and the CRC
    (over attributes..end) written again. Equals build_batch(..., compression=codec)."""
    from kref.records import header as h
    from kref.records.compression import compress

    out = bytearray(memoryview(batch)[: h.HEADER_SIZE])
    out += compress(codec, memoryview(batch)[h.HEADER_SIZE :], level=level)
    _I32.pack_into(out, 8, len(out) - h.LOG_OVERHEAD)
    # attributes is an int16 at ATTRIBUTES_OFFSET; the codec bits are in its low byte.
    out[h.ATTRIBUTES_OFFSET + 1] = (out[h.ATTRIBUTES_OFFSET + 1] & ~h.COMPRESSION_CODEC_MASK) | codec
    struct.pack_into(">I", out, h.CRC_OFFSET, _crc32c(memoryview(out)[h.ATTRIBUTES_OFFSET :]))
    return bytes(out)


def _crc32c(data) -> int:
    if _csink is not None:
        return _csink.crc32c(data)
    import crc32c

    return crc32c.crc32c(data)


def encode_python(
    keys: list | None,
    values: list,
    n_partitions: int,
    null_key_partition: int,
    timestamp_ms: int,
    max_batch_bytes: int = MAX_BATCH_BYTES,
    compression: int = 0,
    compression_level: int | None = None,
    headers: list | None = None,
) -> list[tuple[int, bytes, list[int]]]:
    """What _csink.encode returns (then compress_batch when `compression` is
    set), from Python lists (bytes, str or None): [(partition, batch, row
    numbers)], partitions ascending, rows in order. The batch bound counts
    uncompressed bytes. `headers`: per row None or [{"key": str, "value": bytes
    or None}] (a headers column's to_pylist())."""
    from kref.records.batch import Header, Record, build_batch, encode_record
    from kref.records.header import HEADER_SIZE

    rows_of: list[list[int]] = [[] for _ in range(n_partitions)]
    for i in range(len(values)):
        key = None if keys is None else _as_bytes(keys[i])
        p = null_key_partition if key is None else (murmur2(key) & 0x7FFFFFFF) % n_partitions
        rows_of[p].append(i)
    out = []
    for p, rows in enumerate(rows_of):
        j = 0
        while j < len(rows):
            size, k, records = HEADER_SIZE, j, []
            while k < len(rows):
                i = rows[k]
                record = Record(
                    timestamp=timestamp_ms,
                    key=None if keys is None else _as_bytes(keys[i]),
                    value=_as_bytes(values[i]),
                    headers=tuple(Header(h["key"], h["value"]) for h in (headers and headers[i] or ())),
                )
                one = bytearray()
                encode_record(one, record, k - j, 0)
                if k > j and size + len(one) > max_batch_bytes:
                    break
                size += len(one)
                records.append(record)
                k += 1
            batch = build_batch(records, compression=compression, compression_level=compression_level)
            out.append((p, batch, rows[j:k]))
            j = k
    return out


def column_spec(array):
    """The buffers _csink.encode reads from one Arrow array, or None for a type
    it does not read (binary and string, large or not)."""
    import pyarrow as pa

    t = array.type
    if pa.types.is_binary(t) or pa.types.is_string(t):
        width = 4
    elif pa.types.is_large_binary(t) or pa.types.is_large_string(t):
        width = 8
    else:
        return None
    validity, offsets, data = array.buffers()
    return (validity if array.null_count else None, offsets, data, array.offset, width)


def headers_spec(array):
    """What _csink.encode reads of a headers column (Spark's array<struct<key:
    string, value: binary>>, Arrow's list<struct>), or None for what it does
    not: another layout, or a null struct or key (Kafka has no null header
    key; the librdkafka path reports it)."""
    import pyarrow as pa

    t = array.type
    if not pa.types.is_list(t) or not pa.types.is_struct(t.value_type):
        return None
    pair = t.value_type
    if [pair.field(i).name for i in range(pair.num_fields)] != ["key", "value"]:
        return None
    if not pa.types.is_string(pair.field(0).type) or not pa.types.is_binary(pair.field(1).type):
        return None
    pairs = array.values  # the struct array, not sliced by the list's offset
    keys, values = pairs.field(0), pairs.field(1)  # sliced as the struct is
    if pairs.null_count or keys.null_count:
        return None
    validity, offsets = array.buffers()[:2]
    return (
        validity if array.null_count else None, offsets, array.offset, len(pairs),
        column_spec(keys), column_spec(values),
    )  # fmt: skip


# --- sending ----------------------------------------------------------------------


def acks_of(cfg: dict) -> int | None:
    """The produce acks of the sink's settings: -1 (all) or 1; None for acks=0
    (no answers to read: the librdkafka path serves it)."""
    acks = str(cfg.get("acks", "all")).strip().lower()
    if acks in ("all", "-1"):
        return -1
    if acks == "1":
        return 1
    return None


def usable(cfg: dict) -> bool:
    """Whether a task with these librdkafka settings may take the fast path."""
    return ENABLED and acks_of(cfg) is not None and compression_of(cfg) is not None and wire.native_config(cfg)


def produce_request(
    correlation_id: int, version: int, acks: int, timeout_ms: int, topic: bytes, partitions: list[tuple[int, bytes]]
) -> bytes:
    """One framed ProduceRequest v3-v8 (request header v1): no transactional
    id, one topic, (partition, records) each. Written with struct, not kio's
    writer: the records are most of the bytes and are joined once."""
    parts = [
        b"",  # the frame's size, below
        struct.pack(">hhih", PRODUCE_KEY, version, correlation_id, len(_CLIENT_ID)),
        _CLIENT_ID,
        # transactional_id null, acks, timeout, one topic
        struct.pack(">hhiih", -1, acks, timeout_ms, 1, len(topic)),
        topic,
        _I32.pack(len(partitions)),
    ]
    for partition, records in partitions:
        parts.append(_PARTITION.pack(partition, len(records)))
        parts.append(records)
    parts[0] = _I32.pack(sum(len(p) for p in parts))
    return b"".join(parts)


class _Pending(NamedTuple):
    """One encoded batch not yet acknowledged."""

    partition: int
    data: bytes
    source: tuple  # (key array or None, value array, headers array or None): for the librdkafka fallback
    rows: bytes  # row numbers in `source`, native int32
    deadline: float


class NativeSink:
    """One write task's fast path to one topic; `fallback(keys, values)` hands
    rows (Python lists) to the librdkafka path."""

    def __init__(self, cfg: dict, topic: str, *, metadata_timeout_ms: int, flush_timeout_ms: int, fallback):
        self.bootstrap = cfg["bootstrap.servers"]
        self.topic = topic
        self._topic_bytes = topic.encode("utf-8")
        self._acks = acks_of(cfg)
        self._codec, self._level = compression_of(cfg)
        self._request_timeout_ms = int(cfg.get("request.timeout.ms", 30_000))
        self._flush_timeout_s = flush_timeout_ms / 1000
        self._fallback = fallback
        # The connections' socket timeout bounds the wait for a Produce answer
        # too, and acks=all may rightly take the broker's whole request timeout
        # (a follower that died is still in the ISR until replica.lag.time.max.ms):
        # a shorter one would give up on answers that are on their way.
        timeout_ms = max(metadata_timeout_ms, self._request_timeout_ms + _ANSWER_MARGIN_MS)
        self._brokers = wire.brokers(self.bootstrap, timeout_ms / 1000)
        self._leaders: list[int] | None = None
        self._sticky = -1
        # Lowered when the topic refuses a batch as too large (split, then kept).
        self._max_batch_bytes = MAX_BATCH_BYTES
        # node -> deque of (correlation id, version, batches) awaiting answers.
        self._in_flight: dict[int, deque] = {}
        self._retry: list[_Pending] = []
        # Split batches, sent again at once (no backoff, no new leaders needed).
        self._again: list[_Pending] = []
        self._last_error = ""
        self._failures: list[str] = []
        self._failed = 0

    # -- the task's calls --------------------------------------------------------

    def write(self, key, value, headers=None) -> bool:
        """Queue one Arrow batch's (key array or None, value array, headers array
        or None); False when their types are not ones the encoder reads (the
        caller's path takes it)."""
        value_spec = column_spec(value)
        key_spec = None if key is None else column_spec(key)
        h_spec = None if headers is None else headers_spec(headers)
        if value_spec is None or (key is not None and key_spec is None) or (headers is not None and h_spec is None):
            return False
        if self._leaders is None:
            where = (self.bootstrap, self.topic)
            stale = time.monotonic() - _refreshed.get(where, -METADATA_MAX_AGE_S) >= METADATA_MAX_AGE_S
            self._leaders = self._brokers.leaders(self.topic, refresh=stale, create=True)
            if len(_refreshed) >= _MAX_TOPICS_REMEMBERED:
                _refreshed.clear()
            if stale:
                _refreshed[where] = time.monotonic()
        n_partitions = len(self._leaders)
        if self._sticky < 0:
            self._sticky = random.randrange(n_partitions)
        sticky, self._sticky = self._sticky, (self._sticky + 1) % n_partitions
        self._send(self._encode((key, value, headers), (key_spec, value_spec, h_spec), len(value), n_partitions,
                                sticky, time.monotonic() + self._flush_timeout_s))
        while self._again:
            again, self._again = self._again, []
            self._send(again)
        if self._retry:
            self._resend()
        self._check()
        return True

    def _encode(self, source, specs, n, n_partitions, sticky, deadline) -> list[_Pending]:
        key_spec, value_spec, h_spec = specs
        encoded = _csink.encode(
            key_spec, value_spec, n, n_partitions, sticky, time.time_ns() // 1_000_000, self._max_batch_bytes, h_spec
        )
        pending = []
        for partition, data, rows in encoded:
            # A lone row over the learned bound is sent anyway (the topic decides);
            # one over MAX_BATCH_BYTES goes to librdkafka, which reports it.
            if len(data) > MAX_BATCH_BYTES:
                self._to_fallback(source, rows)
            else:
                if self._codec:
                    data = compress_batch(data, self._codec, self._level)
                pending.append(_Pending(partition, data, source, rows, deadline))
        return pending

    def _split(self, b: _Pending) -> None:
        """A batch the topic refused as too large: its rows again in batches of
        at most half its size (a lone row: the librdkafka path reports it)."""
        count = len(b.rows) // 4
        if count == 1:
            self._to_fallback(b.source, b.rows)
            return
        import pyarrow as pa

        self._max_batch_bytes = min(self._max_batch_bytes, max(len(b.data) // 2, 128))
        indices = pa.Array.from_buffers(pa.int32(), count, [None, pa.py_buffer(b.rows)])
        key, value, headers = (None if a is None else a.take(indices) for a in b.source)
        specs = (None if key is None else column_spec(key), column_spec(value),
                 None if headers is None else headers_spec(headers))  # fmt: skip
        # Encoded as one partition's rows (n_partitions=1), then labelled with
        # the batch's partition: every row stays where it was sent.
        pending = self._encode((key, value, headers), specs, count, 1, 0, b.deadline)
        self._again.extend(x._replace(partition=b.partition) for x in pending)

    def flush(self) -> None:
        """Wait until every batch is acknowledged (or handed to the fallback)."""
        while True:
            for node in list(self._in_flight):
                while self._in_flight.get(node):
                    self._receive(node)
            self._check()
            if self._again:
                again, self._again = self._again, []
                self._send(again)
            elif self._retry:
                self._resend()
            else:
                return

    def done(self) -> None:
        """A clean end: the connections go back to the worker's slot."""
        wire.keep(self._brokers)

    def abandon(self) -> None:
        """A failed task: close the connections (answers may still be on their way)."""
        self._brokers.close()

    # -- internals ---------------------------------------------------------------

    def _to_fallback(self, source: tuple, rows: bytes) -> None:
        import pyarrow as pa

        indices = pa.Array.from_buffers(pa.int32(), len(rows) // 4, [None, pa.py_buffer(rows)])
        key, value, headers = source
        keys = key.take(indices).to_pylist() if key is not None else [None] * len(indices)
        if headers is None:
            self._fallback(keys, value.take(indices).to_pylist())
        else:
            self._fallback(keys, value.take(indices).to_pylist(), headers.take(indices).to_pylist())

    def _send(self, pending: list[_Pending]) -> None:
        by_node: dict[int, list[_Pending]] = {}
        for b in pending:
            leader = self._leaders[b.partition] if b.partition < len(self._leaders) else -1
            if leader < 0:
                self._last_error = f"{self.topic}-{b.partition}: no leader"
                self._retry.append(b)
            else:
                by_node.setdefault(leader, []).append(b)
        for node, batches in by_node.items():
            # One batch per partition per request, at most MAX_REQUEST_BYTES.
            requests: list[list[_Pending]] = []
            for b in batches:
                for request in requests:
                    if sum(len(x.data) for x in request) + len(b.data) <= MAX_REQUEST_BYTES and all(
                        x.partition != b.partition for x in request
                    ):
                        request.append(b)
                        break
                else:
                    requests.append([b])
            for request in requests:
                self._send_request(node, request)

    def _send_request(self, node: int, batches: list[_Pending]) -> None:
        while len(self._in_flight.get(node, ())) >= MAX_IN_FLIGHT:
            self._receive(node)
        try:
            version = self._brokers.api_version(node, PRODUCE_KEY, *_PRODUCE_VERSIONS)
            conn = self._brokers.connection(node)
        except client.BrokerUnreachableError as exc:
            self._lost(node, batches, str(exc))
            return
        if version is None:
            for b in batches:
                self._to_fallback(b.source, b.rows)
            return
        correlation_id = conn.next_correlation_id
        conn.next_correlation_id += 1
        frame = produce_request(
            correlation_id, version, self._acks, self._request_timeout_ms, self._topic_bytes,
            [(b.partition, b.data) for b in batches],
        )  # fmt: skip
        try:
            conn.send_raw(frame)
        except OSError as exc:
            self._lost(node, batches, f"connection to node {node} lost: {exc}")
            return
        self._in_flight.setdefault(node, deque()).append((correlation_id, version, batches))

    def _lost(self, node: int, batches: list[_Pending], why: str) -> None:
        """A connection failed: everything awaiting an answer on it is sent again."""
        self._last_error = why
        self._retry.extend(batches)
        for _, _, waiting in self._in_flight.pop(node, ()):
            self._retry.extend(waiting)
        self._brokers.drop(node)

    def _receive(self, node: int) -> None:
        queue = self._in_flight[node]
        correlation_id, version, batches = queue.popleft()
        try:
            frame = self._brokers.connection(node).read_frame()
        except OSError as exc:  # includes the socket timeout
            frame, why = None, f"no answer from node {node}: {exc}"
        else:
            why = f"node {node} closed the connection"
        if frame is None:
            self._lost(node, batches, why)
            return
        got, answer = decode_response(frame, response_class(PRODUCE_KEY, version))
        if got != correlation_id:
            self._lost(node, batches, f"node {node} answered correlation id {got}, expected {correlation_id}")
            return
        codes = {
            int(p.index): (int(p.error_code), p.error_message)
            for t in answer.responses
            if t.name == self.topic
            for p in t.partition_responses
        }
        for b in batches:
            code, message = codes.get(b.partition, (_UNKNOWN_SERVER_ERROR, "no answer for this partition"))
            if code == 0:
                continue
            name = ErrorCode(code).name if code in _KNOWN_CODES else f"error {code}"
            where = f"{self.topic}-{b.partition}: {name}" + (f" ({message})" if message else "")
            if code in _TOO_LARGE:
                self._split(b)
            elif is_retriable(code):
                self._last_error = where
                self._retry.append(b)
            else:
                self._failed += len(b.rows) // 4
                if len(self._failures) < 10:
                    self._failures.append(where)

    def _resend(self) -> None:
        """Ask for the leaders again and send the batches that need another try."""
        while self._retry:
            now = time.monotonic()
            expired = [b for b in self._retry if b.deadline <= now]
            if expired:
                left = sum(len(b.rows) // 4 for b in self._retry)
                raise client.BrokerUnreachableError(
                    f"kref sink: {left} record(s) still unacknowledged after flushTimeoutMs="
                    f"{int(self._flush_timeout_s * 1000)} by kref broker {self.bootstrap!r}"
                    f" (last error: {self._last_error})"
                )
            time.sleep(RETRY_BACKOFF_S)
            try:
                self._leaders = self._brokers.leaders(self.topic, refresh=True)
            except client.UnknownTopicError as exc:  # e.g. deleted while the task wrote
                left = sum(len(b.rows) // 4 for b in self._retry)
                raise client.UnknownTopicError(f"kref sink: {left} record(s) not written: {exc}") from None
            except client.BrokerUnreachableError as exc:
                self._last_error = str(exc)
                continue
            batches, self._retry = self._retry, []
            self._send(batches)
            return

    def _check(self) -> None:
        if self._failures:
            raise client.KrefConnectorError(
                f"kref sink: {self._failed} record(s) not acknowledged by kref broker "
                f"{self.bootstrap!r}: {'; '.join(self._failures)}"
            )
