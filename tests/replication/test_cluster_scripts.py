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

from kref.replication import follower as f
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
                                                 len(log), core.high_watermark,
                                                 last_fetched_epoch=log[-1] if log else r.NO_EPOCH,
                                                 truncate_on_fetch=a.get("oflfe") != "1")
                    for e in self._step_raw(rid, event, out):
                        self._follower_effect(rid, e, out)
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

    @staticmethod
    def _epoch_end_offset(log: list[int], epoch: int) -> tuple[int, int]:
        """An epoch-cache lookup on a list log: largest epoch <= `epoch` and where it ends."""
        epochs = [e for e in log if e <= epoch]
        if not epochs:
            return r.NO_EPOCH, r.UNKNOWN_OFFSET
        found = max(epochs)
        return found, max(i for i, e in enumerate(log) if e == found) + 1

    def _follower_effect(self, rid: int, e, out: list[str]) -> None:
        """Carry out what the follower core decided on replica `rid`'s list log."""
        log = self.logs[rid]
        last = lambda: log[-1] if log else r.NO_EPOCH  # noqa: E731
        if isinstance(e, f.TruncateLog):
            del log[e.offset:]
            self._step_raw(rid, r.FollowerTruncated(len(log), last()), out)
        elif isinstance(e, f.AppendAsFollower):
            llog = self.logs[self._leader()]
            first = len(log)
            log.extend(llog[e.fetch_offset:])
            self._step_raw(
                rid,
                r.FollowerAppended(first, len(log) - 1, len(log), e.leader_high_watermark, last(),
                                   e.leader_log_start_offset),
                out,
            )

    def _fetch(self, follower: int, out: list[str]) -> None:
        """One round trip of the follower core: FollowerFetchDue, the request it
        chose (Fetch or OffsetsForLeaderEpoch), the leader's answer, the outcome."""
        leader = self._leader()
        flog, llog = self.logs[follower], self.logs[leader]
        lcore = self.cores[leader]
        for req in self._step_raw(follower, f.FollowerFetchDue(), out):
            if isinstance(req, f.SendOffsetsForLeaderEpoch):
                epoch, end = self._epoch_end_offset(llog + [lcore.leader_epoch], req.leader_epoch)
                end = min(end, len(llog))
                local = self._epoch_end_offset(flog, epoch) if epoch != r.NO_EPOCH else None
                out.append(f"{leader}: OffsetsForLeaderEpoch answer leader_epoch={epoch} end_offset={end}")
                for e in self._step_raw(
                    follower, f.EpochEndOffsetReceived(req.current_leader_epoch, req.leader_epoch, 0, epoch, end, local), out
                ):
                    self._follower_effect(follower, e, out)
                return
            if not isinstance(req, f.SendFetch):
                continue
            end = None
            if req.last_fetched_epoch != r.NO_EPOCH:
                end = self._epoch_end_offset(llog + [lcore.leader_epoch], req.last_fetched_epoch)
                end = (end[0], min(end[1], len(llog)))
            effects = self._step_raw(
                leader, r.FetchFromFollower(follower, req.fetch_offset, req.last_fetched_epoch, req.current_leader_epoch, end), out
            )
            [answer] = [e for e in effects if isinstance(e, r.RespondFollowerFetch)]
            local = None
            if answer.diverging_epoch != r.NO_EPOCH:
                local = self._epoch_end_offset(flog, answer.diverging_epoch)
            response = f.FetchResponseReceived(
                req.current_leader_epoch, req.fetch_offset, answer.error_code, answer.high_watermark,
                answer.log_start_offset, req.fetch_offset < len(llog), answer.diverging_epoch,
                answer.diverging_end_offset, local,
            )
            for e in self._step_raw(follower, response, out):
                self._follower_effect(follower, e, out)
        self._complete(self.cores[leader], out)


@pytest.mark.parametrize("script", sorted(p.name for p in TESTDATA.glob("*.txt")))
def test_cluster_script(script: str) -> None:
    run_script(TESTDATA / script, Cluster().handle)
