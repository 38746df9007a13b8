"""One record walker for every hot path that reads a batch's records section.

Theory of operation. A v2 records section is a chain: each record starts
with its length varint, so where record i+1 starts depends on record i.
Only that chain is followed in Python (one short loop iteration per record,
reading one or two bytes); every other field of every record is then
decoded at once with numpy over the array of record starts: attributes,
timestamp delta (varlong), offset delta, key length and key, value length,
header count. Records without headers (the common case) are then proven to
end exactly where their length says, all at once; the few records with
headers are walked header by header in Python. So the per-record Python
cost is the chain step, and the checks are the ones Kafka's
DefaultRecord.readFrom makes on produce (every field inside its record,
varints no longer than 5/10 bytes, non-negative header key lengths, the
record ending exactly at its length), plus the batch-level ones the callers
add (record count, offset deltas 0..count-1, the section ending after the
last record).

check_records, the produce check, first asks the compiled walker
(kref/records/_cwalker.c, built by scripts/build_cwalker.py) when it is
built: it accepts exactly what the Python walk here accepts (the Python walk
stays the reference; tests/records/test_cwalker.py holds them to it), at a
few ns per record and without copying the section. When it says no, the
Python walk runs and raises the error naming the first bad record.

Users: produce validation (kref/records/framing_validation.py) and the log
cleaner (kref/storage/cleaner.py: offsets, keys, tombstones, record bounds,
timestamp deltas), which indexes all batches of a read buffer in one call
(`index_spans`): there the starts of records of one length are found for
every batch at once (`_tiled_starts`), so not even the chain step loops. Errors are InvalidRecordError naming the first bad
record, which the broker answers as INVALID_RECORD / CORRUPT_MESSAGE.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kref.records.errors import InvalidRecordError
from kref.records.varint import read_varint

if TYPE_CHECKING:
    import numpy as np

try:
    from kref.records import _cwalker
except ImportError:  # not built: the pure-Python walk below does the same checks, slower
    _cwalker = None

# What the broker logs once at start about the record walker (None: nothing to say).
ACCELERATOR_NOTE = (
    None if _cwalker is not None else
    "compiled record walker not built (python scripts/build_cwalker.py): produce validation uses the pure-Python walker"
)

# numpy is imported on first use (inside the functions below): it costs about
# a second of start-up on a loaded machine, and small batches never need it.

Buffer = bytes | bytearray | memoryview

# Zero padding after the section, so that vectorized varint reads at the end
# of the last record never index past the array (a read into the padding is
# always caught by the record-bound checks that follow).
PAD = 16


@dataclass(frozen=True, slots=True)
class RecordIndex:
    """Per-record fields of one records section, as numpy int64 arrays."""

    section: bytes
    starts: np.ndarray  # position of each record's length varint
    ends: np.ndarray  # position just past each record
    timestamp_deltas: np.ndarray
    offset_deltas: np.ndarray
    key_starts: np.ndarray
    key_lengths: np.ndarray  # -1: null key
    value_lengths: np.ndarray  # -1: null value (a tombstone)
    padded: np.ndarray | None = None  # the section as uint8, with PAD more bytes after it

    def __len__(self) -> int:
        return len(self.starts)

    def keys(self) -> list[bytes | None]:
        s = self.section
        return [s[a : a + n] if n >= 0 else None for a, n in zip(self.key_starts.tolist(), self.key_lengths.tolist())]


def _chain(section: bytes, count: int | None, where: int, start: int = 0, stop: int | None = None) -> list[int]:
    """Start positions of the records, following the length varints.

    The section is section[start:stop] (positions stay absolute, nothing is
    copied). `count` None: walk to the end of the section; else stop after `count`
    records (the caller checks what is left). Producers' batches hold long
    runs of records of one length, so after each record the walk checks at
    once, with strided slices of the bytes (C speed), whether the next
    records start with the same length varint at the predicted places, and
    jumps over the whole run: a record whose length varint is read there is
    exactly the record the one-by-one walk would find there."""
    end = len(section) if stop is None else stop
    starts: list[int] = []
    append = starts.append
    pos = start
    limit = (1 << 62) if count is None else count
    n = 0
    while n < limit:
        if pos >= end:
            if count is None:
                break
            raise InvalidRecordError(f"records section ends after {n} of {count} records", where)
        append(pos)
        n += 1
        b = section[pos]
        if b < 0x80:
            length = (b >> 1) ^ -(b & 1)
            size = 1
        elif pos + 1 < end and section[pos + 1] < 0x80:  # records of 64 B .. 8 KiB
            z = (b & 0x7F) | (section[pos + 1] << 7)
            length = (z >> 1) ^ -(z & 1)
            size = 2
        else:
            length, body = read_varint(section, pos, end, 5)
            size = body - pos
        if length < 3:
            raise InvalidRecordError(f"record length {length} is too small", where)
        stride = size + length
        if pos + stride > end:
            raise InvalidRecordError(f"record {n - 1} runs {pos + stride - end} bytes past the records section", where)
        pos += stride
        run = min(limit - n, (end - pos) // stride)
        if run >= 4 and size <= 2:
            run = _same_prefix_run(section, pos, stride, size, run)
            if run:
                starts.extend(range(pos, pos + run * stride, stride))
                pos += run * stride
                n += run
    return starts


def _same_prefix_run(section: bytes, pos: int, stride: int, size: int, most: int) -> int:
    """How many records from `pos` on (at most `most`) start every `stride`
    bytes with the length varint section[pos - stride : pos - stride + size]."""
    first = pos - stride
    lanes = [(section[pos + k : pos + most * stride : stride], section[first + k]) for k in range(size)]
    if all(got == bytes((want,)) * most for got, want in lanes):
        return most
    lo, hi = 0, most  # lanes agree on [0, lo) and disagree somewhere in [0, hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if all(got[:mid] == bytes((want,)) * mid for got, want in lanes):
            lo = mid
        else:
            hi = mid
    return lo


_ONE_BYTE: np.ndarray | None = None  # zigzag value of each one-byte varint


def _varints(arr: np.ndarray, pos: np.ndarray, max_bytes: int) -> tuple[np.ndarray, np.ndarray, bool]:
    """Zigzag varints at every position of `pos`: (values, next positions, all
    terminated within max_bytes)."""
    import numpy as np

    global _ONE_BYTE
    if _ONE_BYTE is None:
        _ONE_BYTE = np.array([(b >> 1) ^ -(b & 1) for b in range(128)], dtype=np.int64)
    raw = arr[pos]
    if raw.max() < 0x80:  # one byte each: deltas, small lengths (decoded by table)
        return _ONE_BYTE[raw], pos + 1, True
    b0 = raw.astype(np.int64)
    b1 = arr[pos + 1].astype(np.int64)
    two = b0 >= 0x80
    if b1[two].max() < 0x80:  # at most two bytes: lengths of 64 B .. 8 KiB
        z = np.where(two, (b0 & 0x7F) | (b1 << 7), b0)
        return (z >> 1) ^ -(z & 1), pos + 1 + two, True
    result = np.zeros(len(pos), dtype=np.uint64)
    size = np.zeros(len(pos), dtype=np.int64)
    done = np.zeros(len(pos), dtype=bool)
    for k in range(max_bytes):
        b = arr[pos + k].astype(np.uint64)
        live = ~done
        result |= np.where(live, (b & np.uint64(0x7F)) << np.uint64(7 * k), np.uint64(0))
        stop = live & (b < 0x80)
        size[stop] = k + 1
        done |= stop
        if done.all():
            break
    # Java reads into an int/long and drops higher bits; mask as Kafka would read.
    if max_bytes == 5:
        result &= np.uint64(0xFFFFFFFF)
    z = result
    values = ((z >> np.uint64(1)) ^ (np.uint64(0) - (z & np.uint64(1)))).view(np.int64)
    return values, pos + size, bool(done.all())


# Below this many records the numpy calls (a few dozen per section) cost more
# than a plain per-record loop (measured: 300 records 1.3x slower, 1,000 records
# 2.4x faster); callers keep their loop for small sections.
VECTOR_MIN_RECORDS = 512


def check_records(section: Buffer, count: int, where: int = 0) -> None:
    """Produce validation: exactly `count` well-formed records fill the section,
    with offset deltas 0..count-1 in order. The compiled walker decides when it
    is built; the Python walk names the fault when it says no."""
    if _cwalker is not None and _cwalker.check_records(section, count):
        return
    check_records_python(section, count, where)


def check_records_python(section: Buffer, count: int, where: int = 0) -> None:
    """check_records in Python and numpy: the reference the compiled walker is held to."""
    import numpy as np

    data = section if isinstance(section, bytes) else bytes(section)
    starts = _chain(data, count, where)
    if count and _record_end(data, starts[-1]) != len(data):
        raise InvalidRecordError(
            f"{len(data) - _record_end(data, starts[-1])} bytes left in the records section after {count} records", where
        )
    deltas = _vector_index(data, starts, where).offset_deltas
    wrong = np.flatnonzero(deltas != np.arange(count))
    if len(wrong):
        i = int(wrong[0])
        raise InvalidRecordError(f"record offset delta {int(deltas[i])} where {i} was expected", where)


def index_records(section: Buffer, where: int = 0) -> RecordIndex:
    """Every record of a section (as many as fill it), checked, with its fields."""
    data = section if isinstance(section, bytes) else bytes(section)
    return _vector_index(data, _chain(data, None, where), where)


def index_spans(
    data: Buffer, spans: list[tuple[int, int]], where: int = 0, padded: "np.ndarray | None" = None
) -> tuple[RecordIndex, list[int]]:
    """Every record of several records sections that lie in one buffer, each at
    data[start:stop], indexed in one numpy pass (the log cleaner hands over all
    batches of one read buffer at once, so the few dozen numpy calls are paid per
    buffer, not per batch). Also returns the bounds of each span's records in
    the index: span i holds records bounds[i] .. bounds[i + 1] - 1.

    `padded`: data as a uint8 array with at least PAD more bytes after it (of
    any value: reads there are always caught by the record-bound checks), so
    that a caller reading into a reused buffer saves the padding copy."""
    import numpy as np

    arr = padded if padded is not None else np.frombuffer(bytes(data) + bytes(PAD), dtype=np.uint8)
    tiled = _tiled_starts(data, arr, spans)
    if tiled is not None:
        starts, bounds, body, ends = tiled
        return _vector_index(data, starts, where, arr, body, ends), bounds
    else:
        chained: list[int] = []
        bounds = [0]
        for a, b in spans:
            chained += _chain(data, None, where, a, b)
            bounds.append(len(chained))
        starts = np.array(chained, dtype=np.int64)
    return _vector_index(data, starts, where, arr), bounds


def _tiled_starts(
    data: Buffer, arr: np.ndarray, spans: list[tuple[int, int]]
) -> tuple[np.ndarray, list[int], np.ndarray, np.ndarray] | None:
    """The record starts (with the spans' bounds and each record's body start and
    end) when every span is tiled by records of one length (each span its own:
    what producers write), found for all spans at once; None otherwise (then
    `_chain` walks them).

    A span whose first record's length varint (one or two bytes) is found,
    byte for byte, every stride bytes to the span's end holds exactly the
    records the chain walk would find there: equal varint bytes are an equal
    length, so each record ends where the next such varint starts."""
    import numpy as np

    rows = []  # per span: first start, stride, record count, varint byte 0, byte 1 (-1: none), varint size
    append = rows.append
    for a, b in spans:
        if a == b:
            append((a, 1, 0, 0, -1, 1))
            continue
        x = data[a]
        if x < 0x80:
            z, size, y = x, 1, -1
        elif a + 1 < b and data[a + 1] < 0x80:
            y = data[a + 1]
            z, size = (x & 0x7F) | (y << 7), 2
        else:
            return None
        length = (z >> 1) ^ -(z & 1)
        if length < 3:
            return None
        n, rest = divmod(b - a, size + length)
        if rest:
            return None
        append((a, size + length, n, x, y, size))
    table = np.array(rows, dtype=np.int64).reshape(-1, 6)
    count = table[:, 2]
    bounds = np.zeros(len(spans) + 1, dtype=np.int64)
    np.cumsum(count, out=bounds[1:])
    per_record = np.repeat(table, count, axis=0)  # each record's span row
    stride = per_record[:, 1]
    starts = per_record[:, 0] + stride * (np.arange(int(bounds[-1]), dtype=np.int64) - np.repeat(bounds[:-1], count))
    if not (arr[starts] == per_record[:, 3]).all():
        return None
    high = per_record[:, 4]
    two = high >= 0
    if two.any() and not (arr[starts[two] + 1] == high[two]).all():
        return None
    # Each record's length varint is its span's first one: its body starts `size` bytes in.
    body = starts + per_record[:, 5]
    ends = starts + stride
    return starts, bounds.tolist(), body, ends


def _vector_index(
    data: Buffer,
    starts_in: list[int] | np.ndarray,
    where: int,
    arr: np.ndarray | None = None,
    known_body: np.ndarray | None = None,
    known_ends: np.ndarray | None = None,
) -> RecordIndex:
    """Every field of the records at `starts_in`; `known_body`/`known_ends`: where
    each record's body starts and ends, when the caller already read the
    length varints (`_tiled_starts`)."""
    import numpy as np

    if arr is None:
        arr = np.frombuffer(bytes(data) + bytes(PAD), dtype=np.uint8)
    starts = np.asarray(starts_in, dtype=np.int64)
    if len(starts) == 0:
        empty = np.zeros(0, dtype=np.int64)
        return RecordIndex(data, empty, empty, empty, empty, empty, empty, empty, arr)
    if known_body is not None:
        body, ends = known_body, known_ends
    else:
        lengths, body, _ = _varints(arr, starts, 5)
        ends = body + lengths
    # Each field's end is clamped to its record's end, so the next read stays
    # inside the padded array; a field that ran past its record leaves the
    # header count at or past the record end, which the check below catches.
    # attributes: one byte, any value (Kafka ignores record attributes)
    ts, pos, ok_ts = _varints(arr, body + 1, 10)
    od, pos, ok_od = _varints(arr, np.minimum(pos, ends), 5)
    kl, pos, ok_kl = _varints(arr, np.minimum(pos, ends), 5)
    key_starts = pos
    vpos = pos + np.maximum(kl, 0)
    vl, pos, ok_vl = _varints(arr, np.minimum(vpos, ends), 5)
    hpos = pos + np.maximum(vl, 0)
    if not (ok_ts and ok_od and ok_kl and ok_vl) or (vpos > ends).any() or (hpos >= ends).any():
        _raise_first(data, starts.tolist(), where)
    hc, after, ok_hc = _varints(arr, hpos, 5)
    if not ok_hc or (hc < 0).any():
        _raise_first(data, starts.tolist(), where)
    plain = hc == 0
    if not (after[plain] == ends[plain]).all():
        _raise_first(data, starts.tolist(), where)
    if not plain.all():
        for i in np.flatnonzero(~plain).tolist():
            _check_record(data, int(starts[i]), i, where)
    return RecordIndex(data, starts, ends, ts, od, key_starts, kl, vl, arr)


def _record_end(data: bytes, start: int) -> int:
    length, body = read_varint(data, start, len(data), 5)
    return body + length


def _check_record(data: bytes, start: int, i: int, where: int) -> tuple[int, int]:
    """One record, field by field, as Kafka's DefaultRecord.readFrom reads it;
    returns (timestamp delta, offset delta). The reference for the vectorized
    checks above, and what names the first bad record when they fail."""
    length, pos = read_varint(data, start, len(data), 5)
    record_end = pos + length
    pos += 1  # attributes
    if pos >= record_end:
        raise InvalidRecordError(f"record {i} ends inside its header fields", where)
    timestamp_delta, pos = read_varint(data, pos, record_end, 10)
    offset_delta, pos = read_varint(data, pos, record_end, 5)
    for name in ("key", "value"):
        n, pos = read_varint(data, pos, record_end, 5)
        if n > record_end - pos:
            raise InvalidRecordError(f"record {i}: {name} length {n} exceeds the {record_end - pos} bytes left", where)
        pos += max(n, 0)
    n_headers, pos = read_varint(data, pos, record_end, 5)
    if n_headers < 0:
        raise InvalidRecordError(f"record {i}: header count {n_headers} is negative", where)
    for _ in range(n_headers):
        key_length, pos = read_varint(data, pos, record_end, 5)
        if key_length < 0 or key_length > record_end - pos:
            raise InvalidRecordError(f"record {i}: header key length {key_length} is invalid", where)
        pos += key_length
        value_length, pos = read_varint(data, pos, record_end, 5)
        if value_length > record_end - pos:
            raise InvalidRecordError(f"record {i}: header value length {value_length} is invalid", where)
        pos += max(value_length, 0)
    if pos != record_end:
        raise InvalidRecordError(f"record {i}: record length says {length} bytes but its fields take {length - (record_end - pos)}", where)
    return timestamp_delta, offset_delta


def _raise_first(data: bytes, starts: list[int], where: int) -> None:
    for i, start in enumerate(starts):
        _check_record(data, start, i, where)
    raise InvalidRecordError("malformed record", where)
