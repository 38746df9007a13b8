"""Interaction scripts that drive several replica cores against each other.

Like etcd raft's interaction tests: each script in testdata/cluster/ names
replicas, elects a leader, produces, and lets followers fetch from the
leader, and the harness carries every effect out between them. The harness
is a minimal driver: each replica's log is a list of record epochs (the
offset is the index), the leader-epoch lookup a follower's fetch needs is
computed from the leader's list, and a follower appends what the leader's
RespondFollowerFetch allows (or truncates on a diverging epoch). Every
decision is the cores'; the output is their effects and trace events, so a
change in a rule shows up as a diff of the script.

Commands: `replicas ids=1,2,3 min_isr=2 lag_ms=100`, `elect leader=1 epoch=1
isr=1,2,3` (BecomeLeader on the leader, BecomeFollower on the others),
`produce acks=-1 count=3`, `fetch follower=2` (one fetch round trip),
`tick`, `advance ms=N`, `crash id=3` (the replica loses its unflushed log
suffix from `keep=` on and its in-memory state), `state`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kref.replication import replica as r
from tests.replication.datadriven import Block, run_script
from tests.replication.test_replica_scripts import _fmt, _ints, render_effect

TESTDATA = Path(__file__).parent / "testdata" / "cluster"


class Cluster:
    def __init__(self) -> None:
        self.cores: dict[int, r.PartitionReplica] = {}
        self.logs: dict[int, list[int]] = {}  # replica -> epoch of each offset
        self.now_ms = 0
        self.min_isr = 1
        self.lag_ms = 30_000
        self.request_ids = 0
        self.waiting: list[tuple[int, int]] = []  # (request id, required offset) of acks=all produces
        self.partition_epoch = 0  # the controller's
        self.controller_isr: tuple[int, ...] = ()

    def handle(self, b: Block) -> str:
        a = b.args
        out: list[str] = []
        match b.command:
            case "replicas":
                self.min_isr, self.lag_ms = int(a.get("min_isr", 1)), int(a.get("lag_ms", 30_000))
                for rid in _ints(a["ids"]):
                    self.cores[rid] = self._new(rid)
                    self.logs[rid] = []
                return "ok"
            case "advance":
                self.now_ms += int(a["ms"])
                return f"now_ms={self.now_ms}"
            case "elect":
                leader, epoch, isr = int(a["leader"]), int(a["epoch"]), _ints(a["isr"])
                self.partition_epoch, self.controller_isr = int(a.get("pe", 0)), isr
                replicas = tuple(sorted(self.cores))
                for rid, core in sorted(self.cores.items()):
                    log = self.logs[rid]
                    if rid == leader:
                        event = r.BecomeLeader(epoch, int(a.get("pe", 0)), frozenset(isr), replicas, 0, len(log),
                                               core.high_watermark)
                    else:
                        event = r.BecomeFollower(leader, epoch, int(a.get("pe", 0)), frozenset(isr), replicas, 0,
                                                 len(log), core.high_watermark)
                    out += self._step(rid, event)
            case "produce":
                leader = self._leader()
                self.request_ids += 1
                rid_req, acks, count = self.request_ids, int(a.get("acks", -1)), int(a.get("count", 1))
                core = self.cores[leader]
                for e in self._step_raw(leader, r.ClientProduce(rid_req, acks, count, self.min_isr), out):
                    if isinstance(e, r.AppendToLog):
                        log = self.logs[leader]
                        first = len(log)
                        log.extend([e.leader_epoch] * count)
                        for e2 in self._step_raw(leader, r.LogAppended(rid_req, acks, first, len(log) - 1, len(log)), out):
                            if isinstance(e2, r.DelayProduce):
                                self.waiting.append((rid_req, e2.required_offset))
                self._complete(core, out)
            case "fetch":
                self._fetch(int(a["follower"]), out)
            case "tick":
                leader = self._leader()
                self._step_raw(leader, r.Tick(), out)
                self._complete(self.cores[leader], out)
            case "crash":
                rid = int(a["id"])
                keep = int(a.get("keep", len(self.logs[rid])))
                del self.logs[rid][keep:]
                self.cores[rid] = self._new(rid)
                out.append(f"replica {rid} restarted with log_end_offset={len(self.logs[rid])}")
            case "state":
                for rid, core in sorted(self.cores.items()):
                    out.append(
                        f"{rid}: role={core.role.value} leader_epoch={core.leader_epoch} isr={_fmt(core.isr)} "
                        f"log_end_offset={core.log_end_offset} high_watermark={core.high_watermark} "
                        f"log={''.join(str(e) for e in self.logs[rid])}"
                    )
            case _:
                raise ValueError(f"unknown command {b.command}")
        return "\n".join(out) or "(no effects)"

    def _new(self, rid: int) -> r.PartitionReplica:
        return r.PartitionReplica("t", 0, rid, min_insync_replicas=self.min_isr, replica_lag_time_max_ms=self.lag_ms)

    def _leader(self) -> int:
        [leader] = [rid for rid, c in self.cores.items() if c.is_leader]
        return leader

    def _step(self, rid: int, event) -> list[str]:
        out: list[str] = []
        self._step_raw(rid, event, out)
        return out

    def _step_raw(self, rid: int, event, out: list[str]) -> list:
        effects = self.cores[rid].step(event, self.now_ms)
        out += [f"{rid}: {render_effect(e)}" for e in effects]
        for e in effects:
            if isinstance(e, r.AlterPartition):
                # The controller commits at once when the request's epochs are current.
                if e.partition_epoch == self.partition_epoch:
                    self.partition_epoch += 1
                    self.controller_isr = tuple(sorted(e.new_isr))
                    answer = r.AlterPartitionResponse(0, e.leader_epoch, frozenset(e.new_isr), self.partition_epoch)
                else:
                    answer = r.AlterPartitionResponse(57, e.leader_epoch, frozenset(), -1)  # INVALID_UPDATE_VERSION
                effects = effects + self._step_raw(rid, answer, out)
        return effects

    def _complete(self, leader_core: r.PartitionReplica, out: list[str]) -> None:
        still = []
        for request_id, required in self.waiting:
            code = leader_core.check_produce_completion(required)
            if code is None:
                still.append((request_id, required))
            else:
                out.append(f"produce {request_id} answered error_code={code}")
        self.waiting = still

    def _fetch(self, follower: int, out: list[str]) -> None:
        leader = self._leader()
        flog, llog = self.logs[follower], self.logs[leader]
        fcore = self.cores[follower]
        offset = len(flog)
        last_epoch = flog[-1] if flog else r.NO_EPOCH
        end = None
        if last_epoch != r.NO_EPOCH:
            # The leader's epoch cache: largest epoch <= last_epoch, and where it ends.
            epochs = [e for e in llog if e <= last_epoch]
            if epochs:
                found = max(epochs)
                end = (found, max(i for i, e in enumerate(llog) if e == found) + 1)
            else:
                end = (r.NO_EPOCH, r.UNKNOWN_OFFSET)
        effects = self._step_raw(leader, r.FetchFromFollower(follower, offset, last_epoch, fcore.leader_epoch, end), out)
        [answer] = [e for e in effects if isinstance(e, r.RespondFollowerFetch)]
        if answer.error_code != 0:
            return
        if answer.diverging_epoch != r.NO_EPOCH:
            del flog[answer.diverging_end_offset:]
            self._step_raw(follower, r.FollowerTruncated(len(flog)), out)
            return
        if offset < len(llog):
            flog.extend(llog[offset:])
            self._step_raw(follower, r.FollowerAppended(offset, len(flog) - 1, len(flog), answer.high_watermark), out)
        self._complete(self.cores[leader], out)


@pytest.mark.parametrize("script", sorted(p.name for p in TESTDATA.glob("*.txt")))
def test_cluster_script(script: str) -> None:
    run_script(TESTDATA / script, Cluster().handle)
