"""The follower side of the replica core: what to fetch, and what a response means.

Theory of operation
-------------------
spec/Replication.tla gives a follower four actions: FollowerFetch (send a
Fetch with fetch_offset = log_end_offset, last_fetched_epoch = the epoch of
its last record, current_leader_epoch), FetchError (drop it and back off),
FollowerAppend (append what came back; high_watermark = min(leader's high
watermark, own log_end_offset)) and TruncateToEpochEndOffset (a diverging
epoch: cut the log where it stops agreeing with the leader's, KIP-320;
KIP-101/279 reach the same answer through OffsetsForLeaderEpoch).

This module holds those decisions for `PartitionReplica` (kref/replication/
replica.py), which mixes `FollowerSide` in, so one state object serves both
roles and a leader that is deposed keeps its offsets. It is sans-IO like the
rest of the core: a replica fetcher (kref/broker/replica_fetcher.py), the
simulator or a test steps it with the events below and carries out the
effects. The per-partition fetch state is Kafka's (AbstractFetcherThread):

    FETCHING    the next FollowerFetchDue sends a Fetch;
    TRUNCATING  the next FollowerFetchDue sends OffsetsForLeaderEpoch
                (a Fetch version without diverging epochs, KIP-101/279);
    FENCED      the leader answered FENCED_LEADER_EPOCH: our metadata is
                behind; wait for the next BecomeFollower.

Responses name the request they answer (fetch_offset, leader epoch); one
that no longer matches the state (a leader change or a truncation since) is
dropped, as Kafka drops "partition state changed" responses.

The local epoch cache is the driver's (the Log's leader-epoch file): where a
decision needs a lookup, the driver makes it before stepping and passes it in
(`local_epoch_end_offset` = (largest epoch <= e it knows, that epoch's end
offset), or None), the same convention FetchFromFollower uses on the leader.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from kref.protocol.errors import ErrorCode
from kref import mutations as _m
from kref.trace import events as trace

NO_EPOCH = -1
UNKNOWN_OFFSET = -1


class FetchState(enum.Enum):
    FETCHING = "fetching"
    TRUNCATING = "truncating"
    FENCED = "fenced"


# ---------------------------------------------------------------- events


@dataclass(frozen=True, slots=True)
class FollowerFetchDue:
    """The fetcher is about to build a request to this partition's leader.
    `broker_epoch` is this broker's current one (KIP-903: the Fetch carries it)."""

    broker_epoch: int = NO_EPOCH


@dataclass(frozen=True, slots=True)
class FetchResponseReceived:
    """The leader's answer for this partition to the Fetch sent at
    (`request_leader_epoch`, `fetch_offset`). `records` tells whether the
    answer carried record batches (the driver holds the bytes)."""

    request_leader_epoch: int
    fetch_offset: int
    error_code: int
    high_watermark: int
    log_start_offset: int
    records: bool = False
    diverging_epoch: int = NO_EPOCH
    diverging_end_offset: int = UNKNOWN_OFFSET
    # The driver's lookup of `diverging_epoch` in the local epoch cache.
    local_epoch_end_offset: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class EpochEndOffsetReceived:
    """The leader's OffsetsForLeaderEpoch answer for `requested_epoch`: the
    largest epoch <= it the leader knows and that epoch's end offset."""

    request_leader_epoch: int
    requested_epoch: int
    error_code: int
    leader_epoch: int
    end_offset: int
    # The driver's lookup of the answered `leader_epoch` in the local cache.
    local_epoch_end_offset: tuple[int, int] | None = None


# ---------------------------------------------------------------- effects


@dataclass(frozen=True, slots=True)
class SendFetch:
    """Put this partition into the next Fetch to `leader` (the spec's FollowerFetch)."""

    leader: int
    fetch_offset: int
    last_fetched_epoch: int
    current_leader_epoch: int
    log_start_offset: int
    # KIP-903: Fetch v15+ ReplicaState.ReplicaEpoch.
    broker_epoch: int = NO_EPOCH


