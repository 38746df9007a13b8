"""Interaction tests of the broker lifecycle core (kref/controller/lifecycle.py).

Scripts in testdata/lifecycle/ drive one BrokerLifecycleCore with time
(`tick`, with the metadata offset the broker applied), the controller's
answers and failed requests, and controlled shutdown; each block prints the
core's effects (what to send, registered, fenced / unfenced, the shutdown's
end) and when it wants its next Tick. They cover registration and its
retries, heartbeats every interval with one request in flight, unfencing,
re-registration on STALE_BROKER_EPOCH and BROKER_ID_NOT_REGISTERED, stale
and duplicate answers ignored, and controlled shutdown ending complete,
after 3 failed requests, at broker.session.timeout.ms, or when the
controller no longer knows the broker epoch.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from kref.controller import lifecycle as lc
from kref.protocol.errors import ErrorCode
from tests.replication.datadriven import Block, run_script

TESTDATA = Path(__file__).parent / "testdata" / "lifecycle"


def _render(obj) -> str:
    def fmt(name, value):
        return ErrorCode(value).name if name == "error_code" else str(value)
    body = " ".join(f"{f.name}={fmt(f.name, getattr(obj, f.name))}" for f in fields(obj))
    return f"{type(obj).__name__} {body}".rstrip()


class Harness:
    def __init__(self) -> None:
        self.core: lc.BrokerLifecycleCore | None = None
        self.now_ms = 0

    def _run(self, event) -> str:
        lines = [_render(e) for e in self.core.step(event, self.now_ms)]
        due = self.core.next_due_ms()
        lines.append("next tick: never" if due == lc.NEVER else f"next tick at {due}")
        return "\n".join(lines)

    def handle(self, b: Block) -> str:
        a = b.args
        if b.command == "core":
            self.core = lc.BrokerLifecycleCore(
                heartbeat_interval_ms=int(a["interval"]), session_timeout_ms=int(a["session"]),
                request_timeout_ms=int(a["timeout"]), controlled_shutdown_enable=a.get("controlled", "true") == "true")
            return "ok"
        if "at" in a:
            self.now_ms = int(a["at"])
        if b.command == "tick":
            return self._run(lc.Tick(int(a.get("offset", 0))))
        if b.command == "registered":
            return self._run(lc.RegistrationAnswered(int(a["id"]), ErrorCode[a.get("error", "NONE")],
                                                     int(a.get("epoch", -1))))
        if b.command == "heartbeat":
            return self._run(lc.HeartbeatAnswered(
                int(a["id"]), ErrorCode[a.get("error", "NONE")], a.get("caught_up", "true") == "true",
                a.get("fenced", "false") == "true", a.get("shut_down", "false") == "true"))
        if b.command == "failed":
            return self._run(lc.RequestFailed(int(a["id"])))
        if b.command == "shutdown":
            return self._run(lc.BeginControlledShutdown())
        raise ValueError(f"unknown command {b.command}")


@pytest.mark.parametrize("script", sorted(p.name for p in TESTDATA.glob("*.txt")))
def test_lifecycle_script(script):
    run_script(TESTDATA / script, Harness().handle)


def test_effects_only_from_events():
    """The core is deterministic: the same events at the same times, the same effects."""
    def run():
        core = lc.BrokerLifecycleCore(heartbeat_interval_ms=100, session_timeout_ms=900, request_timeout_ms=100)
        out = []
        for now in range(0, 2000, 37):
            for e in core.step(lc.Tick(now // 10), now):
                out.append(e)
                if isinstance(e, lc.SendRegistration):
                    out += core.step(lc.RegistrationAnswered(e.request_id, ErrorCode.NONE, 5), now + 3)
                elif now % 3:
                    out += core.step(lc.HeartbeatAnswered(e.request_id, ErrorCode.NONE, True, now < 500), now + 3)
        return out
    first = run()
    assert first == run() and any(isinstance(e, lc.FenceChanged) for e in first)
