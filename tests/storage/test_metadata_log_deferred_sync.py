"""MetadataLog with defer_sync: what a sync from a worker thread covers.

An append only writes; `unsynced()` (taken on the loop) names the segment
files written past the recovery point, the log end the sync will cover and
the truncation count; `mark_synced` moves the recovery point to that end,
unless a truncation came in between (the truncation flushed in place, and
what was appended after it waits for the next sync).
"""

from __future__ import annotations

from kref.storage.metadata_log import MetadataLog


def _log(tmp_path) -> MetadataLog:
    return MetadataLog(str(tmp_path), 0, defer_sync=True)


def test_an_append_waits_for_the_sync_that_covers_it(tmp_path):
    log = _log(tmp_path)
    log.append_as_leader([b"a", b"b"], 1, 0)
    paths, names_changed, end, truncations = log.unsynced()
    assert end == 2 and names_changed and len(paths) == 1 and paths[0].endswith(".log")
    assert log.log.recovery_point == 0  # written, not durable yet
    log.sync_paths(paths, names_changed)
    log.mark_synced(end, truncations, names_changed)
    assert log.log.recovery_point == 2
    assert log.unsynced()[:3] == ([], False, 2)  # nothing left to sync, no new names
    log.append_as_leader([b"c"], 1, 0)
    paths, names_changed, end, _ = log.unsynced()
    assert end == 3 and len(paths) == 1 and not names_changed
    log.close()


def test_a_sync_taken_before_a_truncation_does_not_count_after_it(tmp_path):
    log = _log(tmp_path)
    for value in (b"a", b"b", b"c"):
        log.append_as_leader([value], 1, 0)
    paths, names_changed, end, truncations = log.unsynced()
    assert end == 3
    log.truncate_to(1)  # flushed in place
    log.append_as_leader([b"x", b"y"], 2, 0)  # offsets 1-2 again, in another epoch
    log.sync_paths(paths, names_changed)
    log.mark_synced(end, truncations, names_changed)
    assert log.log.recovery_point == 1  # the truncation's flush, not the stale sync's end
    paths, _, end, _ = log.unsynced()
    assert end == 3 and paths
    log.close()


def test_without_defer_sync_every_append_is_flushed_in_place(tmp_path):
    log = MetadataLog(str(tmp_path), 0)
    log.append_as_leader([b"a"], 1, 0)
    assert log.log.recovery_point == 1 and log.unsynced()[0] == []
    log.close()