@dataclass(frozen=True, slots=True)
class SendOffsetsForLeaderEpoch:
    """Ask `leader` where `leader_epoch` ends on its log (KIP-101/279)."""

    leader: int
    leader_epoch: int
    current_leader_epoch: int


@dataclass(frozen=True, slots=True)
class AppendAsFollower:
    """Append the response's batches as they are (offsets, epochs, producer
    state kept), then step FollowerAppended with the outcome. The leader's
    high watermark and log start offset ride along for that step."""

    fetch_offset: int
    leader_high_watermark: int
    leader_log_start_offset: int


@dataclass(frozen=True, slots=True)
class TruncateLog:
    """Cut the local log to `offset` (keep offsets < it) and its epoch cache,
    then step FollowerTruncated."""

    offset: int


@dataclass(frozen=True, slots=True)
class TruncateFullyAndStartAt:
    """The leader deleted past our log end: drop the whole local log and
    restart it empty at `offset`, then step FollowerTruncated."""

    offset: int


@dataclass(frozen=True, slots=True)
class IncrementLogStartOffset:
    """Follow the leader's log start offset (DeleteRecords / retention replicate)."""

    offset: int


@dataclass(frozen=True, slots=True)
class FetchBackoff:
    """Fetch this partition again only after replica.fetch.backoff.ms (FetchError)."""

    error_code: int


# ---------------------------------------------------------------- decisions


def truncation_offset(
    leader_epoch: int,
    leader_end_offset: int,
    local_epoch_end_offset: tuple[int, int] | None,
    log_end_offset: int,
    high_watermark: int,
) -> tuple[int, bool]:
    """Where a follower cuts its log given the leader's (epoch, end offset):
    (offset, complete). Not complete means the follower did not know the
    leader's epoch and cut to the end of its own largest epoch below it; the
    next request (with the new last epoch) narrows further (KIP-279).

    The spec's TruncationOffset plus Kafka's edge cases: the leader knows no
    epoch this old (UNKNOWN_OFFSET): keep what is committed (the high
    watermark); the follower's cache has no entry that old: trust the
    leader's end offset.
    """
    if leader_end_offset == UNKNOWN_OFFSET:
        return min(high_watermark, log_end_offset), True
    if leader_epoch == NO_EPOCH or local_epoch_end_offset is None:
        return min(leader_end_offset, log_end_offset), True
    local_epoch, local_end_offset = local_epoch_end_offset
    if local_epoch != leader_epoch and not (_m.ACTIVE and _m.on("truncate_ignores_local_epoch")):
        return min(local_end_offset, log_end_offset), False
    return min(leader_end_offset, local_end_offset, log_end_offset), True


# Errors after which the partition waits for newer metadata rather than
# retrying on its own: the leader has a newer epoch than ours.
_FENCED = (ErrorCode.FENCED_LEADER_EPOCH,)


