"""Acknowledged records survive a SIGKILL in the middle of a produce stream,
and damage to the files afterwards (a torn tail, lost or garbled indexes).

Issue 2's promise seen from a client: a confluent-kafka producer with
acks=all streams records while the broker is SIGKILLed. After the restart,
every record whose delivery report said "delivered at offset o" is read back
at offset o. Then, with the broker stopped uncleanly again: garbage appended
to the active segment, every .index/.timeindex deleted or overwritten with
random bytes. Recovery must drop the garbage, rebuild the indexes, keep every
acknowledged record, and the broker must take new writes after the last one.
Sizes and times are bounded (a few thousand small records, small segments).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

TOPIC = "crash"
PARTITIONS = 2
OVERRIDES = {"num.partitions": str(PARTITIONS), "log.segment.bytes": "16384", "log.index.interval.bytes": "256"}


def produce_until_killed(broker, total=4000, kill_after=1500):
    acked: dict[bytes, tuple[int, int]] = {}

    def report(err, msg):
        if err is None:
            acked[msg.value()] = (msg.partition(), msg.offset())

    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 1,
                  "batch.num.messages": 20, "message.timeout.ms": 3000, "log_level": 0})
    for i in range(total):
        while True:
            try:
                p.produce(TOPIC, value=b"v%06d" % i + b"." * 100, partition=i % PARTITIONS, on_delivery=report)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
        if i == kill_after:
            p.flush(15)  # some acknowledged for sure, then more in flight when the kill lands
        if i == kill_after + 200:
            broker.kill()
    p.flush(10)
    return acked


def read_all(bootstrap) -> dict[bytes, tuple[int, int]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "crash-check", "enable.auto.commit": False,
                  "log_level": 0})
    try:
        ends = [c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=15)[1] for p in range(PARTITIONS)]
        c.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        seen: dict[bytes, tuple[int, int]] = {}
        deadline = time.monotonic() + 60
        while len(seen) < sum(ends) and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                seen[m.value()] = (m.partition(), m.offset())
        return seen
    finally:
        c.close()


def test_acked_records_survive_sigkill_and_file_damage(kref_broker_factory):
    broker = kref_broker_factory(OVERRIDES)
    acked = produce_until_killed(broker)
    assert len(acked) > 1500
    broker.start()
    seen = read_all(broker.bootstrap)
    assert {v: seen.get(v) for v in acked} == acked

    broker.kill()
    dirs = [Path(broker.log_dirs[0]) / f"{TOPIC}-{p}" for p in range(PARTITIONS)]
    for d in dirs:
        segments = sorted(d.glob("*.log"))
        assert len(segments) > 1, "the test wants several segments"
        with open(segments[-1], "ab") as f:
            f.write(os.urandom(3000))  # a torn write of garbage after the last batch
    for i, index in enumerate(sorted(f for d in dirs for f in d.iterdir() if f.suffix in (".index", ".timeindex"))):
        if i % 2:
            index.unlink()
        else:
            index.write_bytes(os.urandom(index.stat().st_size or 64))
    broker.start()
    seen = read_all(broker.bootstrap)
    assert {v: seen.get(v) for v in acked} == acked

    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    after = []
    p.produce(TOPIC, b"after", partition=0, on_delivery=lambda e, m: after.append((e, m.offset())))
    assert p.flush(15) == 0
    last = max((o for part, o in seen.values() if part == 0), default=-1)
    assert after == [(None, last + 1)]
