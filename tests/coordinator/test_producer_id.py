"""Producer id blocks (KIP-730): one decision, never an id twice across brokers or restarts."""

from __future__ import annotations

import uuid

import pytest
import trio

from kref.controller import controller as c
from kref.coordinator.producer_id import (
    PRODUCER_ID_BLOCK_SIZE, ProducerIdBlock, ProducerIdsExhaustedError, grant_block,
)
from kref.broker.producer_id_driver import ProducerIdManager
from kref.metadata import records as r
from kref.metadata import serde
from kref.metadata.image import MetadataImage, MetadataImageError
from kref.protocol.errors import ErrorCode


def test_grant_block_starts_at_the_image_and_refuses_exhaustion():
    record = grant_block(5000, broker_id=2, broker_epoch=7)
    assert record == r.ProducerIdsRecord(2, 7, 5000 + PRODUCER_ID_BLOCK_SIZE)
    with pytest.raises(ProducerIdsExhaustedError):
        grant_block(2**63 - 10, 1, 1)


def test_record_round_trips_and_the_image_never_goes_back():
    record = r.ProducerIdsRecord(3, 12, 4000)
    assert serde.decode(serde.encode(record)) == record
    image = MetadataImage()
    image.apply([record])
    assert image.next_producer_id == 4000
    with pytest.raises(MetadataImageError):
        image.apply([r.ProducerIdsRecord(1, 1, 3000)])
    # a snapshot keeps the high-water mark
    again = MetadataImage()
    again.apply(image.to_records())
    assert again.next_producer_id == 4000


def _active_controller_with_brokers(*broker_ids):
    core = c.ControllerCore(node_id=100, tracing=False)
    core.step(c.BecomeActive(leader_epoch=1, next_offset=0), 0)
    epochs = {}
    for b in broker_ids:
        epochs[b] = _register(core, b)
    return core, epochs


def _register(core, broker_id):
    # Replayed as a standby would; registration itself is tested in tests/controller.
    record = r.RegisterBrokerRecord(broker_id, uuid.uuid4(), core.next_offset, (), (), None, True)
    core.step(c.Replay(core.next_offset, (record,)), 0)
    return record.broker_epoch


def _reply(effects):
    (effect,) = [e for e in effects if isinstance(e, (c.WriteRecords, c.Reply))]
    return effect.reply, getattr(effect, "records", ())


def test_controller_grants_disjoint_blocks_and_checks_the_broker_epoch():
    core, epochs = _active_controller_with_brokers(1, 2)
    blocks = []
    for rid, broker in enumerate([1, 2, 1], start=10):
        reply, records = _reply(core.step(c.AllocateProducerIds(rid, broker, epochs[broker]), 0))
        assert reply.error_code == ErrorCode.NONE and len(records) == 1
        blocks.append(range(reply.producer_id_start, reply.producer_id_start + reply.producer_id_len))
    assert [b.start for b in blocks] == [0, 1000, 2000] and all(len(b) == 1000 for b in blocks)
    reply, records = _reply(core.step(c.AllocateProducerIds(20, 2, epochs[2] + 5), 0))
    assert reply.error_code == ErrorCode.STALE_BROKER_EPOCH and records == ()
    reply, _ = _reply(core.step(c.AllocateProducerIds(21, 9, 0), 0))
    assert reply.error_code == ErrorCode.BROKER_ID_NOT_REGISTERED
    # a standby replaying the same records would grant from 3000 on
    standby = c.ControllerCore(node_id=101, tracing=False)
    standby.step(c.Replay(0, tuple(core.image.to_records())), 0)
    assert standby.image.next_producer_id == 3000
    reply, _ = _reply(standby.step(c.AllocateProducerIds(1, 1, epochs[1]), 0))
    assert reply.error_code == ErrorCode.NOT_CONTROLLER


def test_manager_uses_its_block_then_reserves_and_refuses_overlap():
    blocks = iter([(0, 2), (10, 2), (11, 5)])
    granted = []

    async def reserve():
        block = next(blocks)
        granted.append(block)
        return block

    async def main():
        manager = ProducerIdManager(reserve)
        ids = [await manager.generate_producer_id() for _ in range(4)]
        assert ids == [0, 1, 10, 11]
        with pytest.raises(RuntimeError, match="refusing producer id block"):
            await manager.generate_producer_id()

    trio.run(main)
    assert len(granted) == 3


def test_block_core_asks_for_a_block_and_refuses_empty_or_overlapping_ones():
    block = ProducerIdBlock()
    assert block.take() is None  # no block yet: the driver must reserve one
    block.accept(5, 2)
    assert [block.take(), block.take(), block.take()] == [5, 6, None]
    for start, length in ((6, 3), (7, 0)):
        with pytest.raises(RuntimeError, match="refusing producer id block"):
            block.accept(start, length)
    block.accept(7, 1)
    assert block.take() == 7
