"""The log-dir move core (kref/broker/alter_log_dirs_core.py, KIP-113): scripted events, expected effects.

Each case is one decision of Kafka's AlterReplicaLogDirs handling or of its
ReplicaAlterLogDirsThread, stepped on the pure core with the facts the
driver would gather.
"""

from __future__ import annotations

from kref.broker import alter_log_dirs_core as c
from kref.protocol.errors import ErrorCode

KEY = ("t", 0)
DIRS = ("/a", "/b", "/c")


def alter(core, destination, current_dir="/a", usable=True, unique_id="1" * 32):
    return core.step(c.AlterReplicaLogDir(KEY, destination, DIRS, usable, current_dir, unique_id), 0)


def facts(start, end, entry):
    return c.LogFacts(start, end, entry)


def tick(core, current, future, end_for_epoch=(-1, -1), cleaning=False, max_append_bytes=1 << 31):
    return core.step(c.CopyTick(KEY, current, future, end_for_epoch, cleaning, max_append_bytes), 0)


def test_answers_without_a_move():
    core = c.AlterLogDirsCore()
    assert alter(core, "/elsewhere") == [c.Answer(ErrorCode.LOG_DIR_NOT_FOUND)]
    assert alter(core, "/b", usable=False) == [c.Answer(ErrorCode.KAFKA_STORAGE_ERROR)]
    assert alter(core, "/b", current_dir=None) == [
        c.RememberPreferredDir(KEY, "/b"), c.Answer(ErrorCode.REPLICA_NOT_AVAILABLE)]
    assert alter(core, "/a") == [c.Answer(ErrorCode.NONE)]
    assert core.moves == {}


def test_a_hosted_replica_starts_a_move_and_a_repeat_is_a_no_op():
    core = c.AlterLogDirsCore()
    assert alter(core, "/b") == [c.StartFuture(KEY, "/b", "1" * 32), c.Answer(ErrorCode.NONE)]
    assert alter(core, "/b", unique_id="2" * 32) == [c.Answer(ErrorCode.NONE)]
    assert core.destination_of(KEY) == "/b"


def test_retarget_abandons_the_first_copy_and_starts_another():
    """Kafka's futureReplicaDirChanged: a new destination restarts the move there."""
    core = c.AlterLogDirsCore()
    alter(core, "/b")
    effects = alter(core, "/c", unique_id="2" * 32)
    assert [type(e) for e in effects] == [c.AbandonFuture, c.StartFuture, c.Answer]
    assert effects[1] == c.StartFuture(KEY, "/c", "2" * 32) and effects[2] == c.Answer(ErrorCode.NONE)
    # Back to where it is: the move is abandoned, nothing started.
    effects = alter(core, "/a")
    assert [type(e) for e in effects] == [c.AbandonFuture, c.Answer] and core.moves == {}


def test_copy_until_caught_up_then_swap():
    core = c.AlterLogDirsCore(copy_max_bytes=1000)
    alter(core, "/b")
    current = facts(0, 50, (3, 40))
    assert tick(core, current, facts(0, 0, None)) == [c.CopyRecords(KEY, 0, 1000)]
    assert tick(core, current, facts(0, 30, (3, 20)), (3, 50)) == [c.CopyRecords(KEY, 30, 1000)]
    # A copy step is one append to the future log: never more than its segment.bytes.
    assert tick(core, current, facts(0, 30, (3, 20)), (3, 50), max_append_bytes=600) == [c.CopyRecords(KEY, 30, 600)]
    assert tick(core, current, facts(0, 50, (3, 40)), (3, 50)) == [c.SwapFutureLog(KEY, "/b")]
    assert core.moves == {}


def test_no_swap_while_the_cleaner_holds_the_current_log():
    core = c.AlterLogDirsCore()
    alter(core, "/b")
    current = facts(0, 50, (3, 40))
    assert tick(core, current, facts(0, 50, (3, 40)), (3, 50), cleaning=True) == [c.Wait(KEY)]
    assert tick(core, current, facts(0, 50, (3, 40)), (3, 50)) == [c.SwapFutureLog(KEY, "/b")]


def test_current_log_truncated_below_the_future_end():
    """KIP-101: the future copied records the current log no longer has."""
    core = c.AlterLogDirsCore()
    alter(core, "/b")
    # The current log (now in epoch 4 from 35) ends epoch 3 at 35; the future holds epoch 3 up to 45.
    assert tick(core, facts(0, 38, (4, 35)), facts(0, 45, (3, 20)), (3, 35)) == [c.TruncateFuture(KEY, 35)]
    # An epoch the current log never had: start over at its log start.
    assert tick(core, facts(5, 38, (4, 35)), facts(0, 10, (9, 0)), (-1, -1)) == [c.RestartFutureAt(KEY, 5)]


def test_future_ahead_without_epochs_is_cut_back():
    core = c.AlterLogDirsCore()
    alter(core, "/b")
    assert tick(core, facts(0, 10, None), facts(0, 12, None)) == [c.TruncateFuture(KEY, 10)]


def test_log_start_moves_during_the_copy():
    core = c.AlterLogDirsCore()
    alter(core, "/b")
    # Retention removed what the future had not copied yet.
    assert tick(core, facts(30, 50, (1, 0)), facts(0, 20, (1, 0)), (1, 50)) == [c.RestartFutureAt(KEY, 30)]
    # Caught up, but the current log's start moved (DeleteRecords): follow it before the swap.
    assert tick(core, facts(30, 50, (1, 30)), facts(10, 50, (1, 10)), (1, 50)) == [c.IncrementFutureLogStart(KEY, 30)]


def test_an_epoch_begun_at_the_log_end_moves_too():
    core = c.AlterLogDirsCore()
    alter(core, "/b")
    assert tick(core, facts(0, 50, (5, 50)), facts(0, 50, (4, 10)), (4, 50)) == [c.AssignFutureEpoch(KEY, 5, 50)]


def test_partition_gone_or_failed_abandons_the_move():
    core = c.AlterLogDirsCore()
    alter(core, "/b")
    assert [type(e) for e in tick(core, None, facts(0, 5, None))] == [c.AbandonFuture]
    assert core.moves == {}
    alter(core, "/b")
    assert [type(e) for e in core.step(c.MoveFailed(KEY, "disk"), 0)] == [c.AbandonFuture]
    assert core.step(c.MoveFailed(KEY, "disk"), 0) == []


def test_future_dirs_found_at_start_resume_one_move_each():
    core = c.AlterLogDirsCore()
    assert core.step(c.FutureFound(KEY, "/b"), 0) == []
    assert core.step(c.FutureFound(KEY, "/c"), 0) == []
    assert core.destination_of(KEY) == "/b"
