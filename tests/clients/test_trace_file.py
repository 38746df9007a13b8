"""`kref broker --trace-file F` writes the replica core's spec actions as NDJSON.

A real broker process, a real producer: after a clean stop the file holds
one JSON object per line, numbered in order, naming the TLA+ actions the
partition took (BecomeLeader at start, then LeaderAppend and
AdvanceHighWatermark per produce) with the spec's variable names, and the
high watermark in the trace never decreases (MonotonicHW). The running
broker flushes the file every second, so it is readable before the stop.
The file is then checked by TLC against spec/Replication.tla (`kref trace
check`'s own decision): it must be accepted (issue 15: every trace CI
produces is validated; the other single-broker tests write none).
"""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kref.trace import read_ndjson_trace
from trace_check.cli import validate


def test_trace_file_records_spec_actions(kref_broker_factory, tmp_path):
    trace_path = tmp_path / "trace.ndjson"
    broker = kref_broker_factory(trace_file=str(trace_path))
    topic = f"tr-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0})
    errors = []
    for i in range(5):
        producer.produce(topic, b"%d" % i, partition=0, on_delivery=lambda err, _m: errors.append(err))
        assert producer.flush(30) == 0
    assert errors == [None] * 5
    # The running broker flushes the trace every second: readable before the stop.
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and "LeaderAppend" not in trace_path.read_text():
        time.sleep(0.2)
    assert "LeaderAppend" in trace_path.read_text()
    broker.stop()

    events = [e for e in read_ndjson_trace(trace_path) if e["topic"] == topic]
    kinds = [e["type"] for e in events]
    assert kinds[0] == "BecomeLeader"
    assert kinds.count("LeaderAppend") == 5 and kinds.count("AdvanceHighWatermark") == 5
    appends = [e for e in events if e["type"] == "LeaderAppend"]
    assert [(e["first_offset"], e["last_offset"], e["log_end_offset"]) for e in appends] == [
        (i, i, i + 1) for i in range(5)
    ]
    hws = [e["high_watermark"] for e in events if e["type"] == "AdvanceHighWatermark"]
    assert hws == sorted(hws) and hws[-1] == 5
    assert all(e["isr"] == [e["replica"]] for e in events if "isr" in e)
    seqs = [e["seq"] for e in read_ndjson_trace(trace_path)]
    assert seqs == sorted(seqs)
    code, report = validate([str(trace_path)], topic=topic, partition=0, timeout_s=240)
    print(report)
    assert code == 0, report
