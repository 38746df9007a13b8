"""A follower's append rolls per batch: segment.bytes holds on followers as on the leader.

A replica fetch brings up to replica.fetch.max.bytes of the leader's batches in
one append. Kafka checks segment.bytes per batch, so a follower's segments are
no bigger than the leader's; checked here on real Logs: the leader appends
batches one by one, a follower appends the leader's bytes in one fetch-sized
block, and both end with the same segments (base offsets and sizes) and the same
bytes. A batch bigger than segment.bytes still goes in, alone in its segment
(KAFKA-17375: a follower must take what the leader accepted).
"""

from __future__ import annotations

from kref.storage.config import LogConfig
from kref.storage.log import Log
from tests.storage.batches import decode_values, make_batch

SEGMENT_BYTES = 1024


def _open(path, segment_bytes: int = SEGMENT_BYTES) -> Log:
    return Log.open(str(path), LogConfig.from_properties({"segment.bytes": str(segment_bytes)}), 0)


def _layout(log: Log) -> list[tuple[int, int]]:
    return [(s.base_offset, s.size) for s in log.segments]


def test_a_fetch_sized_follower_append_rolls_where_the_leader_rolled(tmp_path):
    leader = _open(tmp_path / "leader" / "t-0")
    for i in range(30):
        leader.append_as_leader(make_batch([b"v%03d" % i + b"x" * 200]), 0, i)
    assert len(leader.segments) > 5
    fetched = leader.read(0, 1 << 20, min_one_message=True).records

    follower = _open(tmp_path / "follower" / "t-0")
    info = follower.append_as_follower(fetched, 100)
    assert (info.first_offset, info.last_offset, info.records_count) == (0, 29, 30)
    assert _layout(follower) == _layout(leader)
    assert all(size <= SEGMENT_BYTES for _, size in _layout(follower))
    assert follower.log_end_offset == 30
    assert decode_values(follower.read(0, 1 << 20, min_one_message=True).records) == decode_values(fetched)
    # The next fetch goes on from where the first left the active segment.
    more = make_batch([b"tail" + b"x" * 200], base_offset=30, partition_leader_epoch=0)
    leader.append_as_follower(more, 101)
    follower.append_as_follower(more, 101)
    assert _layout(follower) == _layout(leader)
    for log in (leader, follower):
        log.close()


def test_a_batch_bigger_than_segment_bytes_goes_in_alone(tmp_path):
    big = make_batch([b"y" * 600], base_offset=0, partition_leader_epoch=0)
    small = make_batch([b"z" * 10], base_offset=1, partition_leader_epoch=0)
    follower = _open(tmp_path / "t-0", segment_bytes=512)
    follower.append_as_follower(big + small, 0)
    layout = _layout(follower)
    assert [base for base, _ in layout] == [0, 1]
    assert layout[0][1] == len(big) > 512
    assert decode_values(follower.read(0, 1 << 20, min_one_message=True).records) == [(0, b"y" * 600), (1, b"z" * 10)]
    follower.close()
