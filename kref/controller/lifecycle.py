"""The broker's side of KRaft membership as a pure core (Kafka's BrokerLifecycleManager).

Theory of operation
-------------------
A broker registers with the active controller (BrokerRegistration, with
the incarnation id of this process), then heartbeats every
broker.heartbeat.interval.ms with the metadata offset it has applied. The
controller answers whether it is caught up and fenced, and, once a
controlled shutdown it asked for is done, should_shut_down. This core makes
every decision of that conversation:

    effects = lifecycle.step(event, now_ms)

- what to send and when: a registration while the broker has no broker
  epoch (retried every `registration_retry_ms` at most), else a heartbeat
  every `heartbeat_interval_ms` (every `registration_retry_ms` at most while
  shutting down, so the shutdown does not wait a whole interval per step);
- one request in flight at a time, as Kafka's manager: two concurrent
  heartbeats once let an answer overtake the commit it depended on (session
  6's controlled-shutdown bug). A request unanswered after its timeout
  failed; an answer to a request that is no longer in flight is ignored
  (`request_id`);
- what an answer means: a broker epoch (Registered), fenced / unfenced
  (FenceChanged), STALE_BROKER_EPOCH or BROKER_ID_NOT_REGISTERED -> register
  again (the process's incarnation id stays, a restart brings a new one),
  NOT_CONTROLLER or a failed request -> try again at the next due time (the
  driver asks the quorum who leads);
- controlled shutdown: `BeginControlledShutdown` sets want_shut_down on
  every heartbeat from then on, sent at once; it ends with ShutdownDone(True)
  when the controller answers should_shut_down, or ShutdownDone(False) when
  it did not within broker.session.timeout.ms, after 3 failed requests in a
  row (no reachable controller: when a whole cluster stops, the last nodes
  have no quorum), or when the controller no longer knows this broker epoch.

No I/O, clock or randomness inside: the driver (kref/controller/
controller_driver.py's BrokerLifecycle over trio and RPCs, and the
simulator kref/sim/replication.py on its virtual clock and network) draws
the incarnation id, sends what the effects say and steps the answers in.
`next_due_ms()` tells a driver when to step `Tick` next.
"""

from __future__ import annotations

from dataclasses import dataclass

from kref.protocol.errors import ErrorCode

MAX_SHUTDOWN_REQUEST_FAILURES = 3
NEVER = 1 << 62


# ---------------------------------------------------------------- events


@dataclass(frozen=True, slots=True)
class Tick:
    """Time passed; `metadata_offset` is the exclusive end of the metadata this broker applied."""

    metadata_offset: int


@dataclass(frozen=True, slots=True)
class RegistrationAnswered:
    request_id: int
    error_code: int
    broker_epoch: int = -1


@dataclass(frozen=True, slots=True)
class HeartbeatAnswered:
    request_id: int
    error_code: int
    is_caught_up: bool = False
    is_fenced: bool = True
    should_shut_down: bool = False


@dataclass(frozen=True, slots=True)
class RequestFailed:
    """No answer: a refused or reset connection, a garbled frame, a timeout."""

    request_id: int


@dataclass(frozen=True, slots=True)
class BeginControlledShutdown:
    pass


Event = Tick | RegistrationAnswered | HeartbeatAnswered | RequestFailed | BeginControlledShutdown


# ---------------------------------------------------------------- effects


@dataclass(frozen=True, slots=True)
class SendRegistration:
    request_id: int
    timeout_ms: int


@dataclass(frozen=True, slots=True)
class SendHeartbeat:
    request_id: int
    timeout_ms: int
    broker_epoch: int
    metadata_offset: int  # exclusive end applied (the wire's current_metadata_offset is this - 1)
    want_shut_down: bool


@dataclass(frozen=True, slots=True)
class Registered:
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class RegistrationRefused:
    error_code: int


@dataclass(frozen=True, slots=True)
class FenceChanged:
    fenced: bool


@dataclass(frozen=True, slots=True)
class ShutdownDone:
    """The controlled shutdown ended: `complete` if the controller said should_shut_down."""

    complete: bool


Effect = SendRegistration | SendHeartbeat | Registered | RegistrationRefused | FenceChanged | ShutdownDone


# ---------------------------------------------------------------- core


