"""KIP-73 replication quotas: the pure decision core (kref/replication/quota.py).

The windowed rate (Kafka's Rate over window_num samples, never over less than
window_num - 1 whole windows), the throttled-replicas lists as a broker reads
them, and the throttle rule: throttled AND out of sync AND quota exceeded.
The clock is passed in; nothing here sleeps.
"""

from __future__ import annotations

import pytest

from kref.replication.quota import (
    ALL_PARTITIONS,
    UNBOUNDED_RATE,
    FollowerLag,
    ReplicationQuota,
    is_throttled,
    should_throttle,
    throttled_partitions,
)
from kref.storage.config import LogConfig
from kref.storage.errors import ConfigError


def test_a_first_burst_is_spread_over_window_num_minus_one_windows():
    q = ReplicationQuota(window_num=11, window_size_ms=1000)
    q.record(10_000, now_ms=0)
    # 10,000 bytes in a fresh quota read as 10,000 B over 10 s, not over 1 ms.
    assert q.rate(0) == pytest.approx(1000.0)
    assert not q.exceeded(1000, 0)
    q.record(1, now_ms=0)
    assert q.exceeded(1000, 0)


def test_the_rate_covers_the_retained_windows_and_old_windows_expire():
    q = ReplicationQuota(window_num=2, window_size_ms=1000)
    for t in range(0, 3000, 100):  # 100 bytes every 100 ms = 1000 B/s
        q.record(100, t)
    assert q.rate(3000) == pytest.approx(1000.0, rel=0.35)
    # Two whole spans later nothing is left: rate 0, not exceeded.
    assert q.rate(3000 + 2 * 2000) == 0.0
    assert not q.exceeded(1, 3000 + 2 * 2000)
    assert len(q.samples) <= 2


def test_an_unbounded_rate_is_never_exceeded():
    q = ReplicationQuota(window_num=2, window_size_ms=1000)
    q.record(1 << 40, 0)
    assert not q.exceeded(UNBOUNDED_RATE, 0)
    assert q.exceeded(0, 0)


def test_throttled_replicas_name_partition_and_broker():
    items = ("0:1", "1:2", "2:1")
    assert throttled_partitions(items, 1) == frozenset({0, 2})
    assert throttled_partitions(items, 3) == frozenset()
    assert throttled_partitions(("*",), 7) is ALL_PARTITIONS
    assert is_throttled(("*",), 5, 7)
    assert is_throttled(items, 2, 1) and not is_throttled(items, 1, 1)
    assert not is_throttled((), 0, 1)


def test_the_topic_config_accepts_kafkas_forms_only():
    assert LogConfig.from_properties({"leader.replication.throttled.replicas": "0:1,1:2"}).leader_replication_throttled_replicas == ("0:1", "1:2")
    assert LogConfig.from_properties({"follower.replication.throttled.replicas": "*"}).follower_replication_throttled_replicas == ("*",)
    for bad in ("0-1", "*,0:1", "a:b"):
        with pytest.raises(ConfigError):
            LogConfig.from_properties({"leader.replication.throttled.replicas": bad})


def test_only_out_of_sync_throttled_replicas_are_held_back_while_exceeded():
    q = ReplicationQuota(window_num=2, window_size_ms=1000)
    q.record(5000, 0)
    assert should_throttle(q, 1000, throttled=True, in_sync=False, now_ms=0)
    assert not should_throttle(q, 1000, throttled=True, in_sync=True, now_ms=0)  # no ISR thrashing
    assert not should_throttle(q, 1000, throttled=False, in_sync=False, now_ms=0)
    assert not should_throttle(q, 10_000, throttled=True, in_sync=False, now_ms=0)


def test_a_follower_is_in_sync_once_caught_up_with_the_leaders_high_watermark_in_this_epoch():
    lag = FollowerLag()
    key = ("t", 0)
    assert not lag.in_sync(key, 3)  # no answer yet: out of sync
    lag.answered(key, 3, leader_high_watermark=100, next_offset=40)
    assert not lag.in_sync(key, 3)
    lag.answered(key, 3, leader_high_watermark=100, next_offset=100)
    assert lag.in_sync(key, 3)
    assert not lag.in_sync(key, 4)  # a new leader epoch starts unknown
    lag.answered(key, 3, leader_high_watermark=-1, next_offset=0)  # an error answer changes nothing
    assert lag.in_sync(key, 3)


def test_the_rates_are_dynamic_broker_configs_and_the_windows_static():
    from kref.broker.config import BrokerConfig, ConfigError as BrokerConfigError, is_dynamic_broker_property
    from kref.broker.dynamic_config import DynamicBrokerConfigs, DynamicConfigError

    config = BrokerConfig.load()
    assert config.leader_replication_throttled_rate == config.follower_replication_throttled_rate == UNBOUNDED_RATE
    assert (config.replication_quota_window_num, config.replication_quota_window_size_seconds) == (11, 1)
    assert is_dynamic_broker_property("leader.replication.throttled.rate")
    assert is_dynamic_broker_property("follower.replication.throttled.rate")
    assert not is_dynamic_broker_property("replication.quota.window.num")
    altered = DynamicBrokerConfigs(config).altered("1", {"leader.replication.throttled.rate": "1000"})
    assert altered.effective().leader_replication_throttled_rate == 1000
    with pytest.raises(DynamicConfigError):
        DynamicBrokerConfigs(config).altered("1", {"follower.replication.throttled.rate": "-5"})
    with pytest.raises(DynamicConfigError):
        DynamicBrokerConfigs(config).altered("1", {"replication.quota.window.num": "3"})
    with pytest.raises(BrokerConfigError):
        config.with_overrides({"replication.quota.window.size.seconds": "0"})
