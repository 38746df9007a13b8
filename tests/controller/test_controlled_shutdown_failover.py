"""A controller failover in the middle of a controlled shutdown (deterministic).

Session 6's CI saw it once in 11 runs of test_elect_leaders_and_controlled_shutdown:
broker 2, also the active controller, shut down under control; the next
controller put it back into an isr and later elected it. Two gaps made it:

1. The active controller answered a heartbeat from its optimistic state: the
   broker sends heartbeats concurrently (its heartbeat loop and its shutdown
   loop), so while the FenceBrokerRecord's own reply waited for the commit a
   second heartbeat read "fenced" and was told should_shut_down at once. The
   broker (the controller's own node) exited and its quorum resigned before
   the FenceBrokerRecord was replicated: the next leader truncated it. A Reply
   now names the offset that must be committed first (Kafka's controller
   delays such reads the same way).
2. "In controlled shutdown" lived in the controller's memory only; the next
   controller let the broker rejoin an isr (INELIGIBLE_REPLICA in Kafka,
   KIP-841). It is now a BrokerRegistrationChangeRecord, replayed everywhere.

Two ControllerCores stand for the old and the new controller; the new one
replays only what the old one had committed, as a standby does.
"""

from __future__ import annotations

import uuid

from kref.controller import controller as c
from kref.metadata import records as r
from kref.metadata import serde
from kref.metadata.image import MetadataImage
from kref.protocol.errors import ErrorCode

TOPIC_ID = uuid.UUID(int=7)


class Cluster:
    """The old controller (node 2) writes; `commit(n)` hands the first n records to the standby (node 1)."""

    def __init__(self) -> None:
        self.old = c.ControllerCore(2, tracing=False)
        self.new = c.ControllerCore(1, tracing=False)
        self.log: list = []
        self.committed = 0
        self.rid = 0
        self.old.step(c.BecomeActive(1, 0), 0)

    def request(self, core: c.ControllerCore, make) -> list:
        self.rid += 1
        effects = core.step(make(self.rid), 0)
        for e in effects:
            if isinstance(e, c.WriteRecords):
                assert e.base_offset == len(self.log)
                # through the wire format, as the quorum carries them
                self.log += [serde.decode(serde.encode(rec)) for rec in e.records]
        return effects

    def commit(self, upto: int | None = None) -> None:
        upto = len(self.log) if upto is None else upto
        if upto > self.committed:
            self.new.step(c.Replay(self.committed, tuple(self.log[self.committed:upto])), 0)
            self.committed = upto


def _reply(effects: list):
    (reply,) = [e for e in effects if isinstance(e, (c.Reply, c.WriteRecords)) and e.reply is not None]
    return reply


def _setup() -> Cluster:
    cl = Cluster()
    epochs = {}
    for b in (1, 2, 3):
        w = _reply(cl.request(cl.old, lambda rid, b=b: c.BrokerRegistration(rid, b, uuid.UUID(int=b))))
        epochs[b] = w.reply.broker_epoch
    for b in (1, 2, 3):
        cl.request(cl.old, lambda rid, b=b: c.BrokerHeartbeatRequest(rid, b, epochs[b], len(cl.log)))
    cl.request(cl.old, lambda rid: c.CreateTopic(rid, "t", 3, 3, TOPIC_ID))
    cl.commit()
    cl.epochs = epochs
    return cl


