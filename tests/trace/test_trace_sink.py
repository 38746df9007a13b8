"""The NDJSON trace sink: one event per line, spec field names, bounded buffer.

Checks that events carry the action name as "type" and the post-state under
the spec's variable names, that lines are numbered in emit order, that the
buffer is written out when it reaches its bound (never grows past it), and
that a reopened sink appends rather than truncates (broker restarts).
"""

from __future__ import annotations

from kref.replication import replica as r
from kref.trace import NdjsonTraceSink, read_ndjson_trace
from kref.trace.events import REPLICATION_EVENT_TYPES


def _drive(sink) -> None:
    core = r.PartitionReplica("orders", 3, 1)
    for effect in core.step(r.BecomeLeader(0, 0, frozenset({1}), (1,), 0, 0, 0), 10) + core.step(
        r.LogAppended(1, 1, 0, 4, 5), 11
    ):
        if isinstance(effect, r.Emit):
            sink.emit(effect.event)


def test_ndjson_lines_carry_spec_names_in_order(tmp_path):
    path = tmp_path / "trace.ndjson"
    sink = NdjsonTraceSink(path, max_buffered_events=2)
    _drive(sink)
    # Bound of 2: three events were emitted, two already written.
    assert len(path.read_text().splitlines()) == 2
    sink.close()
    events = read_ndjson_trace(path)
    assert [e["type"] for e in events] == ["BecomeLeader", "LeaderAppend", "AdvanceHighWatermark"]
    assert [e["seq"] for e in events] == [1, 2, 3]
    append = events[1]
    assert append == {
        "type": "LeaderAppend", "time_ms": 11, "replica": 1, "topic": "orders", "partition": 3,
        "leader_epoch": 0, "first_offset": 0, "last_offset": 4, "log_end_offset": 5,
        "high_watermark": 0, "seq": 2,
    }
    assert events[2]["isr"] == [1] and events[2]["high_watermark"] == 5
    assert all(e["type"] in REPLICATION_EVENT_TYPES for e in events)


def test_reopened_sink_appends(tmp_path):
    path = tmp_path / "trace.ndjson"
    for _ in range(2):
        sink = NdjsonTraceSink(path)
        _drive(sink)
        sink.close()
    assert len(read_ndjson_trace(path)) == 6
