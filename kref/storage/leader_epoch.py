"""The leader-epoch cache: which leader epoch began at which offset (KIP-101).

Every v2 batch carries the epoch of the leader that appended it. The cache
keeps one entry (epoch, start_offset) per epoch, the first offset written in
that epoch, strictly increasing in both fields, and mirrors them in the
partition's `leader-epoch-checkpoint` file. A follower that becomes one after
a leader change asks the new leader "where does my last epoch end?"
(OffsetForLeaderEpoch) and truncates to the answer instead of to its high
watermark, which is what makes the spec's TruncateToEpochEndOffset safe
where the old truncate-to-HW rule lost committed records.

`end_offset_for` follows Kafka's LeaderEpochFileCache.endOffsetFor exactly
(KIP-279 included): for the latest epoch the log end offset; for an older
one the start offset of the next higher epoch, paired with the largest
epoch <= the requested one; (-1, -1) when the epoch is undefined or above
everything known.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable

from kref.ports.fs import FileSystem
from kref.storage.checkpoint import (
    CheckpointError,
    read_leader_epoch_checkpoint,
    write_leader_epoch_checkpoint,
)

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
LEADER_EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"


class LeaderEpochFileCache:
    def __init__(self, path: str | None, entries: list[tuple[int, int]] | None = None, fs: FileSystem | None = None) -> None:
        self.path = path
        self.fs = fs  # the file-system port (None: the real disk)
        # Set by the LogManager for logs it creates: asked before each synced write whether
        # the fsync is deferred to its flusher (True: write now, fsync in a worker thread soon).
        self.defer_sync: Callable[[str], bool] | None = None
        self._epochs: list[int] = []
        self._starts: list[int] = []
        for epoch, start in entries or []:
            if epoch < 0 or start < 0:
                raise ValueError(f"invalid leader epoch entry ({epoch}, {start})")
            self._assign(epoch, start)

    @classmethod
    def load(cls, partition_dir: str, fs: FileSystem | None = None) -> "LeaderEpochFileCache":
        path = os.path.join(partition_dir, LEADER_EPOCH_CHECKPOINT_FILE)
        try:
            entries = read_leader_epoch_checkpoint(path, fs)
        except CheckpointError:
            # The cache is rebuilt from the batches during recovery; a bad
            # file only costs precision for epochs older than the log.
            entries = []
        return cls(path, [(e, o) for e, o in entries if e >= 0 and o >= 0], fs)

    # -- queries -----------------------------------------------------------

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._starts))

    @property
    def latest_epoch(self) -> int:
        """The latest epoch, or -1 when empty (Kafka's OptionalInt.empty)."""
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    @property
    def earliest_entry(self) -> tuple[int, int] | None:
        return (self._epochs[0], self._starts[0]) if self._epochs else None

    @property
    def latest_entry(self) -> tuple[int, int] | None:
        return (self._epochs[-1], self._starts[-1]) if self._epochs else None

    def is_empty(self) -> bool:
        return not self._epochs

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch whose range holds `offset`, or -1 if before every entry."""
        i = bisect.bisect_right(self._starts, offset) - 1
        return self._epochs[i] if i >= 0 else UNDEFINED_EPOCH

    def previous_epoch(self) -> int:
        return self._epochs[-2] if len(self._epochs) >= 2 else UNDEFINED_EPOCH

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end_offset) as Kafka's LeaderEpochFileCache.endOffsetFor."""
        if requested_epoch == UNDEFINED_EPOCH:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if self._epochs and self._epochs[-1] == requested_epoch:
            # The current leader's epoch is still being written: it ends at the log end.
            return requested_epoch, log_end_offset
        higher = bisect.bisect_right(self._epochs, requested_epoch)
        if higher == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            # Older than anything we kept: the data is gone, so point at the
            # first epoch we know; the follower replicates from there.
            return requested_epoch, self._starts[0]
        return self._epochs[higher - 1], self._starts[higher]

    # -- updates -----------------------------------------------------------

    def assign(self, epoch: int, start_offset: int, *, flush: bool = True) -> bool:
        """Record that `epoch` starts at `start_offset`; True if the cache changed."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"cannot assign epoch {epoch} at offset {start_offset}")
        if not self._assign(epoch, start_offset):
            return False
        if flush:
            self.flush()
        return True

    def _assign(self, epoch: int, start_offset: int) -> bool:
        if self._epochs and not (epoch != self._epochs[-1] or start_offset < self._starts[-1]):
            return False
        # Entries that would break monotonicity of either field are stale
        # (written by a deposed leader and since truncated): drop them.
        while self._epochs and (self._epochs[-1] >= epoch or self._starts[-1] >= start_offset):
            self._epochs.pop()
            self._starts.pop()
        self._epochs.append(epoch)
        self._starts.append(start_offset)
        return True

    def truncate_from_end(self, end_offset: int, *, flush: bool = True) -> None:
        """Drop entries starting at or after `end_offset` (log truncated to it)."""
        if end_offset < 0 or not self._starts or self._starts[-1] < end_offset:
            return
        while self._starts and self._starts[-1] >= end_offset:
            self._epochs.pop()
            self._starts.pop()
        if flush:
            self.flush()

    def truncate_from_start(self, start_offset: int, *, flush: bool = True) -> None:
        """Log start moved to `start_offset`: the epoch holding it now starts there."""
        i = bisect.bisect_right(self._starts, start_offset)
        if i == 0:
            return
        epoch = self._epochs[i - 1]
        del self._epochs[:i]
        del self._starts[:i]
        self._epochs.insert(0, epoch)
        self._starts.insert(0, start_offset)
        if flush:
            self.flush()

    def clear(self, *, flush: bool = True) -> None:
        self._epochs.clear()
        self._starts.clear()
        if flush:
            self.flush()

    def flush(self, *, sync: bool = True) -> None:
        if self.path is not None:
            if sync and self.defer_sync is not None and self.defer_sync(self.path):
                sync = False
            write_leader_epoch_checkpoint(self.path, self.entries(), sync=sync, fs=self.fs)

    def __repr__(self) -> str:
        return f"LeaderEpochFileCache({self.entries()})"
