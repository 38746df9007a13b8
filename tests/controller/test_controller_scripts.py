"""Interaction tests of the pure controller core (kref/controller/controller.py).

Scripts in testdata/controller/ drive one ControllerCore with broker
registrations, heartbeats, time, topic requests and AlterPartition, and
check the metadata records it writes (Kafka's record types), its replies
and its trace events (spec/KRaft.tla's RegisterBroker, BrokerHeartbeat,
FenceBroker, UnfenceBroker, ElectLeader, ElectPreferredLeader,
UncleanElectLeader). They cover: broker epochs from the record
offset, fencing after broker.session.timeout.ms with leaders moved in one
batch (leader_epoch + 1), unfencing once caught up, rack-aware assignment
spreading leaders, INVALID_REPLICATION_FACTOR, and AlterPartition's
partition epoch check (stale requests refused), unclean election, ElectLeaders
(preferred and unclean), controlled shutdown, auto leader rebalance, and
KIP-455 reassignments (growth, completion through AlterPartition, cancel),
and dynamic broker configs as BROKER ConfigRecords (KIP-226).
"""

from __future__ import annotations

import uuid
from dataclasses import fields
from pathlib import Path

import pytest

from kref.controller import controller as c
from tests.replication.datadriven import Block, run_script

TESTDATA = Path(__file__).parent / "testdata" / "controller"
CONTEXT = {"time_ms", "topic", "partition", "replica"}


def _ints(value: str) -> tuple[int, ...]:
    return tuple(int(v) for v in value.split(",") if v)


def _uuid(n: int) -> uuid.UUID:
    return uuid.UUID(int=n)


def _fmt(value) -> str:
    if isinstance(value, uuid.UUID):
        return f"#{value.int}"
    if isinstance(value, tuple):
        return "[" + ",".join(_fmt(v) for v in value) + "]"
    if hasattr(value, "name") and hasattr(value, "value") and type(value).__module__.endswith("errors"):
        return value.name
    return str(value)


def render_object(obj) -> str:
    body = " ".join(f"{f.name}={_fmt(getattr(obj, f.name))}" for f in fields(obj) if f.name not in CONTEXT)
    return f"{type(obj).__name__} {body}"


