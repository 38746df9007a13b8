"""Moving replicas between a broker's log dirs: the decisions (KIP-113), as a pure core.

Theory of operation
-------------------
AlterReplicaLogDirs asks a broker to hold a replica in another of its
log.dirs. Kafka does it live: a future log in the destination dir, filled
by a ReplicaAlterLogDirsThread that fetches from the local current log as a
follower fetches from a leader, and swapped in once it has caught up. This
core makes every decision of that; the driver (alter_log_dirs.py) only
gathers facts about the two logs, steps the core, and carries out the one
effect it gets, with the storage functions of kref/storage/future_log.py.

Events and what they decide:

- `AlterReplicaLogDir` (one partition of a request) -> `Answer` with
  Kafka's per-partition code, and maybe `StartFuture` / `AbandonFuture` /
  `RememberPreferredDir`:
  a destination not among log.dirs is LOG_DIR_NOT_FOUND, one that cannot be
  written KAFKA_STORAGE_ERROR; a replica not hosted here
  REPLICA_NOT_AVAILABLE (the dir is remembered for its creation); a move
  under way to another dir is abandoned first (Kafka's
  futureReplicaDirChanged: a retarget restarts the copy); then the replica
  is already there (NONE), or already moving there (NONE), or a future log
  is started there (NONE).
- `FutureFound` (a future dir found at start) resumes that move.
- `CopyTick` (the facts of both logs now) -> one step of the copy, the
  follower's rules applied to a local "leader":
  the current log gone (partition deleted or moved off the broker):
  `AbandonFuture`; the future holds an epoch whose end in the current log
  is below the future's end (the current log was truncated, KIP-101/279):
  `TruncateFuture` there, or `RestartFutureAt` the current log start when
  the current log does not know the epoch at all; the future ends below the
  current log start (retention, DeleteRecords): `RestartFutureAt`; then
  `CopyRecords` from the future's end, bounded by `copy_max_bytes` and by
  what the future log takes in one append (its segment.bytes); the
  future starting below the current log start: `IncrementFutureLogStart`;
  equal ends where the current log has a later epoch (one begun at the
  log end with no record yet): `AssignFutureEpoch`; and when the two agree
  on start, end and latest epoch, `SwapFutureLog`, unless the log cleaner is
  cleaning the current log (then `Wait`: its worker holds the old files).
- `MoveFailed` (an I/O error in the destination) -> `AbandonFuture`.

The core owns the table of moves; the driver owns the Log objects. It reads
no clock and draws nothing at random: the future dir's unique id comes in
the event.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kref.protocol.errors import ErrorCode

Key = tuple[str, int]
UNDEFINED_EPOCH = -1
DEFAULT_COPY_MAX_BYTES = 1 << 20  # per step: the driver yields to the event loop between steps


# ---------------------------------------------------------------- events


@dataclass(frozen=True, slots=True)
class AlterReplicaLogDir:
    key: Key
    destination: str  # absolute path
    log_dirs: tuple[str, ...]
    destination_usable: bool
    current_dir: str | None  # the log dir holding the replica here, None when not hosted
    unique_id: str  # for a future dir name, should one be started


@dataclass(frozen=True, slots=True)
class FutureFound:
    key: Key
    destination: str


@dataclass(frozen=True, slots=True)
class LogFacts:
    log_start_offset: int
    log_end_offset: int
    latest_epoch_entry: tuple[int, int] | None  # (epoch, start offset) of its leader-epoch cache


@dataclass(frozen=True, slots=True)
class CopyTick:
    key: Key
    current: LogFacts | None  # None: the partition has no current log here any more
    future: LogFacts
    # The current log's (epoch, end offset) for the future's latest epoch
    # (LeaderEpochFileCache.end_offset_for); (-1, -1) when it does not know it.
    current_end_for_future_epoch: tuple[int, int]
    cleaning: bool  # the log cleaner is cleaning the current log
    # The most the future log takes in one append (its segment.bytes): a copy
    # step of several batches must not exceed it.
    max_append_bytes: int = 1 << 31


@dataclass(frozen=True, slots=True)
class MoveFailed:
    key: Key
    reason: str


# ---------------------------------------------------------------- effects


@dataclass(frozen=True, slots=True)
class Answer:
    error_code: int


@dataclass(frozen=True, slots=True)
class RememberPreferredDir:
    key: Key
    destination: str


@dataclass(frozen=True, slots=True)
class StartFuture:
    key: Key
    destination: str
    unique_id: str


@dataclass(frozen=True, slots=True)
class AbandonFuture:
    key: Key
    reason: str


@dataclass(frozen=True, slots=True)
class TruncateFuture:
    key: Key
    offset: int


@dataclass(frozen=True, slots=True)
class RestartFutureAt:
    key: Key
    offset: int


@dataclass(frozen=True, slots=True)
class CopyRecords:
    key: Key
    from_offset: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class IncrementFutureLogStart:
    key: Key
    offset: int


@dataclass(frozen=True, slots=True)
class AssignFutureEpoch:
    key: Key
    epoch: int
    start_offset: int


@dataclass(frozen=True, slots=True)
class SwapFutureLog:
    key: Key
    destination: str


@dataclass(frozen=True, slots=True)
class Wait:
    key: Key


Effect = (Answer | RememberPreferredDir | StartFuture | AbandonFuture | TruncateFuture | RestartFutureAt
          | CopyRecords | IncrementFutureLogStart | AssignFutureEpoch | SwapFutureLog | Wait)


@dataclass(frozen=True, slots=True)
class Move:
    destination: str


@dataclass
class AlterLogDirsCore:
    copy_max_bytes: int = DEFAULT_COPY_MAX_BYTES
    moves: dict[Key, Move] = field(default_factory=dict)

    def step(self, event: object, now_ms: int) -> list[Effect]:
        if isinstance(event, AlterReplicaLogDir):
            return self._alter(event)
        if isinstance(event, CopyTick):
            return self._tick(event)
        if isinstance(event, FutureFound):
            # A second future dir of one partition: the first one is kept (the driver removes the other).
            self.moves.setdefault(event.key, Move(event.destination))
            return []
        if isinstance(event, MoveFailed):
            if self.moves.pop(event.key, None) is None:
                return []
            return [AbandonFuture(event.key, event.reason)]
        raise TypeError(f"unknown event {event!r}")

    def destination_of(self, key: Key) -> str | None:
        move = self.moves.get(key)
        return move.destination if move is not None else None

    def _alter(self, e: AlterReplicaLogDir) -> list[Effect]:
        if e.destination not in e.log_dirs:
            return [Answer(ErrorCode.LOG_DIR_NOT_FOUND)]
        if not e.destination_usable:
            return [Answer(ErrorCode.KAFKA_STORAGE_ERROR)]
        if e.current_dir is None:
            return [RememberPreferredDir(e.key, e.destination), Answer(ErrorCode.REPLICA_NOT_AVAILABLE)]
        effects: list[Effect] = []
        move = self.moves.get(e.key)
        if move is not None and move.destination != e.destination:
            del self.moves[e.key]
            effects.append(AbandonFuture(e.key, f"retargeted from {move.destination} to {e.destination}"))
            move = None
        if e.current_dir != e.destination and move is None:
            self.moves[e.key] = Move(e.destination)
            effects.append(StartFuture(e.key, e.destination, e.unique_id))
        effects.append(Answer(ErrorCode.NONE))
        return effects

    def _tick(self, e: CopyTick) -> list[Effect]:
        key = e.key
        move = self.moves.get(key)
        if move is None:
            return [AbandonFuture(key, "no move under way")]
        current, future = e.current, e.future
        if current is None:
            del self.moves[key]
            return [AbandonFuture(key, "the partition's current log is gone")]
        if future.latest_epoch_entry is not None:
            epoch, end = e.current_end_for_future_epoch
            if epoch == UNDEFINED_EPOCH:
                return [RestartFutureAt(key, current.log_start_offset)]
            if end < future.log_end_offset:
                if end < current.log_start_offset:
                    return [RestartFutureAt(key, current.log_start_offset)]
                return [TruncateFuture(key, end)]
        if future.log_end_offset < current.log_start_offset:
            return [RestartFutureAt(key, current.log_start_offset)]
        if future.log_end_offset > current.log_end_offset:
            return [TruncateFuture(key, current.log_end_offset)]
        if future.log_end_offset < current.log_end_offset:
            return [CopyRecords(key, future.log_end_offset, max(1, min(self.copy_max_bytes, e.max_append_bytes)))]
        if future.log_start_offset < current.log_start_offset:
            return [IncrementFutureLogStart(key, current.log_start_offset)]
        future_epoch = future.latest_epoch_entry[0] if future.latest_epoch_entry is not None else UNDEFINED_EPOCH
        if current.latest_epoch_entry is not None and current.latest_epoch_entry[0] > future_epoch:
            return [AssignFutureEpoch(key, *current.latest_epoch_entry)]
        if e.cleaning:
            return [Wait(key)]
        del self.moves[key]
        return [SwapFutureLog(key, move.destination)]