@dataclass(slots=True)
class BrokerLifecycleCore:
    heartbeat_interval_ms: int
    session_timeout_ms: int
    # A request unanswered this long failed (the controller RPC's timeout).
    request_timeout_ms: int
    registration_retry_ms: int = 200
    controlled_shutdown_enable: bool = True
    broker_epoch: int = -1
    fenced: bool = True
    want_shut_down: bool = False
    shutdown_done: bool | None = None  # None: not asked or not over; else complete or not
    shutdown_deadline_ms: int = 0
    shutdown_failures: int = 0
    in_flight: int | None = None  # request id
    in_flight_deadline_ms: int = 0
    next_send_ms: int = 0
    next_request_id: int = 0

    def next_due_ms(self) -> int:
        """When a Tick may do something next (a send, a timeout, the shutdown's end)."""
        if self.shutdown_done is not None:
            return NEVER  # stopping: nothing more to send
        due = self.in_flight_deadline_ms if self.in_flight is not None else self.next_send_ms
        if self.want_shut_down and self.shutdown_done is None:
            due = min(due, self.shutdown_deadline_ms)
        return due

    def step(self, event: Event, now_ms: int) -> list[Effect]:
        out: list[Effect] = []
        match event:
            case Tick():
                self._on_tick(event.metadata_offset, now_ms, out)
            case RegistrationAnswered() if event.request_id == self.in_flight:
                self._answered()
                if event.error_code == ErrorCode.NONE:
                    self.broker_epoch = event.broker_epoch
                    self.next_send_ms = now_ms  # heartbeat at once: the way to being unfenced
                    out.append(Registered(event.broker_epoch))
                else:
                    out.append(RegistrationRefused(event.error_code))
            case HeartbeatAnswered() if event.request_id == self.in_flight:
                self._answered()
                self._on_heartbeat_answer(event, now_ms, out)
            case RequestFailed() if event.request_id == self.in_flight:
                self.in_flight = None
                if self.want_shut_down:
                    self._failed(out)
            case RegistrationAnswered() | HeartbeatAnswered() | RequestFailed():
                pass  # the answer of a request given up already
            case BeginControlledShutdown():
                if self.want_shut_down:
                    return out
                if self.broker_epoch < 0 or not self.controlled_shutdown_enable:
                    self.want_shut_down = True
                    self._end_shutdown(False, out)
                    return out
                self.want_shut_down = True
                self.shutdown_deadline_ms = now_ms + self.session_timeout_ms
                self.next_send_ms = now_ms  # as soon as nothing is in flight
            case _:
                raise TypeError(f"not a broker lifecycle event: {event!r}")
        return out

    # ------------------------------------------------------------ helpers

    def _interval(self) -> int:
        if self.broker_epoch < 0 or self.want_shut_down:
            return min(self.heartbeat_interval_ms, self.registration_retry_ms)
        return self.heartbeat_interval_ms

    def _answered(self) -> None:
        self.in_flight = None
        self.shutdown_failures = 0  # only requests without an answer count

    def _on_tick(self, metadata_offset: int, now_ms: int, out: list[Effect]) -> None:
        if self.shutdown_done is not None:
            return  # the broker is stopping: nothing more to say
        if self.want_shut_down and now_ms >= self.shutdown_deadline_ms:
            self._end_shutdown(False, out)  # the controller would fence it by now anyway
            return
        if self.in_flight is not None:
            if now_ms < self.in_flight_deadline_ms:
                return
            self.in_flight = None  # timed out: a failed request
            if self.want_shut_down:
                self._failed(out)
                if self.shutdown_done is not None:
                    return
        if now_ms < self.next_send_ms:
            return
        self.next_request_id += 1
        request_id = self.next_request_id
        timeout = self.request_timeout_ms
        if self.want_shut_down:
            # A controller that cannot answer within a few heartbeats will not
            # (the quorum may be stopping too): give up early rather than hang.
            timeout = min(timeout, max(1000, 5 * self.heartbeat_interval_ms))
        self.in_flight, self.in_flight_deadline_ms = request_id, now_ms + timeout
        self.next_send_ms = now_ms + self._interval()
        if self.broker_epoch < 0:
            out.append(SendRegistration(request_id, timeout))
        else:
            out.append(SendHeartbeat(request_id, timeout, self.broker_epoch, metadata_offset, self.want_shut_down))

    def _on_heartbeat_answer(self, e: HeartbeatAnswered, now_ms: int, out: list[Effect]) -> None:
        if e.error_code in (ErrorCode.STALE_BROKER_EPOCH, ErrorCode.BROKER_ID_NOT_REGISTERED):
            self.broker_epoch = -1
            self.next_send_ms = min(self.next_send_ms, now_ms + self.registration_retry_ms)
            if self.want_shut_down:
                self._end_shutdown(False, out)  # the controller no longer knows this incarnation
            return
        if e.error_code != ErrorCode.NONE:
            return  # NOT_CONTROLLER, REQUEST_TIMED_OUT, ...: again at the next due time
        if e.is_fenced != self.fenced:
            self.fenced = e.is_fenced
            out.append(FenceChanged(self.fenced))
        if self.want_shut_down and e.should_shut_down:
            self._end_shutdown(True, out)

    def _failed(self, out: list[Effect]) -> None:
        self.shutdown_failures += 1
        if self.shutdown_failures >= MAX_SHUTDOWN_REQUEST_FAILURES:
            self._end_shutdown(False, out)  # no controller to move the leaderships: its session timeout will

    def _end_shutdown(self, complete: bool, out: list[Effect]) -> None:
        if self.shutdown_done is None:
            self.shutdown_done = complete
            out.append(ShutdownDone(complete))
