"""Producer ids for InitProducerId, never handed out twice in a cluster (KIP-730).

Theory of operation
-------------------
An idempotent producer (KIP-98) gets a producer id once and numbers its
batches per partition from sequence 0. Two producers must never share an id,
neither across brokers nor across restarts: the partition leader would judge
one producer's sequence numbers against the other's state and drop or refuse
its batches.

Kafka (KIP-730) grants ids in blocks through the metadata log: a broker asks
the active controller (AllocateProducerIds), the controller writes a
ProducerIdsRecord whose `next_producer_id` is the end of the new block, and
answers only once the record is committed. Because the metadata image
replays that record, every later grant starts past every id ever given, on
any controller, after any crash. kref does the same:

- `grant_block` is the one decision (pure): given the image's
  next_producer_id it returns the record for the next block, or raises when
  the 2^63 id space is used up. The KRaft controller core calls it for
  AllocateProducerIds; the single broker, its own controller, calls it and
  commits the record to its local metadata log (kref/metadata/local_source).
- `ProducerIdBlock` is the broker's side, as a pure core: it hands out the
  ids of its current block, says when the block is used up, and accepts a
  new block only if it starts past every id already handed out.
  `ProducerIdManager` (kref/broker/producer_id_driver.py) is its trio
  driver: it awaits `reserve()` (the controller RPC, or the single broker's
  local commit) when the core asks for a block, one reservation at a time.
  A crash wastes at most the rest of one block.

This module is pure (no trio, no clock, no files): the driver module holds
the waiting and the read of the single broker's former
`kref-producer-ids.json` (a block end kept in a JSON file), which is
migrated once into a ProducerIdsRecord.
"""

from __future__ import annotations

from kref.metadata import records as r

PRODUCER_ID_BLOCK_SIZE = 1000  # Kafka's block size too
MAX_PRODUCER_ID = 2**63 - 1
LEGACY_STATE_FILE = "kref-producer-ids.json"


class ProducerIdsExhaustedError(RuntimeError):
    pass


class ProducerIdUnavailable(Exception):
    """No block can be had now (no active controller, a timeout): retriable."""


def grant_block(next_producer_id: int, broker_id: int, broker_epoch: int,
                block_size: int = PRODUCER_ID_BLOCK_SIZE) -> r.ProducerIdsRecord:
    """The record granting `broker_id` the block that starts at `next_producer_id`."""
    end = next_producer_id + block_size
    if end > MAX_PRODUCER_ID:
        raise ProducerIdsExhaustedError("producer id space exhausted")
    return r.ProducerIdsRecord(broker_id=broker_id, broker_epoch=broker_epoch, next_producer_id=end)


class ProducerIdBlock:
    """The ids of the current block (pure: no I/O, no clock)."""

    def __init__(self) -> None:
        self.next_producer_id = 0
        self.block_end = 0

    def take(self) -> int | None:
        """The next id, or None when the block is used up (a new one is needed)."""
        if self.next_producer_id >= self.block_end:
            return None
        producer_id = self.next_producer_id
        self.next_producer_id += 1
        return producer_id

    def accept(self, start: int, length: int) -> None:
        """Make [start, start + length) the current block."""
        if length <= 0 or start < self.block_end:
            # a block that overlaps one already used would repeat ids
            raise RuntimeError(f"refusing producer id block [{start}, {start + length}) after {self.block_end}")
        self.next_producer_id, self.block_end = start, start + length


__all__ = [
    "PRODUCER_ID_BLOCK_SIZE", "ProducerIdBlock", "ProducerIdsExhaustedError", "ProducerIdUnavailable", "grant_block",
    "LEGACY_STATE_FILE",
]
