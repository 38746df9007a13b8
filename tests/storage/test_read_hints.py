"""Follower reads at the log end (FollowerFetch, LeaderHandleFetch's storage side): every
follower of a partition asks next for the batch the leader appended last, so each
such read must take one pread from where that batch starts, not an index lookup
(the offset index names a batch by its last offset, so a lookup of a batch's first
offset lands on the batch before it) followed by a second, careful read."""

from __future__ import annotations

from kref.storage.config import LogConfig
from kref.storage.log import Log

from .batches import decode_values, make_batch


def _counting_reads(log: Log) -> list[tuple[int, int]]:
    """Record the (position, length) of every pread of the active segment (it still reads)."""
    seg = log.segments[-1]
    calls: list[tuple[int, int]] = []
    real = seg.read_at

    def read_at(position: int, length: int) -> bytes:
        calls.append((position, length))
        return real(position, length)

    seg.read_at = read_at
    return calls


def test_two_followers_at_the_log_end_read_the_new_batch_in_one_pread_each(tmp_path):
    log = Log.open(str(tmp_path / "topic-0"), LogConfig.from_properties({}), 0)
    values = [b"x" * 500] * 20  # batches above index.interval.bytes: each gets an index entry
    for i in range(3):
        log.append_as_leader(make_batch(values), 0, i)
    end = log.log_end_offset
    batch = make_batch(values)
    log.append_as_leader(batch, 0, 3)
    calls = _counting_reads(log)
    # replica.fetch.max.bytes about one batch, as with a producer's full 1 MB batches
    first = log.read(end, len(batch) + 100)  # one follower
    second = log.read(end, len(batch) + 100)  # the other, after the first moved the read hint on
    assert first.records == second.records
    assert [o for o, _ in decode_values(first.records)] == list(range(end, end + 20))
    assert len(calls) == 2, calls
    # Both reads started where the new batch starts, and after a truncation the
    # hint is gone (the bytes there are no longer that batch).
    assert calls[0][0] == calls[1][0]
    log.truncate_to(end)
    assert log.read(end, 1 << 20).records == b""
    log.append_as_leader(make_batch([b"y"]), 1, 4)
    assert decode_values(log.read(end, 1 << 20).records) == [(end, b"y")]
    log.close()
