"""A real broker's trace is a behaviour of spec/Replication.tla (issue 15).

One kref broker process with --trace-file, a confluent-kafka producer
(acks=all, five records) to a new single-replica topic; after a clean stop
`kref trace check` (real TLC) accepts the file, and a copy whose high
watermark is advanced past the log end offset is rejected at that event.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic


def _check(path, topic):
    return subprocess.run([sys.executable, "-m", "kref.cli", "trace", "check", str(path), "--topic", topic,
                           "--partition", "0", "--timeout", "120"], capture_output=True, text=True, timeout=200)


def test_broker_trace_validates_and_a_doctored_copy_does_not(kref_broker_factory, tmp_path):
    trace_path = tmp_path / "trace.ndjson"
    broker = kref_broker_factory(trace_file=str(trace_path))
    topic = f"tc-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(5):
        producer.produce(topic, b"%d" % i, partition=0)
        assert producer.flush(30) == 0
    broker.stop()
    r = _check(trace_path, topic)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("ACCEPTED")

    lines = trace_path.read_text().splitlines()
    i = next(i for i, ln in enumerate(lines)
             if json.loads(ln).get("type") == "AdvanceHighWatermark" and json.loads(ln).get("topic") == topic)
    e = json.loads(lines[i])
    e["high_watermark"] = e["log_end_offset"] + 1
    lines[i] = json.dumps(e)
    bad = tmp_path / "bad.ndjson"
    bad.write_text("\n".join(lines) + "\n")
    r = _check(bad, topic)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"bad.ndjson:{i + 1})" in r.stdout and "AdvanceHighWatermark" in r.stdout
