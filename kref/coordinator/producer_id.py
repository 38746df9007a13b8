"""Producer id allocation for InitProducerId, never repeating across restarts.

What: the broker hands each idempotent producer a fresh producer id (epoch 0)
in InitProducerId (KIP-98). Two producers must never share an id, not even
across a broker restart, or one producer's sequence numbers would be judged
against the other's state and its batches dropped as "duplicates".

How: like Kafka's ProducerIdManager, ids are reserved in blocks
(PRODUCER_ID_BLOCK_SIZE, 1000). Before the first id of a block is handed out
the end of the block is persisted (write to a temporary file, fsync, rename),
so after any crash the next block starts past every id ever given. A crash
wastes at most the rest of one block, which the 2^63 id space does not mind.
Kafka keeps the block in the metadata log (ProducerIdsRecord, or
/latest_producer_id_block in ZooKeeper); kref keeps it as a small JSON file
in the first log directory.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

PRODUCER_ID_BLOCK_SIZE = 1000
STATE_FILE = "kref-producer-ids.json"
MAX_PRODUCER_ID = 2**63 - 1


class ProducerIdsExhaustedError(RuntimeError):
    pass


class ProducerIdManager:
    def __init__(self, directory: str | os.PathLike, *, block_size: int = PRODUCER_ID_BLOCK_SIZE) -> None:
        self.path = Path(directory) / STATE_FILE
        self.block_size = block_size
        self._next = self._block_end = self._read_next_block_start()

    def _read_next_block_start(self) -> int:
        try:
            state = json.loads(self.path.read_text())
            value = int(state["next_block_start"])
        except FileNotFoundError:
            return 0
        except (ValueError, KeyError, TypeError) as e:
            # never guess: a lost high-water mark could hand out ids twice
            raise RuntimeError(f"{self.path} is unreadable ({e}); refusing to allocate producer ids") from e
        if value < 0:
            raise RuntimeError(f"{self.path}: negative next_block_start {value}")
        return value

    def _reserve_block(self) -> None:
        end = self._block_end + self.block_size
        if end > MAX_PRODUCER_ID:
            raise ProducerIdsExhaustedError("producer id space exhausted")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w") as f:
            json.dump({"version": 1, "next_block_start": end}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self._next, self._block_end = self._block_end, end

    def generate_producer_id(self) -> int:
        if self._next >= self._block_end:
            self._reserve_block()
        producer_id = self._next
        self._next += 1
        return producer_id