class FollowerSide:
    """The follower transitions of PartitionReplica (fields live there)."""

    __slots__ = ()

    def follower_fetch_state(self) -> FetchState:
        return self.fetch_state

    def _start_following(self, last_fetched_epoch: int, truncate_on_fetch: bool, now_ms: int, out: list) -> None:
        """After BecomeFollower: pick how to reconcile the log with the new leader."""
        self.last_fetched_epoch = last_fetched_epoch
        self.truncate_on_fetch = truncate_on_fetch
        if _m.ACTIVE and _m.on("truncate_to_hw") and self.log_end_offset > self.high_watermark:
            out.append(TruncateLog(self.high_watermark))  # pre-KIP-101
        if last_fetched_epoch == NO_EPOCH:
            # No epochs to compare (an empty log): what is committed is safe.
            self.fetch_state = FetchState.FETCHING
            if self.log_end_offset > self.high_watermark:
                out.append(TruncateLog(self.high_watermark))
        elif truncate_on_fetch:
            self.fetch_state = FetchState.FETCHING
        else:
            self.fetch_state = FetchState.TRUNCATING

    def _on_follower_fetch_due(self, e: FollowerFetchDue, now_ms: int, out: list) -> None:
        if self.role.value != "follower" or self.leader < 0:
            return
        if self.fetch_state is FetchState.FETCHING:
            out.append(
                SendFetch(
                    self.leader, self.log_end_offset, self.last_fetched_epoch, self.leader_epoch, self.log_start_offset,
                    e.broker_epoch,
                )
            )
            self._emit(
                out,
                trace.FollowerFetch,
                now_ms,
                leader=self.leader,
                leader_epoch=self.leader_epoch,
                fetch_offset=self.log_end_offset,
                last_fetched_epoch=self.last_fetched_epoch,
                broker_epoch=e.broker_epoch,
            )
        elif self.fetch_state is FetchState.TRUNCATING:
            out.append(SendOffsetsForLeaderEpoch(self.leader, self.last_fetched_epoch, self.leader_epoch))

    def _current(self, request_leader_epoch: int) -> bool:
        return self.role.value == "follower" and request_leader_epoch == self.leader_epoch

    def _on_fetch_response(self, e: FetchResponseReceived, now_ms: int, out: list) -> None:
        if not self._current(e.request_leader_epoch) or e.fetch_offset != self.log_end_offset:
            return
        if self.fetch_state is not FetchState.FETCHING:
            return
        if e.error_code == ErrorCode.NONE:
            if e.diverging_epoch != NO_EPOCH:
                offset, _complete = truncation_offset(
                    e.diverging_epoch,
                    e.diverging_end_offset,
                    e.local_epoch_end_offset,
                    self.log_end_offset,
                    self.high_watermark,
                )
                # Incomplete or not, the next fetch carries the new last
                # epoch and the leader checks it again.
                out.append(TruncateLog(offset))
                return
            out.append(AppendAsFollower(e.fetch_offset, e.high_watermark, e.log_start_offset))
            return
        if e.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            if e.log_start_offset >= 0 and e.fetch_offset < e.log_start_offset:
                # Retention or DeleteRecords on the leader passed our end.
                out.append(TruncateFullyAndStartAt(e.log_start_offset))
            else:
                # Past the leader's end: only an unclean leader has less than
                # we do. Keep what is committed and fetch the rest again.
                out.append(TruncateLog(min(self.high_watermark, max(e.high_watermark, 0))))
            return
        if e.error_code in _FENCED:
            self.fetch_state = FetchState.FENCED
        self._emit(out, trace.FetchError, now_ms, leader=self.leader, leader_epoch=self.leader_epoch,
                   error_code=e.error_code)
        out.append(FetchBackoff(e.error_code))

    def _on_epoch_end_offset(self, e: EpochEndOffsetReceived, now_ms: int, out: list) -> None:
        if not self._current(e.request_leader_epoch) or self.fetch_state is not FetchState.TRUNCATING:
            return
        if e.requested_epoch != self.last_fetched_epoch:
            return
        if e.error_code != ErrorCode.NONE:
            if e.error_code in _FENCED:
                self.fetch_state = FetchState.FENCED
            out.append(FetchBackoff(e.error_code))
            return
        offset, complete = truncation_offset(
            e.leader_epoch, e.end_offset, e.local_epoch_end_offset, self.log_end_offset, self.high_watermark
        )
        if complete:
            self.fetch_state = FetchState.FETCHING
        out.append(TruncateLog(offset))

    def _follow_log_start_offset(self, leader_log_start_offset: int, out: list) -> None:
        # The leader's start never passes its high watermark; ours must not
        # pass our own (what is not committed here may yet be fetched).
        target = min(leader_log_start_offset, self.high_watermark)
        if target > self.log_start_offset:
            self.log_start_offset = target
            out.append(IncrementLogStartOffset(target))