class Harness:
    def __init__(self) -> None:
        self.core: c.ControllerCore | None = None
        self.now_ms = 0
        self.next_request = 0

    def _run(self, event) -> str:
        effects = self.core.step(event, self.now_ms)
        lines = []
        for e in effects:
            match e:
                case c.WriteRecords():
                    lines.append(f"write @{e.base_offset}:")
                    lines += [f"  {render_object(rec)}" for rec in e.records]
                    if e.reply is not None:
                        lines.append(f"  then reply {render_object(e.reply)}")
                case c.Reply():
                    lines.append(f"reply {render_object(e.reply)}")
                case c.Emit():
                    lines.append(f"trace {render_object(e.event)}")
        return "\n".join(lines) or "ok"

    def handle(self, b: Block) -> str:
        a = b.args
        self.next_request += 1
        rid = self.next_request
        if b.command == "controller":
            self.core = c.ControllerCore(
                1, broker_session_timeout_ms=int(a.get("session_ms", 9000)),
                auto_leader_rebalance_enable=a.get("rebalance") == "true",
                leader_imbalance_check_interval_ms=int(a.get("imbalance_check_ms", 300_000)),
                leader_imbalance_per_broker_percentage=int(a.get("imbalance_pct", 10)),
                unclean_leader_election_enable=a.get("unclean") == "true",
                unclean_leader_election_interval_ms=int(a.get("unclean_interval_ms", 300_000)),
            )
            return "ok"
        if b.command == "static":
            # A restart of this controller with another static broker config (the
            # log it replays is the same: the core's image is kept).
            self.core.unclean_leader_election_enable = a.get("unclean") == "true"
            return "ok"
        if b.command == "active":
            return self._run(c.BecomeActive(int(a["epoch"]), int(a["offset"])))
        if b.command == "resign":
            return self._run(c.Resign())
        if b.command == "register":
            return self._run(c.BrokerRegistration(rid, int(a["id"]), _uuid(int(a.get("incarnation", a["id"]))), (), a.get("rack")))
        if b.command == "heartbeat":
            return self._run(c.BrokerHeartbeatRequest(
                rid, int(a["id"]), int(a["epoch"]), int(a["offset"]), want_shut_down=a.get("shutdown") == "true"))
        if b.command == "elect":
            kind = {"preferred": c.PREFERRED_ELECTION, "unclean": c.UNCLEAN_ELECTION}.get(a["type"], 9)
            wanted = None if a["partitions"] == "all" else tuple(
                (tp.rsplit(":", 1)[0], int(tp.rsplit(":", 1)[1])) for tp in a["partitions"].split(","))
            return self._run(c.ElectLeaders(rid, kind, wanted))
        if b.command == "tick":
            self.now_ms += int(a.get("ms", 0))
            return self._run(c.Tick())
        if b.command == "create":
            configs = tuple(tuple(kv.split(":", 1)) for kv in a.get("configs", "").split(",") if kv)
            return self._run(c.CreateTopic(rid, a["name"], int(a["partitions"]), int(a["rf"]), _uuid(int(a["id"])), configs))
        if b.command == "partitions":
            return self._run(c.CreatePartitions(rid, a["name"], int(a["count"])))
        if b.command == "delete":
            return self._run(c.DeleteTopic(rid, a["name"]))
        if b.command == "configs":
            configs = tuple(tuple(kv.split(":", 1)) for kv in a.get("set", "").split(",") if kv)
            return self._run(c.AlterTopicConfigs(rid, a["name"], configs))
        if b.command == "broker_configs":
            configs = tuple(tuple(kv.split(":", 1)) for kv in a.get("set", "").split(",") if kv)
            return self._run(c.AlterBrokerConfigs(rid, a.get("name", ""), configs))
        if b.command == "alter":
            return self._run(c.AlterPartition(
                rid, int(a["broker"]), int(a["epoch"]), _uuid(int(a["topic"])), int(a["partition"]),
                int(a["leader_epoch"]), int(a["partition_epoch"]), _ints(a["isr"]),
                _ints(a["isr_epochs"]) if "isr_epochs" in a else (),  # KIP-903 (v3); none: v2
            ))
        if b.command == "reassign":
            # reassign partitions=t:0=4,5;t:1=cancel
            wanted = []
            for item in a["partitions"].split(";"):
                tp, target = item.split("=", 1)
                wanted.append((tp.rsplit(":", 1)[0], int(tp.rsplit(":", 1)[1]), None if target == "cancel" else _ints(target)))
            return self._run(c.AlterPartitionReassignments(rid, tuple(wanted), a.get("rf_change") != "false"))
        if b.command == "list_reassignments":
            wanted = None if a["partitions"] == "all" else tuple(
                (tp.rsplit(":", 1)[0], int(tp.rsplit(":", 1)[1])) for tp in a["partitions"].split(","))
            return self._run(c.ListPartitionReassignments(rid, wanted))
        if b.command == "status":
            lines = [f"offset={self.core.next_offset} active={self.core.active}"]
            for bid, br in sorted(self.core.brokers.items()):
                lines.append(f"broker {bid} epoch={br.broker_epoch} rack={br.rack} fenced={br.fenced}")
            for name, t in sorted(self.core.topics.items()):
                for pid, p in sorted(t.partitions.items()):
                    lines.append(
                        f"{name}-{pid} replicas={_fmt(p.replicas)} isr={_fmt(p.isr)} leader={p.leader} "
                        f"leader_epoch={p.leader_epoch} partition_epoch={p.partition_epoch}"
                        + (f" adding={_fmt(p.adding_replicas)} removing={_fmt(p.removing_replicas)}"
                           if p.adding_replicas or p.removing_replicas else "")
                    )
            return "\n".join(lines)
        raise ValueError(f"unknown command {b.command}")


@pytest.mark.parametrize("script", sorted(p.name for p in TESTDATA.glob("*.txt")))
def test_controller_script(script):
    run_script(TESTDATA / script, Harness().handle)
