"""The partition driver: runs the pure replica core against a kref.storage Log.

Theory of operation
-------------------
kref/replication/replica.py decides (who leads, what the high watermark is,
when an acks=all produce is done); this module does (appends bytes to the
segment files, reads them back, stamps the leader-epoch cache, writes trace
lines, wakes the purgatories). One `Partition` per hosted TopicPartition,
kept by the replica manager (kref/broker/replica_manager.py), which
calls become_leader / become_follower with the metadata image's epochs.

The data path of a produce (ARCHITECTURE.md): the handler validates the
payload, calls `append_records_as_leader`, which steps the core with
ClientProduce; the core answers AppendToLog (or an error such as
NOT_ENOUGH_REPLICAS), the driver appends to the Log as leader in the core's
leader_epoch, steps the core with LogAppended, and carries out what comes
back: trace events to the sink, HighWatermarkAdvanced / LogEndOffsetAdvanced
to the purgatories (waking long-poll fetches and acks=all produces watching
this partition), and ProduceResult or DelayProduce to the handler.

Consumers read only below the high watermark (`read`), which is why a
fetch wakes on HighWatermarkAdvanced rather than on the append itself.

Everything here is synchronous: Log calls are plain blocking file I/O, short
enough (one segment append, one positioned read) to run on the trio thread,
and it means a produce's append and its HW advance happen without another
task interleaving.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import trio

from kref.broker.resources import resource_warning
from kref.protocol.errors import ErrorCode
from kref.records.errors import CorruptRecordError, InvalidMagicError, InvalidRecordError
from kref.records.header import BatchHeader
from kref.replication import follower as fcore
from kref.replication import replica as core
from kref.replication.purgatory import Purgatory
from kref.trace.sink import NullTraceSink, TraceSink

if TYPE_CHECKING:  # pragma: no cover
    from kref.storage.log import Log

log = logging.getLogger(__name__)

def _answering(response: core.AlterPartitionResponse, request: core.AlterPartition) -> core.AlterPartitionResponse:
    """Pair a synchronous answer with the request it answers."""
    return response if response.request is not None else dataclasses.replace(response, request=request)

_FOLLOWER_EFFECTS = (
    fcore.AppendAsFollower,
    fcore.TruncateLog,
    fcore.TruncateFullyAndStartAt,
    fcore.IncrementLogStartOffset,
    fcore.FetchBackoff,
)

# What _apply does with an effect, by its exact class: one dict look-up per
# effect instead of a chain of up to six isinstance calls (17 per
# single-record produce, the largest item of this driver's share of it).
# Filled on first sight of each class, so at most one entry per effect class.
_EMIT, _HW_ADVANCED, _LEO_ADVANCED, _ASSIGN_EPOCH, _FOLLOWER, _ALTER, _ANSWER = range(7)
_EFFECT_KINDS: dict[type, int] = {}


def _effect_kind(kind: type) -> int:
    for base, code in ((core.Emit, _EMIT), (core.HighWatermarkAdvanced, _HW_ADVANCED),
                       (core.LogEndOffsetAdvanced, _LEO_ADVANCED), (core.AssignLeaderEpoch, _ASSIGN_EPOCH),
                       (_FOLLOWER_EFFECTS, _FOLLOWER), (core.AlterPartition, _ALTER)):
        if issubclass(kind, base):
            break
    else:
        code = _ANSWER
    _EFFECT_KINDS[kind] = code
    return code


def error_code_for(exc: BaseException) -> int:
    """The Kafka error code a storage or record error answers a client with."""
    code = getattr(exc, "error_code", None)
    if isinstance(code, int):
        if code == ErrorCode.KAFKA_STORAGE_ERROR:
            # The client only sees the code; the operator needs the cause (out of
            # descriptors, disk full, an I/O error), once, not once per request.
            resource_warning(log, "storage error answered as KAFKA_STORAGE_ERROR: %s", exc)
        return code
    if isinstance(exc, (InvalidMagicError, InvalidRecordError)):
        return ErrorCode.INVALID_RECORD
    if isinstance(exc, CorruptRecordError):
        return ErrorCode.CORRUPT_MESSAGE
    return ErrorCode.UNKNOWN_SERVER_ERROR


@dataclass(slots=True)
class AppendResult:
    error_code: int
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    # acks=all not yet satisfied: wait in the produce purgatory until the core
    # says the high watermark reached this offset.
    required_offset: int | None = None
    error_message: str | None = None


@dataclass(slots=True)
class ReadResult:
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: bytes | memoryview = b""  # a consumer read: a read-only view of the segment read
    # A follower whose log diverges (KIP-320): truncate to this epoch's end.
    diverging: tuple[int, int] | None = None
    # KIP-392: the replica the consumer should fetch this partition from.
    preferred_read_replica: int = -1


class Partition:
    """Driver of one partition replica: core + Log + trace + purgatory wake-ups."""

    def __init__(
        self,
        log_: Log,
        *,
        replica_id: int,
        produce_purgatory: Purgatory,
        fetch_purgatory: Purgatory,
        trace: TraceSink | None = None,
        replica_lag_time_max_ms: int = 30_000,
        alter_partition: Callable[[Partition, core.AlterPartition], core.AlterPartitionResponse | None] | None = None,
    ) -> None:
        self.log = log_
        # The controller this leader sends AlterPartition to (the Broker's local
        # metadata source on a single node); None: no controller (tests).
        self.alter_partition = alter_partition
        self.topic = log_.topic
        self.partition = log_.partition
        self.key = (self.topic, self.partition)
        self.trace: TraceSink = trace if trace is not None else NullTraceSink()
        self.produce_purgatory = produce_purgatory
        self.fetch_purgatory = fetch_purgatory
        self.core = core.PartitionReplica(
            self.topic,
            self.partition,
            replica_id,
            min_insync_replicas=self._min_insync_replicas(),
            replica_lag_time_max_ms=replica_lag_time_max_ms,
            tracing=self.trace.enabled,
        )
        self._request_ids = 0
        # Follower side: records of the fetch response being applied, and the
        # time before which this partition is not fetched (replica.fetch.backoff.ms).
        self._follower_records: bytes = b""
        self.fetch_backoff_until_ms = 0
        # Bytes that became readable by consumers (below the high watermark)
        # so far: a parked fetch compares it with the value it saw to tell
        # whether min_bytes have arrived. Appends wait in `_above_hw` (last
        # offset, size) until the high watermark passes them.
        self.visible_bytes = 0
        self._above_hw: collections.deque[tuple[int, int]] = collections.deque()

    # ------------------------------------------------------------ state

    @property
    def leader_epoch(self) -> int:
        return self.core.leader_epoch

    @property
    def high_watermark(self) -> int:
        return self.core.high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def high_watermark_to_restore(self) -> int:
        """The high watermark a BecomeLeader/BecomeFollower starts from: the core's
        once it has a role, before that the one recovered from replication-offset-checkpoint."""
        if self.core.role is not core.Role.NONE:
            return self.core.high_watermark
        return self.log.recovered_high_watermark or 0

    @property
    def high_watermark_to_checkpoint(self) -> int | None:
        """What replication-offset-checkpoint holds for this partition: the core's
        high watermark once it has a role (the one live copy), else what was recovered."""
        if self.core.role is not core.Role.NONE:
            return self.core.high_watermark
        return self.log.recovered_high_watermark

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def is_leader(self) -> bool:
        return self.core.is_leader

    def _min_insync_replicas(self) -> int:
        return int(getattr(self.log.config, "min_insync_replicas", 1) or 1)

    # ------------------------------------------------------------ effects

    def _apply(self, effects: list[core.Effect], now_ms: int, *, backoff_ms: int = 1000) -> list[core.Effect]:
        """Carry out the side effects; return those the caller answers with."""
        answers: list[core.Effect] = []
        alter_requests: list[core.AlterPartition] = []
        woke = False
        for effect in effects:
            kind = _EFFECT_KINDS.get(type(effect))
            if kind is None:
                kind = _effect_kind(type(effect))
            if kind == _EMIT:
                if self.trace.enabled:
                    self.trace.emit(effect.event)
            elif kind == _HW_ADVANCED:
                # Bytes count as arrived for parked fetches once the core says
                # their last offset is visible.
                while self._above_hw and self.core.is_visible(self._above_hw[0][0]):
                    self.visible_bytes += self._above_hw.popleft()[1]
                woke = True
            elif kind == _LEO_ADVANCED:
                woke = True
            elif kind == _ASSIGN_EPOCH:
                self.log.leader_epoch_cache.assign(effect.leader_epoch, effect.start_offset)
            elif kind == _FOLLOWER:
                self._carry_out_follower(effect, now_ms, backoff_ms)
            elif kind == _ALTER:
                # To the controller (the single broker's local metadata source);
                # its answer is stepped once these effects are carried out.
                if self.alter_partition is None:
                    log.warning("%s-%d: no controller for AlterPartition %s", self.topic, self.partition,
                                sorted(effect.new_isr))
                else:
                    alter_requests.append(effect)
            else:
                answers.append(effect)
        if woke:
            # After the step, so woken operations see the core's new state.
            self.produce_purgatory.check_and_complete(self.key)
            self.fetch_purgatory.check_and_complete(self.key)
        for request in alter_requests:
            # A local controller answers at once; an error without a decision makes
            # the core schedule the resend (its backoff), never send again within
            # this step, so this recursion ends.
            response = self.alter_partition(self, request)
            if response is not None:  # None: sent to a remote controller, answered later
                answers += self._apply(self.core.step(_answering(response, request), now_ms), now_ms)
        return answers

    def on_alter_partition_response(self, response: core.AlterPartitionResponse, now_ms: int) -> None:
        """A remote controller's answer to this leader's AlterPartition (it names the
        request it answers; the core ignores an answer to another one)."""
        self._apply(self.core.step(response, now_ms), now_ms)

    # ------------------------------------------------------------ leadership

    def become_leader(
        self,
        now_ms: int,
        *,
        leader_epoch: int | None = None,
        partition_epoch: int = 0,
        isr: tuple[int, ...] | None = None,
        replicas: tuple[int, ...] | None = None,
        high_watermark: int | None = None,
    ) -> None:
        """BecomeLeader with the metadata image's epochs (the replica manager calls this).

        `high_watermark` defaults to `high_watermark_to_restore`. Without an
        epoch (a Partition used on its own, in tests) the partition leads
        alone in the epoch after the latest of its log's epoch cache.
        """
        if leader_epoch is None:
            latest = self.log.leader_epoch_cache.latest_epoch
            leader_epoch = (latest if latest is not None and latest >= 0 else -1) + 1
        me = self.core.replica_id
        if high_watermark is None:
            high_watermark = self.high_watermark_to_restore
        self._apply(
            self.core.step(
                core.BecomeLeader(
                    leader_epoch=leader_epoch,
                    partition_epoch=partition_epoch,
                    isr=frozenset(isr if isr is not None else (me,)),
                    replicas=tuple(replicas if replicas is not None else (me,)),
                    log_start_offset=self.log.log_start_offset,
                    log_end_offset=self.log.log_end_offset,
                    high_watermark=high_watermark,
                ),
                now_ms,
            ), now_ms)

    def become_follower(
        self,
        now_ms: int,
        *,
        leader_id: int,
        leader_epoch: int,
        partition_epoch: int,
        isr: tuple[int, ...],
        replicas: tuple[int, ...],
    ) -> None:
        """BecomeFollower with the metadata image's leader and epochs."""
        self._apply(
            self.core.step(
                core.BecomeFollower(
                    leader=leader_id,
                    leader_epoch=leader_epoch,
                    partition_epoch=partition_epoch,
                    isr=frozenset(isr),
                    replicas=tuple(replicas),
                    log_start_offset=self.log.log_start_offset,
                    log_end_offset=self.log.log_end_offset,
                    high_watermark=self.high_watermark_to_restore,
                    last_fetched_epoch=self._last_log_epoch(),
                ),
                now_ms,
            ), now_ms)
        # A follower has nothing for consumers or acks=all waiters: wake them to answer.
        self.produce_purgatory.check_and_complete(self.key)
        self.fetch_purgatory.check_and_complete(self.key)

    def stop_replica(self, now_ms: int, *, leader_epoch: int, partition_epoch: int) -> None:
        """StopReplica: the registration (these epochs) no longer names this broker a replica
        (KIP-455); the replica manager deletes the log next."""
        self._apply(self.core.step(core.StopReplica(leader_epoch, partition_epoch), now_ms), now_ms)

    def _last_log_epoch(self) -> int:
        latest = self.log.leader_epoch_cache.latest_epoch
        return latest if latest is not None and latest >= 0 else core.NO_EPOCH

    # ------------------------------------------------------------ follower (the replica fetcher's driver)

    def follower_fetch_due(
        self, now_ms: int, broker_epoch: int = core.NO_BROKER_EPOCH
    ) -> fcore.SendFetch | fcore.SendOffsetsForLeaderEpoch | None:
        """FollowerFetch: what to ask the leader for this partition (None: nothing now);
        `broker_epoch` is this broker's (KIP-903: the Fetch carries it)."""
        if now_ms < self.fetch_backoff_until_ms:
            return None
        for effect in self._apply(self.core.step(fcore.FollowerFetchDue(broker_epoch), now_ms), now_ms):
            if isinstance(effect, (fcore.SendFetch, fcore.SendOffsetsForLeaderEpoch)):
                return effect
        return None

    def on_fetch_response(
        self,
        request: fcore.SendFetch,
        *,
        error_code: int,
        high_watermark: int,
        log_start_offset: int,
        diverging_epoch: int,
        diverging_end_offset: int,
        records: bytes | None,
        now_ms: int,
        backoff_ms: int,
    ) -> None:
        """The leader's answer for this partition: the core decides, the Log carries it out."""
        local = None
        if diverging_epoch >= 0:
            local = self.log.leader_epoch_cache.end_offset_for(diverging_epoch, self.log.log_end_offset)
            if local[0] < 0:
                local = None
        event = fcore.FetchResponseReceived(
            request.current_leader_epoch, request.fetch_offset, error_code, high_watermark, log_start_offset,
            bool(records), diverging_epoch, diverging_end_offset, local,
        )
        self._follower_records = records or b""
        try:
            self._apply(self.core.step(event, now_ms), now_ms, backoff_ms=backoff_ms)
        finally:
            self._follower_records = b""

    def _carry_out_follower(self, effect: core.Effect, now_ms: int, backoff_ms: int) -> None:
        """AppendAsFollower / TruncateLog / TruncateFullyAndStartAt / IncrementLogStartOffset /
        FetchBackoff on the Log; the outcome goes back into the core."""
        if isinstance(effect, fcore.AppendAsFollower):
            before = self.log.log_end_offset
            try:
                info = self.log.append_as_follower(self._follower_records, now_ms)
            except Exception as exc:  # noqa: BLE001 - a bad batch from the leader: retry later, loudly
                log.warning("%s-%d: follower append at %d failed: %s", self.topic, self.partition, before, exc)
                self.fetch_backoff_until_ms = now_ms + backoff_ms
                return
            after = self.log.log_end_offset
            first, last = (info.first_offset, info.last_offset) if info.first_offset >= 0 else (before, before - 1)
            hw_before = self.core.high_watermark
            self._apply(self.core.step(core.FollowerAppended(
                first, last, after, effect.leader_high_watermark, self._last_log_epoch(),
                effect.leader_log_start_offset), now_ms), now_ms, backoff_ms=backoff_ms)
            if self.core.high_watermark != hw_before:
                # Consumers reading from this follower (KIP-392) wait on its HW.
                self.fetch_purgatory.check_and_complete(self.key)
        elif isinstance(effect, fcore.TruncateLog):
            self.log.truncate_to(effect.offset)
            self._apply(self.core.step(core.FollowerTruncated(
                self.log.log_end_offset, self._last_log_epoch()), now_ms), now_ms, backoff_ms=backoff_ms)
        elif isinstance(effect, fcore.TruncateFullyAndStartAt):
            self.log.truncate_fully_and_start_at(effect.offset)
            self._apply(self.core.step(core.FollowerTruncated(
                self.log.log_end_offset, core.NO_EPOCH, log_start_offset=effect.offset), now_ms), now_ms,
                backoff_ms=backoff_ms)
        elif isinstance(effect, fcore.IncrementLogStartOffset):
            try:
                self.log.maybe_increment_log_start_offset(effect.offset)
            except Exception as exc:  # noqa: BLE001
                log.warning("%s-%d: cannot follow the leader's log start %d: %s", self.topic, self.partition,
                            effect.offset, exc)
        elif isinstance(effect, fcore.FetchBackoff):
            self.fetch_backoff_until_ms = now_ms + backoff_ms

    def tick(self, now_ms: int) -> None:
        self._apply(self.core.step(core.Tick(), now_ms), now_ms)

    def check_produce_completion(self, required_offset: int) -> int | None:
        return self.core.check_produce_completion(required_offset)

    # ------------------------------------------------------------ produce

    def append_records_as_leader(
        self,
        records: bytes | bytearray,
        acks: int,
        records_count: int,
        now_ms: int,
        *,
        validated: list[BatchHeader] | None = None,
    ) -> AppendResult:
        """Append one produce payload; see the module docstring for the steps.

        `validated`: the produce handler's headers of exactly these bytes
        (parsed once, CRC and max.message.bytes checked), handed on so the Log
        does not parse or check them again.
        """
        self._request_ids += 1
        request_id = self._request_ids
        answers = self._apply(self.core.step(
            core.ClientProduce(request_id, acks, records_count, self._min_insync_replicas()), now_ms), now_ms)
        result = AppendResult(ErrorCode.NONE)
        for answer in answers:
            if isinstance(answer, core.ProduceResult):
                return AppendResult(answer.error_code, log_start_offset=self.log.log_start_offset)
            if isinstance(answer, core.AppendToLog):
                try:
                    info = self.log.append_as_leader(records, answer.leader_epoch, now_ms, validated=validated)
                except Exception as exc:  # typed storage / record errors become error codes
                    code = error_code_for(exc)
                    if code == ErrorCode.UNKNOWN_SERVER_ERROR:
                        log.exception("append to %s-%d failed", self.topic, self.partition)
                    return AppendResult(code, log_start_offset=self.log.log_start_offset, error_message=str(exc))
                if not info.duplicate:
                    if len(self._above_hw) >= MAX_BATCHES_ABOVE_HW:
                        self.visible_bytes += self._above_hw.popleft()[1]  # bounded: may wake a fetch early
                    self._above_hw.append((info.last_offset, len(records)))
                result.base_offset = info.first_offset
                result.log_append_time = info.log_append_time
                result.log_start_offset = self.log.log_start_offset
                after = self._apply(
                    self.core.step(
                        core.LogAppended(request_id, acks, info.first_offset, info.last_offset,
                                         self.log.log_end_offset),
                        now_ms,
                    ), now_ms)
                for outcome in after:
                    if isinstance(outcome, core.ProduceResult):
                        result.error_code = outcome.error_code
                    elif isinstance(outcome, core.DelayProduce):
                        result.required_offset = outcome.required_offset
        return result

    # ------------------------------------------------------------ fetch

    def read(
        self, fetch_offset: int, max_bytes: int, *, min_one_message: bool, current_leader_epoch: int = -1,
        allow_follower: bool = False,
    ) -> ReadResult:
        """Consumer read: the core says what is visible, the Log supplies the bytes.

        The bytes are the segment's bytes, unchanged: a batch that starts
        before `fetch_offset` comes whole and the client skips the records
        it did not ask for.
        """
        error, upper = self.core.consumer_read(fetch_offset, current_leader_epoch, allow_follower=allow_follower)
        hw, lso = self.core.high_watermark, self.core.log_start_offset
        if error == ErrorCode.OFFSET_OUT_OF_RANGE:
            return ReadResult(error, hw, hw, lso)
        if error != ErrorCode.NONE:
            return ReadResult(error, -1, -1, -1)
        if upper <= fetch_offset or max_bytes <= 0:
            return ReadResult(ErrorCode.NONE, hw, hw, lso)
        try:
            data = self.log.read(fetch_offset, max_bytes, max_offset=upper, min_one_message=min_one_message,
                                 copy=False)
        except Exception as exc:
            code = error_code_for(exc)
            if code == ErrorCode.UNKNOWN_SERVER_ERROR:
                log.exception("read of %s-%d at %d failed", self.topic, self.partition, fetch_offset)
            return ReadResult(code, hw, hw, lso)
        records = data.records
        # A read-only view of the segment read goes to the response uncopied (Log.read's copy=False).
        return ReadResult(ErrorCode.NONE, hw, hw, lso,
                          records if isinstance(records, (bytes, memoryview)) else bytes(records))

    def read_as_follower(self, replica_id: int, fetch_offset: int, last_fetched_epoch: int,
                         current_leader_epoch: int, max_bytes: int, now_ms: int, *,
                         broker_epoch: int = core.NO_BROKER_EPOCH,
                         registered_broker_epoch: int = core.NO_BROKER_EPOCH,
                         isr_eligible: bool = True) -> ReadResult:
        """A follower's fetch (Fetch with replica_id >= 0) goes to the core (FetchFromFollower).

        The driver only looks up the epoch end offset the core asks about and
        reads the bytes; the core decides (not leader, fenced, unknown
        follower, diverging epoch, or read up to the log end offset). KIP-903:
        `broker_epoch` is what the fetch carried; the follower's registration
        as the metadata has it comes from the caller (the fetch handler).
        """
        end = None
        if last_fetched_epoch >= 0:
            end = self.log.leader_epoch_cache.end_offset_for(last_fetched_epoch, self.log.log_end_offset)
        answers = self._apply(self.core.step(core.FetchFromFollower(
            replica_id, fetch_offset, last_fetched_epoch, current_leader_epoch, end,
            broker_epoch, registered_broker_epoch, isr_eligible), now_ms), now_ms)
        for answer in answers:
            if isinstance(answer, core.RespondFollowerFetch):
                if answer.diverging_epoch != core.NO_EPOCH:
                    return ReadResult(answer.error_code, answer.high_watermark, answer.high_watermark,
                                      answer.log_start_offset,
                                      diverging=(answer.diverging_epoch, answer.diverging_end_offset))
                if answer.error_code != ErrorCode.NONE:
                    return ReadResult(answer.error_code, answer.high_watermark, answer.high_watermark,
                                      answer.log_start_offset)
                try:
                    data = self.log.read(fetch_offset, max_bytes, min_one_message=True)
                except Exception as exc:
                    return ReadResult(error_code_for(exc), answer.high_watermark, answer.high_watermark,
                                      answer.log_start_offset)
                return ReadResult(ErrorCode.NONE, answer.high_watermark, answer.high_watermark,
                                  answer.log_start_offset, bytes(data.records))
        return ReadResult(ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, -1, -1)

    # ------------------------------------------------------------ offsets for leader epoch

    def end_offset_for_epoch(self, leader_epoch: int, current_leader_epoch: int) -> tuple[int, int, int]:
        """OffsetsForLeaderEpoch (KIP-101/279/320): (error_code, epoch, end_offset) from the
        leader's epoch cache: the largest epoch <= `leader_epoch` and where it ends (the
        current epoch ends at the log end offset). Only the leader answers; a named
        current_leader_epoch must be its own (the core's check)."""
        error = self.core.check_leader_epoch(current_leader_epoch)
        if error != ErrorCode.NONE:
            return error, core.NO_EPOCH, core.UNKNOWN_OFFSET
        epoch, end_offset = self.log.leader_epoch_cache.end_offset_for(leader_epoch, self.log.log_end_offset)
        return ErrorCode.NONE, epoch, end_offset

    # ------------------------------------------------------------ list offsets

    def fetch_offset_for_timestamp(
        self, timestamp: int, *, current_leader_epoch: int = -1, isolation_level: int = 0
    ) -> tuple[int, int, int, int]:
        """(error_code, timestamp, offset, leader_epoch) for ListOffsets; the core decides."""
        error, offset = self.core.list_offsets(timestamp, current_leader_epoch)
        if error != ErrorCode.NONE:
            return error, -1, -1, -1
        if offset is not None:
            return ErrorCode.NONE, -1, offset, self._epoch_at(offset) if offset >= 0 else -1
        found = self.log.fetch_offset_by_timestamp(timestamp)
        if found is None or not self.core.is_visible(found[1]):
            return ErrorCode.NONE, -1, -1, -1
        ts, offset, epoch = found
        return ErrorCode.NONE, ts, offset, epoch

    def _epoch_at(self, offset: int) -> int:
        """The leader epoch of the record before `offset` (Kafka's epoch for LATEST)."""
        return self.log.leader_epoch_cache.epoch_for_offset(offset)

    # ------------------------------------------------------------ delete records

    def delete_records_before(self, offset: int, now_ms: int) -> tuple[int, int]:
        """DeleteRecords: (error_code, low_watermark); the core decides, the Log carries it out."""
        error, new_start = self.core.delete_records(offset)
        if error != ErrorCode.NONE:
            return error, new_start
        try:
            self.log.maybe_increment_log_start_offset(new_start)
        except Exception as exc:
            return error_code_for(exc), self.log.log_start_offset
        self.report_log_start_offset(now_ms)
        return ErrorCode.NONE, self.core.log_start_offset

    def apply_retention(self, now_ms: int) -> int:
        """Retention for this partition: the Log's planner proposes a new log start
        offset (bounded by the core's high watermark), the core admits it, the
        Log deletes the segments below it, and the core hears of the new start.
        Returns how many segments were deleted."""
        proposed = self.log.plan_retention(now_ms, self.core.high_watermark)
        admitted = core.admit_retention_log_start(self.core, proposed) if proposed is not None else None
        deleted = self.log.apply_retention(now_ms, admitted) if admitted is not None else 0
        self.log.delete_pending_segments(now_ms)
        self.report_log_start_offset(now_ms)
        return deleted

    def report_log_start_offset(self, now_ms: int) -> None:
        """DeleteRecords or retention moved the Log's start: the core hears of it."""
        if self.log.log_start_offset != self.core.log_start_offset:
            self._apply(self.core.step(core.LogStartOffsetAdvanced(self.log.log_start_offset), now_ms), now_ms)

    # ------------------------------------------------------------ lifecycle

    def shutdown(self) -> None:
        """Write out the trace (the broker also closes the sink on shutdown)."""
        self.trace.flush()


# Bound on appended batches remembered until the high watermark passes them.
MAX_BATCHES_ABOVE_HW = 100_000

# Bounds of the two purgatories (operations parked at once, broker-wide).
MAX_DELAYED_PRODUCES = 10_000
MAX_DELAYED_FETCHES = 10_000


TRACE_FLUSH_INTERVAL_S = 1.0


async def flush_trace_periodically(sink: TraceSink) -> None:
    """Keep a running broker's trace file readable; a SIGKILL loses at most a second."""
    while True:
        await trio.sleep(TRACE_FLUSH_INTERVAL_S)
        sink.flush()
