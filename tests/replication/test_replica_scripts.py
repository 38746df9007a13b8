"""Interaction tests of the pure replica core (kref/replication/replica.py).

Each script in testdata/ drives one PartitionReplica with scripted events
and checks the exact effects and trace events (spec actions LeaderAppend,
AdvanceHighWatermark, LeaderHandleFetch, ShrinkIsr, ExpandIsr, BecomeLeader,
...). They cover the spec's rules: HW = min log_end_offset over the isr and
never decreasing; acks=all answered only once the HW passes the batch;
NOT_ENOUGH_REPLICAS when the isr is below min.insync.replicas; ISR shrink
after replica.lag.time.max.ms and expand once a follower reaches the HW and
the start of the leader's epoch; KIP-320 diverging-epoch answers; fencing of
stale leader epochs.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from kref.replication import replica as r
from tests.replication.datadriven import Block, run_script

TESTDATA = Path(__file__).parent / "testdata"
TRACE_CONTEXT = {"time_ms", "replica", "topic", "partition"}


def _ints(value: str) -> tuple[int, ...]:
    return tuple(int(v) for v in value.split(",") if v)


def _fmt(value) -> str:
    if isinstance(value, (frozenset, set)):
        return "{" + ",".join(str(v) for v in sorted(value)) + "}"
    if isinstance(value, tuple):
        return "(" + ",".join(str(v) for v in value) + ")"
    return str(value)


def render_effect(effect) -> str:
    if isinstance(effect, r.Emit):
        ev = effect.event
        body = " ".join(f"{f.name}={_fmt(getattr(ev, f.name))}" for f in fields(ev) if f.name not in TRACE_CONTEXT)
        return f"trace {type(ev).__name__} {body}"
    body = " ".join(f"{f.name}={_fmt(getattr(effect, f.name))}" for f in fields(effect))
    return f"{type(effect).__name__} {body}"


class Harness:
    def __init__(self) -> None:
        self.replica: r.PartitionReplica | None = None
        self.now_ms = 0
        # Every AlterPartition the core asked to send, in order: `alter-response
        # request=N` answers the N-th (1-based), as a driver pairs answers.
        self.alter_requests: list[r.AlterPartition] = []

    def handle(self, b: Block) -> str:
        a = b.args
        if b.command == "new":
            self.replica = r.PartitionReplica(
                "t", 0, int(a["id"]), min_insync_replicas=int(a.get("min_isr", 1)),
                replica_lag_time_max_ms=int(a.get("lag_ms", 30000)),
            )
            self.now_ms = 0
            return "ok"
        if b.command == "advance":
            self.now_ms += int(a["ms"])
            return f"now_ms={self.now_ms}"
        if b.command == "state":
            return self.render_state()
        if b.command == "complete":
            return f"{self.replica.check_produce_completion(int(a['required']))}"
        event = self.event(b)
        try:
            effects = self.replica.step(event, self.now_ms)
        except r.InvariantViolation as e:
            return f"InvariantViolation: {e}"
        self.alter_requests += [e for e in effects if isinstance(e, r.AlterPartition)]
        return "\n".join(render_effect(e) for e in effects) or "(no effects)"

    def event(self, b: Block):
        a = b.args
        match b.command:
            case "leader":
                return r.BecomeLeader(
                    leader_epoch=int(a["epoch"]), partition_epoch=int(a.get("pe", 0)),
                    isr=frozenset(_ints(a["isr"])), replicas=_ints(a.get("replicas", a["isr"])),
                    log_start_offset=int(a.get("lso", 0)), log_end_offset=int(a.get("leo", 0)),
                    high_watermark=int(a.get("hw", 0)),
                )
            case "follower":
                return r.BecomeFollower(
                    leader=int(a["leader"]), leader_epoch=int(a["epoch"]), partition_epoch=int(a.get("pe", 0)),
                    isr=frozenset(_ints(a["isr"])), replicas=_ints(a.get("replicas", a["isr"])),
                    log_start_offset=int(a.get("lso", 0)), log_end_offset=int(a.get("leo", 0)),
                    high_watermark=int(a.get("hw", 0)), last_fetched_epoch=int(a.get("last_epoch", -1)),
                )
            case "produce":
                return r.ClientProduce(int(a["id"]), int(a["acks"]), int(a.get("count", 1)))
            case "appended":
                last = int(a["last"])
                return r.LogAppended(int(a["id"]), int(a["acks"]), int(a["first"]), last, int(a.get("leo", last + 1)))
            case "fetch":
                end = None
                if "epoch_end" in a:
                    epoch, _, offset = a["epoch_end"].partition(":")
                    end = (int(epoch), int(offset))
                return r.FetchFromFollower(
                    int(a["replica"]), int(a["offset"]), int(a.get("last_epoch", -1)),
                    int(a.get("current_epoch", -1)), end,
                )
            case "follower-appended":
                last = int(a["last"])
                return r.FollowerAppended(int(a["first"]), last, int(a.get("leo", last + 1)), int(a["leader_hw"]))
            case "follower-truncated":
                return r.FollowerTruncated(int(a["leo"]))
            case "log-start":
                return r.LogStartOffsetAdvanced(int(a["offset"]))
            case "tick":
                return r.Tick()
            case "alter-response":
                # The controller's answer to the leader's AlterPartition (KIP-497).
                return r.AlterPartitionResponse(
                    int(a.get("error", 0)), int(a["epoch"]), frozenset(_ints(a["isr"])), int(a["pe"]),
                    self.alter_requests[int(a["request"]) - 1] if "request" in a else None,
                )
        raise ValueError(f"unknown command {b.command}")

    def render_state(self) -> str:
        p = self.replica
        lines = [
            f"role={p.role.value} leader_epoch={p.leader_epoch} partition_epoch={p.partition_epoch} "
            f"isr={_fmt(p.isr)} log_start_offset={p.log_start_offset} log_end_offset={p.log_end_offset} "
            f"high_watermark={p.high_watermark}"
        ]
        if p.pending_isr is not None:
            resend = p.alter_partition_resend_due_ms
            lines.append(f"  pending_isr={_fmt(p.pending_isr)} in_flight={p.alter_partition_sent is not None}"
                         + (f" resend_due_ms={resend} failures={p.alter_partition_failures}" if resend is not None else ""))
        for rid, s in sorted(p.followers.items()):
            lines.append(
                f"  follower {rid}: log_end_offset={s.log_end_offset} "
                f"last_caught_up_time_ms={s.last_caught_up_time_ms} last_fetch_time_ms={s.last_fetch_time_ms}"
            )
        return "\n".join(lines)


@pytest.mark.parametrize("script", sorted(p.name for p in TESTDATA.glob("*.txt")))
def test_script(script: str) -> None:
    run_script(TESTDATA / script, Harness().handle)
