"""A scripted driver for the pure GroupCoordinator: virtual clock, instant log writes."""

from __future__ import annotations

from kref.coordinator import group as g


class Harness:
    """Drives a GroupCoordinator the way the broker does, but with a virtual clock.

    Writes to __consumer_offsets are appended to `log` and committed at once
    (or fail with `write_error`, or wait for commit_writes() with
    `hold_commits`), so a second coordinator can be loaded from `log`.
    """

    def __init__(self, config: g.GroupConfig | None = None, *, load: bool = True) -> None:
        self.config = config or g.GroupConfig(group_initial_rebalance_delay_ms=0, offsets_topic_num_partitions=1)
        self.coordinator = g.GroupCoordinator(self.config, member_id_nonce="n")
        self.now = 0
        self.responses: dict[object, object] = {}
        self.log: list[tuple[int, bytes, bytes | None]] = []
        self.write_error = g.Errors.NONE
        # With hold_commits, appended writes wait in `uncommitted` until
        # commit_writes() (a high watermark that has not reached them yet).
        self.hold_commits = False
        self.uncommitted: list[int] = []
        self.trace: list[object] = []
        self._next_request = 0
        if load:
            for p in range(self.config.offsets_topic_num_partitions):
                self.step(g.BeginLoad(p))
                self.step(g.CompleteLoad(p, ()))

    def step(self, event: object) -> None:
        queue = list(self.coordinator.step(event, self.now))
        while queue:
            effect = queue.pop(0)
            if isinstance(effect, g.Respond):
                assert effect.request_id not in self.responses, f"answered twice: {effect}"
                self.responses[effect.request_id] = effect.response
            elif isinstance(effect, g.WriteRecords):
                if self.write_error is not g.Errors.NONE:
                    queue.extend(self.coordinator.step(g.WriteFailed(effect.token, self.write_error), self.now))
                    continue
                self.log.extend((effect.partition, k, v) for k, v in effect.records)
                if self.hold_commits:
                    self.uncommitted.append(effect.token)
                else:
                    queue.extend(self.coordinator.step(g.WriteCommitted(effect.token), self.now))
            elif isinstance(effect, g.Emit):
                self.trace.append(effect.event)

    def commit_writes(self) -> None:
        """The high watermark passes every held write: report them committed, in log order."""
        tokens, self.uncommitted = self.uncommitted, []
        for token in tokens:
            self.step(g.WriteCommitted(token))

    def advance(self, ms: int) -> None:
        """Move the clock, firing due timers in deadline order as the broker would."""
        target = self.now + ms
        while (deadline := self.coordinator.next_deadline()) is not None and deadline <= target:
            self.now = max(self.now, deadline)
            for key, d in sorted(self.coordinator.timers.items(), key=lambda kv: kv[1]):
                if d <= self.now:
                    self.step(g.TimerExpired(key))
                    break
        self.now = target

    def request(self, factory, **fields):
        self._next_request += 1
        rid = self._next_request
        self.step(factory(request_id=rid, **fields))
        return rid

    def response(self, rid):
        return self.responses.get(rid)

    def join(self, group_id="g", member_id="", *, protocols=(("range", b"m"),), session_timeout_ms=10_000,
             rebalance_timeout_ms=30_000, group_instance_id=None, client_id="c", require_known_member_id=False):
        return self.request(
            g.JoinGroup,
            group_id=group_id,
            member_id=member_id,
            protocol_type="consumer",
            protocols=protocols,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            group_instance_id=group_instance_id,
            client_id=client_id,
            require_known_member_id=require_known_member_id,
        )

    def sync(self, member_id, generation_id, group_id="g", assignments=(), group_instance_id=None):
        return self.request(
            g.SyncGroup,
            group_id=group_id,
            generation_id=generation_id,
            member_id=member_id,
            assignments=assignments,
            group_instance_id=group_instance_id,
        )

    def heartbeat(self, member_id, generation_id, group_id="g", group_instance_id=None):
        rid = self.request(
            g.Heartbeat, group_id=group_id, generation_id=generation_id, member_id=member_id,
            group_instance_id=group_instance_id,
        )
        return self.response(rid).error

    def form_group(self, n=2, **join_kwargs):
        """n dynamic members join and sync; returns (member_ids, generation, leader)."""
        rids = [self.join(client_id=f"c{i}", **join_kwargs) for i in range(n)]
        self.advance(0)
        results = [self.response(r) for r in rids]
        assert all(r.error is g.Errors.NONE for r in results), results
        generation = results[0].generation_id
        leader = results[0].leader
        ids = [r.member_id for r in results]
        assignments = tuple((mid, f"assign-{mid}".encode()) for mid in ids)
        sync_rids = [self.sync(mid, generation, assignments=assignments if mid == leader else ()) for mid in ids]
        for mid, r in zip(ids, sync_rids):
            assert self.response(r) == g.SyncResult(g.Errors.NONE, f"assign-{mid}".encode(), "consumer", "range")
        return ids, generation, leader

    def group(self, group_id="g") -> g.Group:
        return self.coordinator.groups[group_id]


import pytest  # noqa: E402


@pytest.fixture
def make_harness():
    return Harness
