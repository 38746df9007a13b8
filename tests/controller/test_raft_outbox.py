"""The quorum's per-peer outbox (kref/node/raft_driver.py, PeerOutbox).

What waits for a peer's sender is the newest request of each kind, in the
order the core made them: a newer Vote, BeginQuorumEpoch, EndQuorumEpoch or
Fetch supersedes an unsent older one of its kind, so the outbox holds at most
four requests whatever the core produces.

The process-level case is the one that failed at 10,000 partitions (session
10): a peer that does not answer holds its sender's one request in flight
while the core keeps asking (here: a pre-vote round every election timeout).
A first-in-first-out queue of 64 filled with stale VoteRequests and dropped
the new ones ("queue to node N full, VoteRequest dropped"). Here the real
RaftNode runs against two real sockets that accept and never answer; after
more rounds than the old queue held, each peer has received its first
request only, and one VoteRequest, the newest, waits for it. When a peer
closes its connection, that newest request is the next it receives.
"""

from __future__ import annotations

import logging
import struct

import pytest
import trio

from kref.broker.config import BrokerConfig
from kref.controller import quorum as q
from kref.node.raft_driver import FETCH, VOTE, PeerOutbox, RaftNode
from kref.protocol.framing import FrameDecoder

OLD_QUEUE_ENTRIES = 64  # the first-in-first-out queue this replaced


def _fetch(offset: int) -> q.FetchRequest:
    return q.FetchRequest(4, 3, offset, 2, 500)


def _vote(epoch: int, pre_vote: bool = False) -> q.VoteRequest:
    return q.VoteRequest(epoch, 1, 2, 10, pre_vote=pre_vote)


def test_a_newer_request_supersedes_an_unsent_one_of_its_kind_and_the_rest_keep_their_order():
    box = PeerOutbox()
    assert box.put(_fetch(5)) is None
    assert box.put(_vote(3, pre_vote=True)) is None
    assert box.put(_fetch(7)) == _fetch(5)
    assert box.put(_vote(4)) == _vote(3, pre_vote=True)
    assert box.put(q.BeginQuorumEpochRequest(1, 4)) is None
    assert len(box) == 3 and box.superseded == 2
    assert box.peek() == _fetch(7)
    assert [box.take(), box.take(), box.take(), box.take()] == [
        _fetch(7), _vote(4), q.BeginQuorumEpochRequest(1, 4), None,
    ]


def test_a_fetch_snapshot_supersedes_a_fetch_and_the_outbox_stays_bounded():
    box = PeerOutbox()
    for i in range(1000):
        box.put(_fetch(i))
        box.put(_vote(i))
        box.put(q.BeginQuorumEpochRequest(1, i))
        box.put(q.EndQuorumEpochRequest(1, i, (2, 3)))
    assert len(box) == 4
    box.put(q.FetchSnapshotRequest(4, 3, 100, 2, 0, 1024))
    assert len(box) == 4
    assert [type(box.take()) for _ in range(4)] == [
        q.VoteRequest, q.BeginQuorumEpochRequest, q.EndQuorumEpochRequest, q.FetchSnapshotRequest,
    ]


def test_a_response_is_refused():
    with pytest.raises(ValueError, match="VoteResponse"):
        PeerOutbox().put(q.VoteResponse(0, 1, 3, True))


class SilentPeer:
    """A real socket that reads requests and answers none. `close_all` closes
    the connections it holds; from then on it closes each connection once a
    request arrives."""

    def __init__(self) -> None:
        self.api_keys: list[int] = []
        self.answering = False
        self.port = 0
        self.listeners: list = []
        self.connections: list[trio.CancelScope] = []

    async def start(self, nursery: trio.Nursery) -> None:
        self.listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = self.listeners[0].socket.getsockname()[1]
        nursery.start_soon(trio.serve_listeners, self.serve, self.listeners)

    async def serve(self, stream: trio.SocketStream) -> None:
        scope = trio.CancelScope()
        self.connections.append(scope)
        async with stream:
            with scope:
                await self._read(stream)

    async def _read(self, stream: trio.SocketStream) -> None:
        decoder = FrameDecoder(1 << 20)
        while True:
            frame = decoder.next_frame()
            if frame is None:
                data = await stream.receive_some(65536)
                if not data:
                    return
                decoder.feed(data)
                continue
            self.api_keys.append(struct.unpack_from(">h", frame, 0)[0])
            if self.answering:
                return  # the sender sees the connection fail

    def close_all(self) -> None:
        self.answering = True
        for scope in self.connections:
            scope.cancel()


def test_a_silent_peer_holds_one_request_in_flight_and_only_the_newest_vote_waits(tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="kref.raft")
    peers = {2: SilentPeer(), 3: SilentPeer()}

    async def main():
        async with trio.open_nursery() as nursery:
            for peer in peers.values():
                await peer.start(nursery)
            config = BrokerConfig.load(None, [
                "process.roles=controller", "node.id=1",
                f"controller.quorum.voters=1@127.0.0.1:9093,2@127.0.0.1:{peers[2].port},3@127.0.0.1:{peers[3].port}",
                "listeners=CONTROLLER://127.0.0.1:9093", "controller.listener.names=CONTROLLER",
                f"metadata.log.dir={tmp_path}", f"log.dirs={tmp_path}",
                # A pre-vote round every 20-40 ms; a request in flight is given up only after 60 s.
                "controller.quorum.election.timeout.ms=20", "controller.quorum.fetch.timeout.ms=60000",
            ])
            raft = RaftNode(config, "cluster-a", str(tmp_path), jitter_seed=7)
            await nursery.start(raft.run)
            with trio.fail_after(60):
                while raft.core.election_attempt <= OLD_QUEUE_ENTRIES + 6:
                    await trio.sleep(0.01)
            assert raft.core.state is q.State.PROSPECTIVE  # no peer answered a pre-vote
            newest = q.VoteRequest(raft.core.leader_epoch, 1, raft.core.last_epoch, raft.core.log_end_offset,
                                   pre_vote=True)
            for peer_id, peer in peers.items():
                # The first pre-vote is in flight, unanswered; of the rounds since, one waits.
                assert peer.api_keys == [VOTE]
                outbox = raft._outboxes[peer_id]
                assert len(outbox) == 1 and outbox.peek() == newest
                assert outbox.superseded >= OLD_QUEUE_ENTRIES
            assert not [r for r in caplog.records if "dropped" in r.getMessage()]
            peers[2].close_all()
            # The in-flight request fails; after the retry backoff the waiting vote goes.
            with trio.fail_after(30):
                while len(peers[2].api_keys) < 2:
                    await trio.sleep(0.01)
            assert peers[2].api_keys[1] == VOTE and FETCH not in peers[2].api_keys
            raft.close()
            nursery.cancel_scope.cancel()

    trio.run(main)
