"""The partition driver: the replica core run against a real kref.storage Log.

No sockets: the driver is stepped directly, as the produce and fetch
handlers do. Checked: offsets assigned from the log end, the leader epoch
stamped into each batch and into the epoch cache (a reopened log leads in
the next epoch), consumers reading whole stored batches below the high
watermark only, OFFSET_OUT_OF_RANGE, KIP-320 epoch fencing on reads,
LogAppendTime, MESSAGE_TOO_LARGE from the topic's max.message.bytes,
ListOffsets specials, DeleteRecords bounded by the high watermark, the
trace of spec actions the driver writes, and that an acks=all produce
waiting in the purgatory is released by the HW advance the core reports.
"""

from __future__ import annotations

import os

import trio
import trio.testing

from kref.broker.partition import Partition
from kref.records.batch import Record, build_batch
from kref.records.header import read_header
from kref.replication.purgatory import DelayedFetch, DelayedProduce, ProducePartitionStatus, Purgatory
from kref.broker.purgatory_wait import wait_for
from kref.storage.config import LogConfig
from kref.storage.log import Log
from kref.trace import ListTraceSink

NOW = 1_700_000_000_000


def open_partition(tmp_path, trace=None, **config) -> Partition:
    log = Log.open(os.path.join(tmp_path, "orders-0"), LogConfig(**config), NOW)
    part = Partition(log, replica_id=1, produce_purgatory=Purgatory("p"), fetch_purgatory=Purgatory("f"),
                     trace=trace)
    part.become_leader(NOW, high_watermark=log.recovered_high_watermark or 0)
    return part


def batch(n: int, ts: int = NOW, size: int = 10) -> bytes:
    return build_batch([Record(timestamp=ts + i, value=b"v" * size) for i in range(n)])


def test_append_read_and_trace(tmp_path):
    trace = ListTraceSink()
    part = open_partition(tmp_path, trace)
    first = part.append_records_as_leader(batch(3), 1, 3, NOW)
    second = part.append_records_as_leader(batch(2), -1, 2, NOW)
    assert (first.error_code, first.base_offset, first.required_offset) == (0, 0, None)
    assert (second.error_code, second.base_offset, second.required_offset) == (0, 3, None)
    assert part.high_watermark == part.log_end_offset == 5

    read = part.read(0, 1 << 20, min_one_message=True)
    headers = [read_header(read.records, 0)]
    headers.append(read_header(read.records, headers[0].next_position))
    assert [(h.base_offset, h.records_count, h.partition_leader_epoch) for h in headers] == [(0, 3, 0), (3, 2, 0)]
    assert read.high_watermark == 5 and read.log_start_offset == 0

    # A fetch offset inside a batch gets the whole batch (the client skips).
    assert part.read(4, 1 << 20, min_one_message=True).records == read.records[headers[1].position:]
    assert part.read(5, 1 << 20, min_one_message=True).records == b""
    assert part.read(6, 1 << 20, min_one_message=True).error_code == 1  # OFFSET_OUT_OF_RANGE
    assert part.read(0, 1 << 20, min_one_message=True, current_leader_epoch=1).error_code == 75
    assert [e["type"] for e in trace.events] == [
        "BecomeLeader", "LeaderAppend", "AdvanceHighWatermark", "LeaderAppend", "AdvanceHighWatermark",
    ]
    assert trace.events[-1]["high_watermark"] == 5


def test_reopened_log_leads_in_the_next_epoch(tmp_path):
    part = open_partition(tmp_path)
    part.append_records_as_leader(batch(2), 1, 2, NOW)
    part.log.close()
    again = open_partition(tmp_path)
    assert again.leader_epoch == 1 and again.high_watermark == 2
    assert again.append_records_as_leader(batch(1), 1, 1, NOW).base_offset == 2
    records = again.read(2, 1 << 20, min_one_message=True).records
    assert read_header(records, 0).partition_leader_epoch == 1
    assert again.log.leader_epoch_cache.entries() == [(0, 0), (1, 2)]
    # The fetch of a client still on epoch 0 is fenced.
    assert again.read(0, 100, min_one_message=True, current_leader_epoch=0).error_code == 74


def test_log_append_time_and_size_limit(tmp_path):
    part = open_partition(tmp_path, message_timestamp_type="LogAppendTime", max_message_bytes=500)
    ok = part.append_records_as_leader(batch(2, ts=5), 1, 2, NOW + 7)
    assert ok.log_append_time == NOW + 7
    header = read_header(part.read(0, 1 << 20, min_one_message=True).records, 0)
    assert header.is_log_append_time and header.max_timestamp == NOW + 7
    too_big = part.append_records_as_leader(batch(1, size=1000), 1, 1, NOW)
    assert too_big.error_code == 10 and part.log_end_offset == 2  # MESSAGE_TOO_LARGE, nothing appended


def test_list_offsets_and_delete_records(tmp_path):
    part = open_partition(tmp_path)
    for i in range(5):
        part.append_records_as_leader(batch(2, ts=NOW + 1000 * i), 1, 2, NOW)
    assert part.fetch_offset_for_timestamp(-2) == (0, -1, 0, 0)
    assert part.fetch_offset_for_timestamp(-1)[2] == 10
    assert part.fetch_offset_for_timestamp(NOW + 2000)[1:3] == (NOW + 2000, 4)
    assert part.fetch_offset_for_timestamp(-3)[1:3] == (NOW + 4001, 9)
    assert part.fetch_offset_for_timestamp(NOW + 10**6) == (0, -1, -1, -1)

    assert part.delete_records_before(11, NOW) == (1, 0)  # beyond the HW
    assert part.delete_records_before(4, NOW) == (0, 4)
    assert part.fetch_offset_for_timestamp(-2)[2] == 4
    assert part.read(3, 100, min_one_message=True).error_code == 1
    assert part.delete_records_before(-1, NOW) == (0, 10)  # -1: up to the HW


def test_hw_advance_releases_waiting_operations(tmp_path):
    part = open_partition(tmp_path)
    done = {}

    async def main():
        async with trio.open_nursery() as nursery:
            async def fetcher():
                op = DelayedFetch([part.key], lambda: part.high_watermark > 0)
                done["fetch"] = await wait_for(part.fetch_purgatory, op, 60_000)

            async def producer():
                # Already satisfied (isr = {self}): a delayed produce completes at once.
                op = DelayedProduce({part.key: ProducePartitionStatus(1)},
                                    lambda key, required: part.check_produce_completion(required))
                done["produce"] = await wait_for(part.produce_purgatory, op, 60_000)

            nursery.start_soon(fetcher)
            await trio.sleep(1)
            assert len(part.fetch_purgatory) == 1
            part.append_records_as_leader(batch(1), 1, 1, NOW)  # HighWatermarkAdvanced wakes the fetch
            await trio.sleep(0)
            nursery.start_soon(producer)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert done == {"fetch": True, "produce": True}
    assert len(part.fetch_purgatory) == 0
