"""The quorum's fsyncs in a worker thread (kref/node/raft_driver.py, sync_in_thread).

One real RaftNode (real files in a temp dir, real trio loop, Kafka's own
request classes), with a FileSystem port whose fsync waits at a gate the test
opens: the disk is slow, and the test decides when it answers. While an fsync
is held:

- the event loop goes on (the quorum's tick task and other RPCs run);
- a granted vote is not answered, and quorum-state on disk does not have it;
- once the fsync returns, the answer is the granted vote and quorum-state on
  disk names the candidate (durable before the candidate can count it).

And a leader's own append: the high watermark it reaches is delivered to the
node (committed records, on_high_watermark) only after the append's sync,
and appends made meanwhile do not hold back the delivery of an older commit.
"""

from __future__ import annotations

import threading

import trio

from kref.broker.config import BrokerConfig
from kref.broker.router import RequestContext
from kref.controller import quorum as q
from kref.metadata import records as r
from kref.metadata import serde
from kref.node.raft_driver import DESCRIBE_QUORUM, VOTE, VOTE_VERSION, RaftNode, _kio
from kref.ports.fs import RealFileSystem
from kref.storage.metadata_log import METADATA_TOPIC, read_quorum_state


class GatedFileSystem(RealFileSystem):
    """The real file system whose fsync waits until the test opens the gate
    (or lets single fsyncs through with `permits`)."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.permits = threading.Semaphore(0)
        self.fsyncs_waiting = 0  # ever held at the gate
        self.waiting_now = 0  # held at the gate now
        self.let_through = 0  # held, then let through
        self._lock = threading.Lock()

    def fsync(self, path: str) -> None:
        if not self.gate.is_set():
            with self._lock:
                self.fsyncs_waiting += 1
                self.waiting_now += 1
            deadline = 30.0
            while not self.gate.is_set() and not self.permits.acquire(timeout=0.01):
                deadline -= 0.01
                assert deadline > 0, "the test never opened the gate"
            with self._lock:
                self.waiting_now -= 1
                self.let_through += 1
        super().fsync(path)


def _node(tmp_path, voters: str, fs: GatedFileSystem, election_ms: int = 60000) -> RaftNode:
    config = BrokerConfig.load(None, [
        "process.roles=controller", "node.id=1", f"controller.quorum.voters={voters}",
        "listeners=CONTROLLER://127.0.0.1:9093", "controller.listener.names=CONTROLLER",
        f"metadata.log.dir={tmp_path}", f"log.dirs={tmp_path}",
        # 60 s: no election of its own during the vote test, it only answers.
        f"controller.quorum.election.timeout.ms={election_ms}", f"controller.quorum.fetch.timeout.ms={2 * election_ms}",
    ])
    return RaftNode(config, "cluster-a", str(tmp_path), fs=fs, jitter_seed=1, sync_in_thread=True)


def _ctx(api_key: int, version: int) -> RequestContext:
    return RequestContext(None, api_key, version, 1, "test", "127.0.0.1")


def _vote_request(candidate: int, epoch: int):
    cls, m = _kio(VOTE, VOTE_VERSION, "request")
    return cls(cluster_id="cluster-a", voter_id=1, topics=(m.TopicData(topic_name=METADATA_TOPIC, partitions=(
        m.PartitionData(partition_index=0, replica_epoch=epoch, replica_id=candidate, replica_directory_id=None,
                        voter_directory_id=None, last_offset_epoch=0, last_offset=0, pre_vote=False),
    )),))


def test_a_vote_is_answered_only_once_quorum_state_is_durable_and_the_loop_runs_meanwhile(tmp_path):
    fs = GatedFileSystem()
    raft = _node(tmp_path, "1@127.0.0.1:9093,2@127.0.0.1:1,3@127.0.0.1:2", fs)
    answers = []

    async def main():
        async with trio.open_nursery() as nursery:
            await nursery.start(raft.run)
            fs.gate.clear()

            async def vote():
                answers.append(await raft._handle_vote(_ctx(VOTE, VOTE_VERSION), _vote_request(2, 5)))

            nursery.start_soon(vote)
            with trio.fail_after(10):
                while fs.fsyncs_waiting == 0:
                    await trio.sleep(0.01)
            # The core has granted the vote in memory; nothing has left the node.
            assert raft.core.voted_for == 2 and raft.core.leader_epoch == 5
            await trio.sleep(0.2)  # the loop runs: ticks and other RPCs are served
            cls, m = _kio(DESCRIBE_QUORUM, 0, "request")
            described = await raft._handle_describe_quorum(_ctx(DESCRIBE_QUORUM, 0), cls(topics=(
                m.TopicData(topic_name=METADATA_TOPIC, partitions=(m.PartitionData(partition_index=0),)),)))
            assert described.error_code != 0  # not the leader, and answered while the fsync waits
            assert answers == []
            assert read_quorum_state(raft.metadata_log.dir).voted_for == -1
            fs.gate.set()
            with trio.fail_after(10):
                while not answers:
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()

    trio.run(main)
    raft.close()
    p = answers[0].topics[0].partitions[0]
    assert p.vote_granted and p.leader_epoch == 5
    state = read_quorum_state(raft.metadata_log.dir)
    assert (state.leader_epoch, state.voted_for) == (5, 2)


def test_a_leader_delivers_its_commit_only_after_the_sync_of_its_append(tmp_path):
    fs = GatedFileSystem()
    raft = _node(tmp_path, "1@127.0.0.1:9093", fs, election_ms=200)  # a single voter: its own append commits
    delivered: list[int] = []
    raft.on_high_watermark.append(delivered.append)

    async def main():
        async with trio.open_nursery() as nursery:
            await nursery.start(raft.run)
            with trio.fail_after(20):
                while not (raft.core.is_leader() and delivered):
                    await trio.sleep(0.01)  # elected alone; its LeaderChange record commits
            fs.gate.clear()
            end = raft.metadata_log.log_end_offset
            assert raft.propose([serde.encode(r.FeatureLevelRecord("metadata.version", 20))]) == end
            await trio.sleep(0.2)
            # The core counts its append (a single voter: committed in memory),
            # but the node acts on it only after the sync.
            assert raft.core.high_watermark == end + 1
            assert raft.high_watermark <= end and max(delivered) <= end
            fs.gate.set()
            with trio.fail_after(10):
                while max(delivered) < end + 1:
                    await trio.sleep(0.01)
            assert raft.high_watermark == end + 1
            nursery.cancel_scope.cancel()

    trio.run(main)
    raft.close()
    assert raft.core.state is q.State.LEADER


def test_new_appends_do_not_hold_back_the_delivery_of_an_older_commit(tmp_path):
    fs = GatedFileSystem()
    raft = _node(tmp_path, "1@127.0.0.1:9093", fs, election_ms=200)
    delivered: list[int] = [0]
    raft.on_high_watermark.append(delivered.append)
    record = serde.encode(r.FeatureLevelRecord("metadata.version", 20))

    async def main():
        async with trio.open_nursery() as nursery:
            await nursery.start(raft.run)
            with trio.fail_after(20):
                while not (raft.core.is_leader() and max(delivered) > 0):
                    await trio.sleep(0.01)
            fs.gate.clear()
            first = raft.propose([record])
            with trio.fail_after(10):
                while fs.fsyncs_waiting == 0:
                    await trio.sleep(0.01)  # the sync of the first append has started
            written_first = raft._written
            second = raft.propose([record])  # written while that sync runs: the next sync's
            # One held fsync at a time, until the first sync is through (the
            # syncer runs on this loop: between the two checks it cannot start
            # the second sync, so no permit is left over for it).
            with trio.fail_after(10):
                while raft._durable < written_first:
                    if fs.waiting_now > 0:
                        through = fs.let_through
                        fs.permits.release()
                        while fs.let_through == through:
                            await trio.sleep(0.005)
                    await trio.sleep(0.005)
            await trio.sleep(0.1)
            # The first commit is delivered; the second waits for its own sync.
            assert max(delivered) == first + 1 == raft.high_watermark
            assert raft.core.high_watermark == second + 1
            fs.gate.set()
            with trio.fail_after(10):
                while max(delivered) < second + 1:
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()

    trio.run(main)
    raft.close()
