"""Producer id allocation (InitProducerId, KIP-98): ids never repeat, even across restarts or crashes."""

from __future__ import annotations

import pytest

from kref.coordinator.producer_id import STATE_FILE, ProducerIdManager


def test_ids_unique_across_restarts(tmp_path):
    seen = set()
    for _ in range(3):
        manager = ProducerIdManager(tmp_path, block_size=10)
        for _ in range(25):
            pid = manager.generate_producer_id()
            assert pid not in seen
            seen.add(pid)
    assert min(seen) == 0


def test_block_is_persisted_before_ids_are_used(tmp_path):
    manager = ProducerIdManager(tmp_path, block_size=10)
    assert manager.generate_producer_id() == 0
    # a crash right now: the restarted broker starts after the reserved block
    assert ProducerIdManager(tmp_path, block_size=10).generate_producer_id() == 10


def test_unreadable_state_is_refused(tmp_path):
    (tmp_path / STATE_FILE).write_text("{not json")
    with pytest.raises(RuntimeError):
        ProducerIdManager(tmp_path)
