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
