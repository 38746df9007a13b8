"""Replication quotas (KIP-73): how fast a broker may move throttled replicas' bytes.

Theory of operation
-------------------
A reassignment or a follower back from a long absence can flood the network
and the leader's disks. KIP-73 bounds that traffic per broker, in bytes per
second, with two quotas:

- the *leader* quota (dynamic broker config leader.replication.throttled.rate)
  bounds the bytes a leader sends to followers of throttled partitions;
- the *follower* quota (follower.replication.throttled.rate) bounds the bytes
  a follower fetches for throttled partitions.

Which partitions are throttled is a topic config: leader.replication.throttled.replicas
and follower.replication.throttled.replicas, each "*" (every replica of the
topic) or a list of partition:broker pairs. A broker takes the pairs that name
itself: on the leader the leader list, on the follower the follower list
(`throttled_partitions`).

The rate is Kafka's windowed Rate (ReplicationQuotaManager's sensor): the
bytes recorded in the last `window_num` windows of `window_size_ms`
(replication.quota.window.num, replication.quota.window.size.seconds), divided
by the time they cover, but by at least `window_num - 1` whole windows, so a
fresh quota does not read a first small burst as a huge rate. The quota is
exceeded when that rate is above the bound.

What is throttled is decided per partition by `should_throttle`: a throttled
partition whose replica is out of sync, while the quota is exceeded. Replicas
in the isr are never held back (that would make them fall out of it: "ISR
thrashing"), but their bytes are recorded too, as Kafka records the whole
traffic of throttled partitions, so the bound holds for the sum.
On the leader "in sync" is the follower's isr membership; on the follower it
is its own lag: caught up with the leader's high watermark in the last answer
(Kafka's PartitionFetchState.isReplicaInSync), unknown (= out of sync) until a
first answer in the current leader epoch.

Everything here is pure: the clock comes in as `now_ms`, the bound as an
argument (a dynamic config change applies at the next decision), and the
drivers (kref/broker/replication_quota.py) only ask.
"""

from __future__ import annotations

import functools
from collections import deque
from dataclasses import dataclass, field

from kref.storage.config import THROTTLED_REPLICA_PAIR, validate_throttled_replicas

__all__ = [
    "ALL_PARTITIONS",
    "UNBOUNDED_RATE",
    "ReplicationQuota",
    "FollowerLag",
    "throttled_partitions",
    "validate_throttled_replicas",
    "should_throttle",
]

# Kafka's default rate: Long.MAX_VALUE bytes/s, i.e. no bound.
UNBOUNDED_RATE = (1 << 63) - 1
ALL_PARTITIONS = None  # "*": every partition of the topic


@functools.lru_cache(maxsize=1024)
def throttled_partitions(items: tuple[str, ...], broker_id: int) -> frozenset[int] | None:
    """The partitions of a topic that the given throttled-replicas config throttles on
    `broker_id`: ALL_PARTITIONS (None) for "*", else those whose pair names the broker.
    (Cached: the drivers ask per partition per fetch, the value rarely changes.)"""
    if "*" in items:
        return ALL_PARTITIONS
    out = set()
    for item in items:
        if THROTTLED_REPLICA_PAIR.match(item):
            partition, broker = item.split(":")
            if int(broker) == broker_id:
                out.add(int(partition))
    return frozenset(out)


def is_throttled(items: tuple[str, ...], partition: int, broker_id: int) -> bool:
    if not items:
        return False
    chosen = throttled_partitions(items, broker_id)
    return chosen is ALL_PARTITIONS or partition in chosen


@dataclass
class ReplicationQuota:
    """One windowed byte rate (Kafka's Rate over a SampledStat of `window_num` samples)."""

    window_num: int = 11
    window_size_ms: int = 1000
    # [window start ms, bytes], oldest first; at most window_num entries
    samples: deque = field(default_factory=deque)

    def record(self, size: int, now_ms: int) -> None:
        if size <= 0:
            return
        self._purge(now_ms)
        if not self.samples or now_ms >= self.samples[-1][0] + self.window_size_ms:
            self.samples.append([now_ms, 0])
            while len(self.samples) > self.window_num:
                self.samples.popleft()
        self.samples[-1][1] += size

    def rate(self, now_ms: int) -> float:
        """Bytes per second over the retained windows."""
        self._purge(now_ms)
        if not self.samples:
            return 0.0
        total = sum(s[1] for s in self.samples)
        elapsed = max(0, now_ms - self.samples[0][0])
        full = elapsed // self.window_size_ms
        if full < self.window_num - 1:
            elapsed += (self.window_num - 1 - full) * self.window_size_ms
        return total * 1000.0 / max(elapsed, 1)

    def exceeded(self, bound_bytes_per_s: int, now_ms: int) -> bool:
        if bound_bytes_per_s >= UNBOUNDED_RATE:
            return False
        return self.rate(now_ms) > bound_bytes_per_s

    def _purge(self, now_ms: int) -> None:
        # A window older than the whole span no longer counts (Kafka's purgeObsoleteSamples).
        horizon = self.window_num * self.window_size_ms
        while self.samples and now_ms - self.samples[0][0] >= horizon:
            self.samples.popleft()


def should_throttle(quota: ReplicationQuota, bound_bytes_per_s: int, throttled: bool, in_sync: bool,
                    now_ms: int) -> bool:
    """Leave this partition's bytes out (leader) or out of the Fetch (follower)?"""
    return throttled and not in_sync and quota.exceeded(bound_bytes_per_s, now_ms)


@dataclass
class FollowerLag:
    """A follower's own view of whether it is in sync, per partition and leader epoch:
    lag = leader's high watermark - next fetch offset after the last answer."""

    max_entries: int = 100_000
    lag: dict = field(default_factory=dict)  # (topic, partition) -> (leader_epoch, lag)

    def answered(self, key: tuple[str, int], leader_epoch: int, leader_high_watermark: int,
                 next_offset: int) -> None:
        if leader_high_watermark < 0:
            return  # an error answer says nothing about the lag
        if key not in self.lag and len(self.lag) >= self.max_entries:
            self.lag.clear()  # bound: forgetting only makes partitions count as out of sync
        self.lag[key] = (leader_epoch, max(0, leader_high_watermark - next_offset))

    def in_sync(self, key: tuple[str, int], leader_epoch: int) -> bool:
        seen = self.lag.get(key)
        return seen is not None and seen[0] == leader_epoch and seen[1] <= 0
