"""The Fetch handler's session cache draws its session ids from a generator seeded
through the broker's ids port (kref/ports/ids.py): two brokers on the same seed
hand out the same ids, another seed other ones."""

from __future__ import annotations

from kref.broker.broker import Broker
from kref.broker.config import BrokerConfig
from kref.broker.fetch_session import INITIAL_EPOCH
from kref.broker.handlers import fetch
from kref.ports.ids import SeededIds


class _Router:
    def register(self, *args) -> None:
        pass


def _session_ids(tmp_path, seed: int) -> list[int]:
    config = BrokerConfig.load(None, [f"log.dirs={tmp_path / str(seed) / 'data'}"])
    broker = Broker(config, ids=SeededIds(seed))
    fetch.register(_Router(), broker)
    return [broker.fetch_sessions.on_request(0, INITIAL_EPOCH, False, [], [], 0).session_id for _ in range(3)]


def test_fetch_session_ids_come_from_the_ids_port(tmp_path):
    first = _session_ids(tmp_path / "a", 42)
    assert all(i > 0 for i in first) and len(set(first)) == 3
    assert _session_ids(tmp_path / "b", 42) == first
    assert _session_ids(tmp_path / "c", 43) != first
