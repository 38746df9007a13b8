"""The trio driver of the broker's producer id block (KIP-730).

Theory of operation
-------------------
kref/coordinator/producer_id.py decides (which id comes next, when a block
is used up, whether a granted block may be taken); this module only waits:
`ProducerIdManager` awaits `reserve()` (the controller's AllocateProducerIds
over the wire, or the single broker's local commit of a ProducerIdsRecord)
when the core asks for a block, one reservation at a time, so concurrent
InitProducerId requests share it. `read_legacy_file` reads the single
broker's former block-end file through the file-system port, once, for its
migration into the metadata log.
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

from kref.coordinator.producer_id import LEGACY_STATE_FILE, ProducerIdBlock
from kref.ports.fs import FileSystem, RealFileSystem


class ProducerIdManager:
    """Driver of a ProducerIdBlock; `reserve()` returns (first id, count) of the next block."""

    def __init__(self, reserve: Callable[[], Awaitable[tuple[int, int]]]) -> None:
        self._reserve = reserve
        self.block = ProducerIdBlock()
        # One reservation at a time: concurrent InitProducerId calls share it.
        self._lock = trio.Lock()

    async def generate_producer_id(self) -> int:
        async with self._lock:
            producer_id = self.block.take()
            if producer_id is None:
                self.block.accept(*await self._reserve())
                producer_id = self.block.take()
            assert producer_id is not None  # accept() refuses an empty block
            return producer_id


def read_legacy_file(directory: str | os.PathLike, fs: FileSystem | None = None) -> int | None:
    """The block end kept by kref's earlier JSON file, None when there is none
    (read through the file-system port `fs`; the real disk when omitted)."""
    path = Path(directory) / LEGACY_STATE_FILE
    try:
        state = json.loads((fs or RealFileSystem()).read_bytes(str(path)))
        value = int(state["next_block_start"])
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as e:
        # never guess: a lost high-water mark could hand out ids twice
        raise RuntimeError(f"{path} is unreadable ({e}); refusing to allocate producer ids") from e
    if value < 0:
        raise RuntimeError(f"{path}: negative next_block_start {value}")
    return value


__all__ = ["ProducerIdManager", "read_legacy_file"]
