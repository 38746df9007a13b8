"""ControllerCore's LoadImage: a controller taking over, or deposed, starts from
the committed image its node keeps instead of replaying the log.

The node's RaftNode applies every committed record to a MetadataImage; the
controller driver hands a copy of it to the core when the quorum elects the
node (kref/node/controller_driver.py). These tests drive the pure core with
the records it wrote, "committing" some of them into a separate image as the
quorum driver would, and check that:

- a core loaded from the committed image is in the state a replay of the
  same records gives (same brokers, topics, partitions, next offset);
- what the deposed controller wrote past the commit is gone after the load;
- the core works on a copy: its next writes leave the committed image as it was.
"""

from __future__ import annotations

import uuid

from kref.controller import controller as c
from kref.metadata.image import MetadataImage
from kref.protocol.errors import ErrorCode


def _writes(effects) -> list[c.WriteRecords]:
    return [e for e in effects if isinstance(e, c.WriteRecords)]


def _active_core_with_brokers(committed: MetadataImage) -> tuple[c.ControllerCore, list]:
    """An active core with three unfenced brokers; every record it wrote is
    applied to `committed` (the quorum committed them). Returns the records."""
    core = c.ControllerCore(1, tracing=False)
    core.step(c.BecomeActive(1, 1), 0)
    written = []
    for broker in (1, 2, 3):
        for w in _writes(core.step(c.BrokerRegistration(broker, broker, uuid.UUID(int=broker), (), None), 0)):
            written += w.records
    for broker in (1, 2, 3):
        epoch = core.brokers[broker].broker_epoch
        for w in _writes(core.step(c.BrokerHeartbeatRequest(10 + broker, broker, epoch, core.next_offset), 0)):
            written += w.records
    committed.apply(written)
    return core, written


def test_a_loaded_core_is_what_a_replay_of_the_committed_records_gives():
    committed = MetadataImage()
    core, written = _active_core_with_brokers(committed)
    effects = core.step(c.CreateTopic(20, "orders", 6, 3, uuid.UUID(int=99), ()), 0)
    (write,) = _writes(effects)
    committed.apply(write.records)
    offset = write.base_offset + len(write.records)

    loaded = c.ControllerCore(2, tracing=False)
    loaded.step(c.LoadImage(committed, offset), 0)
    replayed = c.ControllerCore(2, tracing=False)
    replayed.step(c.Replay(1, tuple(written) + write.records), 0)

    assert loaded.image == replayed.image == committed
    assert loaded.next_offset == replayed.next_offset == offset
    assert not loaded.active


def test_a_deposed_controller_drops_what_it_wrote_past_the_commit():
    committed = MetadataImage()
    core, written = _active_core_with_brokers(committed)
    commit_offset = core.next_offset
    (uncommitted,) = _writes(core.step(c.CreateTopic(20, "lost", 3, 3, uuid.UUID(int=98), ()), 0))
    assert "lost" in core.topics

    core.step(c.Resign(), 0)
    assert not core.active
    # Not the active controller any more: a request is answered NOT_CONTROLLER, nothing written.
    (reply,) = core.step(c.CreateTopic(21, "other", 1, 1, uuid.UUID(int=97), ()), 0)
    assert isinstance(reply, c.Reply) and reply.reply.error_code == ErrorCode.NOT_CONTROLLER

    # Elected again later: the committed image replaces the optimistic state.
    core.step(c.LoadImage(committed, commit_offset), 0)
    assert "lost" not in core.topics
    assert core.next_offset == commit_offset
    core.step(c.BecomeActive(3, commit_offset + 1), 0)
    (write,) = _writes(core.step(c.CreateTopic(22, "again", 3, 3, uuid.UUID(int=96), ()), 0))
    assert write.base_offset == commit_offset + 1
    assert [rec.name for rec in write.records[:1]] == ["again"]


def test_the_core_writes_on_its_own_copy_of_the_image():
    committed = MetadataImage()
    _active_core_with_brokers(committed)
    before = committed.copy()
    core = c.ControllerCore(1, tracing=False)
    core.step(c.LoadImage(committed, 7), 0)
    core.step(c.BecomeActive(2, 8), 0)
    (write,) = _writes(core.step(c.CreateTopic(1, "orders", 4, 3, uuid.UUID(int=5), ()), 0))
    assert len(write.records) == 5 and "orders" in core.topics
    # An AlterPartition-like change of one partition: PartitionImage values are shared, never mutated.
    core.step(c.ElectLeaders(2, c.PREFERRED_ELECTION, None), 0)
    assert "orders" not in committed.topics
    assert committed == before
