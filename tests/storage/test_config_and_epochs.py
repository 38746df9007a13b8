"""LogConfig.from_properties (Kafka's topic config names, ConfigError for unknown
names and bad values) and the leader-epoch cache's end_offset_for semantics
(KIP-101/279, as Kafka's LeaderEpochFileCache.endOffsetFor) and its checkpoint file."""

from __future__ import annotations

import pytest

from kref.storage.checkpoint import read_leader_epoch_checkpoint
from kref.storage.config import LogConfig
from kref.storage.errors import ConfigError
from kref.storage.leader_epoch import LeaderEpochFileCache


def test_from_properties_names_and_errors():
    c = LogConfig.from_properties({"retention.ms": "-1", "cleanup.policy": "compact,delete", "preallocate": "true"})
    assert c.retention_ms == -1 and c.cleanup_policy == ("compact", "delete") and c.preallocate
    assert LogConfig.from_properties({"segment.ms": 5}, defaults={"segment.bytes": "1000"}).segment_bytes == 1000
    for bad in (
        {"no.such.config": "1"},
        {"segment.bytes": "abc"},
        {"segment.bytes": "0"},
        {"retention.ms": "-2"},
        {"message.timestamp.type": "WallClock"},
        {"cleanup.policy": "shred"},
        {"min.cleanable.dirty.ratio": "1.5"},
        {"preallocate": "yes"},
        {"segment.bytes": str(1 << 31)},
    ):
        with pytest.raises(ConfigError) as e:
            LogConfig.from_properties(bad)
        assert next(iter(bad)) in str(e.value)
    round_trip = LogConfig.from_properties(c.to_properties())
    assert round_trip == c
    assert c.overrides() == {"retention.ms": "-1", "cleanup.policy": "compact,delete", "preallocate": "true"}


def test_end_offset_for_matches_kafka(tmp_path):
    path = str(tmp_path / "leader-epoch-checkpoint")
    cache = LeaderEpochFileCache(path)
    assert cache.end_offset_for(0, 0) == (-1, -1)  # empty cache
    cache.assign(2, 10)
    cache.assign(4, 20)
    cache.assign(4, 25)  # same epoch, later offset: ignored
    cache.assign(7, 30)
    assert cache.entries() == [(2, 10), (4, 20), (7, 30)]
    assert read_leader_epoch_checkpoint(path) == [(2, 10), (4, 20), (7, 30)]
    assert open(path).read() == "0\n3\n2 10\n4 20\n7 30\n"
    leo = 40
    assert cache.end_offset_for(-1, leo) == (-1, -1)  # UNDEFINED_EPOCH
    assert cache.end_offset_for(7, leo) == (7, 40)  # latest epoch: log end offset
    assert cache.end_offset_for(8, leo) == (-1, -1)  # above everything known
    assert cache.end_offset_for(1, leo) == (1, 10)  # below the first: first start offset
    assert cache.end_offset_for(2, leo) == (2, 20)
    assert cache.end_offset_for(3, leo) == (2, 20)  # unknown epoch in a gap: floor epoch, next start
    assert cache.end_offset_for(5, leo) == (4, 30)
    # a lower epoch at a lower offset removes the stale entries (non-monotonic)
    cache.assign(5, 22)
    assert cache.entries() == [(2, 10), (4, 20), (5, 22)]
    cache.truncate_from_end(21)
    assert cache.entries() == [(2, 10), (4, 20)]
    cache.truncate_from_start(15)
    assert cache.entries() == [(2, 15), (4, 20)]
    cache.truncate_from_start(20)
    assert cache.entries() == [(4, 20)]
    assert cache.epoch_for_offset(19) == -1 and cache.epoch_for_offset(100) == 4
    assert LeaderEpochFileCache.load(str(tmp_path)).entries() == [(4, 20)]
