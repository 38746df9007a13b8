"""A follower's fetch that finds its log diverging is answered at once (KIP-320).

Kafka's fetchMessages answers a fetch with a diverging epoch without
parking it: the follower must truncate before anything else can be sent.
Before session 11 the fetch handler parked it for replica.fetch.wait.max.ms
and stepped the core again when it woke, so the leader logged the same
LeaderHandleFetch twice and the follower waited to truncate. Driven through
the real fetch handler and a real Partition (no sockets), on trio's virtual
clock: the answer must come without the clock moving.
"""

from __future__ import annotations

import os
import types

import trio
import trio.testing

from kref.broker.broker import Broker
from kref.broker.config import BrokerConfig
from kref.broker.handlers import fetch
from kref.broker.partition import Partition
from kref.protocol.codec import decode_response, response_class
from kref.records.batch import Record, build_batch
from kref.replication.purgatory import Purgatory
from kref.storage.config import LogConfig
from kref.storage.log import Log
from kref.trace import ListTraceSink

NOW = 1_700_000_000_000
VERSION = 12  # topic names and replica_id in the request (before KIP-516 ids)


class _Router:
    def register(self, *args) -> None:
        pass


def _leader(tmp_path, broker: Broker, trace: ListTraceSink) -> Partition:
    """Leader 1 of t-0 (replicas 1, 2, 3): offsets 0-1 in epoch 1, 2-3 in epoch 3."""
    log = Log.open(os.path.join(tmp_path, "t-0"), LogConfig(), NOW)
    part = Partition(log, replica_id=1, produce_purgatory=broker.produce_purgatory,
                     fetch_purgatory=broker.fetch_purgatory, trace=trace)
    batch = build_batch([Record(timestamp=NOW, value=b"v"), Record(timestamp=NOW, value=b"w")])
    part.become_leader(NOW, leader_epoch=1, isr=(1, 2, 3), replicas=(1, 2, 3), high_watermark=0)
    part.append_records_as_leader(batch, 1, 2, NOW)
    part.become_leader(NOW, leader_epoch=3, isr=(1, 2, 3), replicas=(1, 2, 3), high_watermark=0)
    part.append_records_as_leader(batch, 1, 2, NOW)
    return part


def _request(fetch_offset: int, last_fetched_epoch: int, max_wait_ms: int = 500):
    partition = types.SimpleNamespace(partition=0, fetch_offset=fetch_offset, partition_max_bytes=1 << 20,
                                      current_leader_epoch=3, last_fetched_epoch=last_fetched_epoch)
    return types.SimpleNamespace(
        replica_id=2, max_wait=types.SimpleNamespace(total_seconds=lambda: max_wait_ms / 1000), min_bytes=1,
        max_bytes=1 << 20, session_id=0, session_epoch=-1, rack_id="",
        topics=[types.SimpleNamespace(topic="t", partitions=[partition])], forgotten_topics_data=[])


def _fetch(tmp_path, fetch_offset: int, last_fetched_epoch: int):
    config = BrokerConfig.load(None, [f"log.dirs={tmp_path / 'data'}"])
    broker = Broker(config)
    broker.produce_purgatory, broker.fetch_purgatory = Purgatory("produce"), Purgatory("fetch")
    fetch.register(_Router(), broker)
    trace = ListTraceSink()
    # The replica manager's one job here: hosting the partition the handler looks up.
    broker.replica_manager = types.SimpleNamespace(partitions={("t", 0): _leader(tmp_path, broker, trace)})
    trace.events.clear()
    out = {}

    async def main():
        begun = trio.current_time()
        answer = await fetch.fetch(broker, VERSION, _request(fetch_offset, last_fetched_epoch))
        out["waited_s"] = trio.current_time() - begun
        out["answer"] = answer

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    return out, trace.events




def test_a_diverging_follower_is_answered_at_once_and_logged_once(tmp_path):
    # Follower 2 holds offsets up to 5 in epoch 2, which this leader never had
    # (its log ends at 4): epoch 1 ends at 2 here, so the answer is "diverging:
    # epoch 1 ends at 2". Its fetch offset is past the leader's log end, so
    # parked, nothing would have woken it before max_wait.
    out, events = _fetch(tmp_path, 6, 2)
    assert out["waited_s"] == 0, "a diverging answer must not wait in the fetch purgatory"
    handled = [e for e in events if e["type"] == "LeaderHandleFetch"]
    assert [(e["diverging_epoch"], e["diverging_end_offset"]) for e in handled] == [(1, 2)]


def test_a_caught_up_follower_still_waits_for_new_records(tmp_path):
    # The control: a follower at the log end with nothing diverging parks until max_wait.
    out, events = _fetch(tmp_path, 4, 3)
    assert out["waited_s"] >= 0.5
    assert [e["type"] for e in events].count("LeaderHandleFetch") == 2  # at park and at completion
