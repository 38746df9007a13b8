"""Replication quotas (KIP-73) as the fetch paths ask them: the driver side of kref/replication/quota.py.

Theory of operation
-------------------
The decision (windowed rate, bound exceeded, throttle or not) is
kref/replication/quota.py's. This module only gathers its inputs from the
running broker and hands back its answer, at the two places Kafka asks:

- the leader's Fetch handler, for a follower's fetch (kref/broker/handlers/fetch.py):
  `leader_filtered` empties a throttled, out-of-isr partition's records while
  the leader quota is exceeded (the partition is still answered: high
  watermark, log start, errors), `leader_throttles` keeps such a partition's
  new bytes from ending a parked follower fetch early (Kafka's
  DelayedFetch.tryComplete skips them), and `leader_sent` records the bytes of
  every throttled partition of the answer (Kafka's sizeOfThrottledPartitions);
- the follower's replica fetcher (kref/broker/replica_fetcher.py):
  `follower_holds_back` leaves a throttled, not caught-up partition out of the
  next Fetch while the follower quota is exceeded (it is asked *before* the
  partition's core is stepped, so no FollowerFetch is begun for it), and
  `follower_answered` records its bytes and its lag behind the leader's high
  watermark.

Inputs: the bound is the broker's effective config (dynamic broker configs,
KIP-226, apply at once), the throttled replicas are the partition log's topic
config, the clock is the caller's now_ms. The two quotas live on the broker
object, created on first use with replication.quota.window.num/size.seconds.
A topic without throttled replicas costs one attribute lookup per partition.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from kref.replication.quota import FollowerLag, ReplicationQuota, is_throttled, should_throttle


@dataclass
class ReplicationQuotas:
    leader: ReplicationQuota
    follower: ReplicationQuota
    follower_lag: FollowerLag = field(default_factory=FollowerLag)


def quotas_of(broker: Any) -> ReplicationQuotas:
    quotas = getattr(broker, "replication_quotas", None)
    if quotas is None:
        config = broker.config
        windows = dict(window_num=config.replication_quota_window_num,
                       window_size_ms=config.replication_quota_window_size_seconds * 1000)
        quotas = ReplicationQuotas(ReplicationQuota(**windows), ReplicationQuota(**windows))
        broker.replication_quotas = quotas
    return quotas


def _throttled_replicas(part: Any, which: str) -> tuple[str, ...]:
    return getattr(part.log.config, which, ()) or ()


# ---------------------------------------------------------------- leader side


def leader_throttles(broker: Any, part: Any, replica_id: int, now_ms: int) -> bool:
    """Does the leader quota hold this partition's records back from this follower now?"""
    items = _throttled_replicas(part, "leader_replication_throttled_replicas")
    if not items:
        return False
    return should_throttle(quotas_of(broker).leader, broker.config.leader_replication_throttled_rate,
                           is_throttled(items, part.partition, broker.node_id), replica_id in part.core.isr, now_ms)


def leader_filtered(broker: Any, part: Any, replica_id: int, result: Any, now_ms: int) -> Any:
    """The follower fetch's read result, its records left out if the leader quota throttles it."""
    if result.records and leader_throttles(broker, part, replica_id, now_ms):
        return dataclasses.replace(result, records=b"")
    return result


def leader_sent(broker: Any, sent: list[tuple[Any, Any]], now_ms: int) -> None:
    """Record the bytes of the throttled partitions (in sync or not) of a follower's answer;
    `sent` = (partition driver or None, read result)."""
    size = 0
    for part, result in sent:
        if part is None or not result.records:
            continue
        items = _throttled_replicas(part, "leader_replication_throttled_replicas")
        if items and is_throttled(items, part.partition, broker.node_id):
            size += len(result.records)
    if size:
        quotas_of(broker).leader.record(size, now_ms)


# ---------------------------------------------------------------- follower side


def follower_holds_back(broker: Any, part: Any, now_ms: int) -> bool:
    """Leave this partition out of the next Fetch (the follower quota is exceeded)?"""
    items = _throttled_replicas(part, "follower_replication_throttled_replicas")
    if not items:
        return False
    quotas = quotas_of(broker)
    return should_throttle(quotas.follower, broker.config.follower_replication_throttled_rate,
                           is_throttled(items, part.partition, broker.node_id),
                           quotas.follower_lag.in_sync(part.key, part.leader_epoch), now_ms)


def follower_answered(broker: Any, part: Any, leader_high_watermark: int, records: bytes | None,
                      now_ms: int) -> None:
    """After a partition's answer was applied: its lag, and its bytes if throttled."""
    items = _throttled_replicas(part, "follower_replication_throttled_replicas")
    if not items:
        return
    quotas = quotas_of(broker)
    quotas.follower_lag.answered(part.key, part.leader_epoch, leader_high_watermark, part.log_end_offset)
    if records and is_throttled(items, part.partition, broker.node_id):
        quotas.follower.record(len(records), now_ms)
