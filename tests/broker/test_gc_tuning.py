"""kref/broker/gc_tuning.py: the start-up heap leaves the collector's walks, later garbage does not."""

import gc

from kref.broker.gc_tuning import freeze_startup_heap


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_frozen_heap_is_skipped_and_later_cycles_are_still_collected():
    try:
        frozen = freeze_startup_heap()
        # (not equal: a frozen object freed by reference counting since leaves the count)
        assert frozen > 0 and 0 < gc.get_freeze_count() <= frozen
        # The objects alive at the freeze are out of every generation the collector walks.
        assert all(len(generation) < frozen for generation in (gc.get_objects(0), gc.get_objects(1), gc.get_objects(2)))
        # Garbage made after the freeze is reclaimed as before (reference cycles included).
        collected_before = gc.get_stats()[2]["collected"]
        for _ in range(100):
            _Cycle()
        gc.collect()
        assert gc.get_stats()[2]["collected"] - collected_before >= 100
    finally:
        gc.unfreeze()


def test_pause_meter_counts_collections_per_generation_and_writes_them(tmp_path):
    from kref.broker.gc_tuning import GcPauseMeter, read_gc_stats

    path = str(tmp_path / "gc.stats")
    meter = GcPauseMeter(path)
    meter.install()
    try:
        gc.collect(0)
        gc.collect(2)
    finally:
        meter.uninstall()
    meter.write()
    stats = read_gc_stats(path)
    assert stats is not None
    assert stats["collections"][0] >= 1 and stats["collections"][2] >= 1
    assert all(ms >= 0 for ms in stats["pause_ms"])
    # Uninstalled: later collections are not counted.
    gc.collect(2)
    assert meter.collections[2] == stats["collections"][2]
    assert read_gc_stats(str(tmp_path / "absent")) is None