def test_should_shut_down_waits_for_the_fence_and_the_next_controller_keeps_the_broker_out():
    cl = _setup()
    epoch2 = cl.epochs[2]
    # Controlled shutdown starts: marked in the log, leaderships moved, isr left (one batch).
    w = _reply(cl.request(cl.old, lambda rid: c.BrokerHeartbeatRequest(rid, 2, epoch2, len(cl.log), want_shut_down=True)))
    assert isinstance(w, c.WriteRecords)
    assert w.records[0] == r.BrokerRegistrationChangeRecord(2, epoch2, in_controlled_shutdown=1)
    cl.commit()
    # The broker applied that batch: the FenceBrokerRecord is written (not committed yet).
    fence = _reply(cl.request(cl.old, lambda rid: c.BrokerHeartbeatRequest(rid, 2, epoch2, len(cl.log), want_shut_down=True)))
    assert isinstance(fence, c.WriteRecords) and fence.records == (r.FenceBrokerRecord(2, epoch2),)
    assert fence.reply.should_shut_down
    # A concurrent heartbeat reads "fenced" from the uncommitted state: its answer
    # must wait for that state's commit, not leave at once.
    early = _reply(cl.request(cl.old, lambda rid: c.BrokerHeartbeatRequest(rid, 2, epoch2, len(cl.log), want_shut_down=True)))
    assert isinstance(early, c.Reply) and early.reply.should_shut_down
    assert early.commit_offset > fence.base_offset, "should_shut_down answered before the FenceBrokerRecord commits"

    # The old controller goes away before the fence is replicated: node 1 takes over
    # with the committed log only (the fence is truncated).
    del cl.log[cl.committed:]
    cl.new.step(c.BecomeActive(2, len(cl.log)), 0)
    cl.old = None
    broker2 = cl.new.brokers[2]
    assert not broker2.fenced and broker2.in_controlled_shutdown
    # Leader 3 (or 1) sees broker 2 caught up and asks to put it back: refused.
    for pid in range(3):
        p = cl.new.topics["t"].partitions[pid]
        assert 2 not in p.isr and p.leader != 2
        effects = cl.request(cl.new, lambda rid, pid=pid, p=p: c.AlterPartition(
            rid, p.leader, cl.epochs[p.leader], TOPIC_ID, pid, p.leader_epoch, p.partition_epoch, p.isr + (2,)))
        assert _reply(effects).reply.error_code == ErrorCode.INELIGIBLE_REPLICA
    # Nor may it lead: a preferred election for its partition is not available.
    preferred = [pid for pid, p in cl.new.topics["t"].partitions.items() if p.replicas[0] == 2]
    w = _reply(cl.request(cl.new, lambda rid: c.ElectLeaders(rid, c.PREFERRED_ELECTION, tuple(("t", pid) for pid in preferred))))
    assert {code for _, _, code, _ in w.reply.results} == {ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE}
    # A plain heartbeat of a broker in controlled shutdown does not let it back either.
    cl.request(cl.new, lambda rid: c.BrokerHeartbeatRequest(rid, 2, epoch2, len(cl.log)))
    assert cl.new.brokers[2].in_controlled_shutdown
    # If the broker asks again, the new controller fences it once it applied the log so far.
    w = _reply(cl.request(cl.new, lambda rid: c.BrokerHeartbeatRequest(rid, 2, epoch2, len(cl.log), want_shut_down=True)))
    assert isinstance(w, c.WriteRecords) and w.records == (r.FenceBrokerRecord(2, epoch2),) and w.reply.should_shut_down


def test_in_controlled_shutdown_survives_a_snapshot_and_ends_with_a_new_registration():
    cl = _setup()
    epoch2 = cl.epochs[2]
    cl.request(cl.old, lambda rid: c.BrokerHeartbeatRequest(rid, 2, epoch2, len(cl.log), want_shut_down=True))
    cl.commit()
    image = MetadataImage()
    image.apply(tuple(serde.decode(serde.encode(rec)) for rec in cl.new.image.to_records()))
    assert image.brokers[2].in_controlled_shutdown and not image.brokers[2].fenced
    # Fenced, it stays in controlled shutdown until a new incarnation registers.
    cl.request(cl.old, lambda rid: c.BrokerHeartbeatRequest(rid, 2, epoch2, len(cl.log), want_shut_down=True))
    cl.commit()
    assert cl.new.brokers[2].fenced and cl.new.brokers[2].in_controlled_shutdown
    w = _reply(cl.request(cl.old, lambda rid: c.BrokerRegistration(rid, 2, uuid.UUID(int=22))))
    cl.commit()
    assert not cl.new.brokers[2].in_controlled_shutdown
    cl.request(cl.old, lambda rid: c.BrokerHeartbeatRequest(rid, 2, w.reply.broker_epoch, len(cl.log)))
    cl.commit()
    assert not cl.new.brokers[2].fenced


def test_a_reply_of_a_standby_is_not_held():
    core = c.ControllerCore(1, tracing=False)
    (reply,) = core.step(c.BrokerHeartbeatRequest(1, 1, 1, 0), 0)
    assert reply.reply.error_code == ErrorCode.NOT_CONTROLLER and reply.commit_offset == 0
