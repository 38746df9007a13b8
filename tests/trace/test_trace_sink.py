"""The NDJSON trace sink: one event per line, spec field names, bounded buffer.

Checks that events carry the action name as "type" and the post-state under
the spec's variable names, that lines are numbered in emit order, that the
buffer is written out when it reaches its bound (never grows past it), and
that a reopened sink appends a new run (header with run id, node, start time
and version; seq from 1) rather than truncating (broker restarts).
"""

from __future__ import annotations

import pytest

import kref
from kref.replication import replica as r
from kref.trace import NdjsonTraceSink, TraceFileError, read_ndjson_runs, read_ndjson_trace
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
    # Bound of 2: three events were emitted, two already written (after the run header).
    assert len(path.read_text().splitlines()) == 1 + 2
    sink.close()
    events = read_ndjson_trace(path)
    assert [e["type"] for e in events] == ["BecomeLeader", "LeaderAppend", "AdvanceHighWatermark"]
    assert [e["seq"] for e in events] == [1, 2, 3]
    # CLOCK_MONOTONIC, shared by the processes of one machine, orders merged traces.
    monotonic = [e.pop("mono_ns") for e in events]
    assert monotonic == sorted(monotonic) and all(isinstance(m, int) and m > 0 for m in monotonic)
    append = events[1]
    assert append == {
        "type": "LeaderAppend", "time_ms": 11, "replica": 1, "topic": "orders", "partition": 3,
        "leader_epoch": 0, "first_offset": 0, "last_offset": 4, "log_end_offset": 5,
        "high_watermark": 0, "acks": 1, "seq": 2,
    }
    assert events[2]["isr"] == [1] and events[2]["high_watermark"] == 5
    assert all(e["type"] in REPLICATION_EVENT_TYPES for e in events)


def test_reopened_sink_appends_a_distinguishable_run(tmp_path):
    path = tmp_path / "trace.ndjson"
    run_ids = []
    for node in (1, 2):
        sink = NdjsonTraceSink(path, node=node)
        _drive(sink)
        sink.close()
        run_ids.append(sink.run_id)
    runs = read_ndjson_runs(path)
    assert [r.header["run"] for r in runs] == run_ids and run_ids[0] != run_ids[1]
    assert [r.header["node"] for r in runs] == [1, 2]
    assert all(r.header["kref_version"] == kref.__version__ and r.header["start_time_ms"] > 0 for r in runs)
    # Each run numbers its own events; nothing of the first leaks into the second.
    assert [[e["seq"] for e in r.events] for r in runs] == [[1, 2, 3], [1, 2, 3]]
    assert read_ndjson_trace(path) == runs[1].events and read_ndjson_trace(path, 0) == runs[0].events


def test_unopenable_trace_file_is_one_clear_error(tmp_path):
    with pytest.raises(TraceFileError, match="cannot open trace file .*missing.*No such file"):
        NdjsonTraceSink(tmp_path / "missing" / "trace.ndjson")
