"""Byte compatibility of the files kref writes, checked with independent readers:
every `.log` segment file parses batch by batch with kafka-python's MemoryRecords
(CRC valid, offsets contiguous, file name = base offset), `.index`/`.timeindex`
entries decoded with plain struct agree with what the batches say, and a read
in progress keeps working while retention renames its segment to `.deleted`
(deletion never breaks a reader)."""

from __future__ import annotations

import os
import struct

from kafka.record import MemoryRecords

from kref.storage.config import LogConfig
from kref.storage.log import Log

from .batches import make_batch


def test_segments_parse_with_kafka_python(tmp_path):
    log = Log.open(str(tmp_path / "fmt-0"), LogConfig.from_properties({"segment.bytes": "2000", "index.interval.bytes": "300"}), 0)
    for i in range(60):
        log.append_as_leader(make_batch([b"value-%d" % i] * (1 + i % 4), timestamp=10_000 + i, compression_type=i % 2), i // 10, 20_000)
    log.roll(20_000)
    log.close()
    logs = sorted(n for n in os.listdir(log.dir) if n.endswith(".log"))
    assert len(logs) > 3
    expected_offset = 0
    for name in logs:
        base = int(name[:-4])
        assert name == f"{base:020d}.log" and base == expected_offset or os.path.getsize(os.path.join(log.dir, name)) == 0
        data = open(os.path.join(log.dir, name), "rb").read()
        records = MemoryRecords(data)
        positions = {}
        position = 0
        while records.has_next():
            batch = records.next_batch()
            assert batch.validate_crc()
            assert batch.base_offset == expected_offset
            offsets = [r.offset for r in batch]
            assert offsets == list(range(expected_offset, expected_offset + len(offsets)))
            positions[batch.base_offset + batch.last_offset_delta] = (position, batch.max_timestamp)
            position += 12 + struct.unpack_from(">i", data, position + 8)[0]
            expected_offset += len(offsets)
        assert position == len(data)
        index = open(os.path.join(log.dir, f"{base:020d}.index"), "rb").read()
        assert len(index) % 8 == 0
        for relative, pos in struct.iter_unpack(">ii", index):
            assert positions[base + relative][0] == pos
        timeindex = open(os.path.join(log.dir, f"{base:020d}.timeindex"), "rb").read()
        assert len(timeindex) % 12 == 0
        timestamps = [ts for ts, _ in struct.iter_unpack(">qi", timeindex)]
        assert timestamps == sorted(set(timestamps))
        if data:
            # the last time-index entry (written on roll) is the segment's largest timestamp
            assert timestamps[-1] == max(ts for _, ts in positions.values())
    assert expected_offset == sum(1 + i % 4 for i in range(60))
    epoch_file = open(os.path.join(log.dir, "leader-epoch-checkpoint")).read().splitlines()
    assert epoch_file[:2] == ["0", "6"] and epoch_file[2:] == [f"{e} {o}" for e, o in log.leader_epoch_cache.entries()]


def test_retention_never_breaks_a_read_in_progress(tmp_path):
    log = Log.open(
        str(tmp_path / "ret-0"),
        LogConfig.from_properties({"segment.bytes": "300", "retention.ms": "10", "file.delete.delay.ms": "1000"}),
        0,
    )
    for i in range(12):
        log.append_as_leader(make_batch([b"r" * 60], timestamp=100 + i), 0, 100 + i)
    reader = log._iter_all_headers(0)  # a scan over every segment, paused after its first batch
    first = next(reader)
    assert log.delete_old_segments(1_000) > 0
    assert any(n.endswith(".log.deleted") for n in os.listdir(log.dir))
    rest = list(reader)
    assert [first.base_offset] + [h.base_offset for h in rest] == list(range(12))
    log.delete_pending_segments(2_000)
    assert not any(n.endswith(".deleted") for n in os.listdir(log.dir))
    log.close()
