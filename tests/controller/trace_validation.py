"""The cluster process tests check their own traces (issue 15).

Theory of operation: every node of `tests.clusterkit.running_cluster` writes
its NDJSON trace (`--trace-file`), named after the actions of
spec/KRaft.tla and spec/Replication.tla. After a test has stopped its
nodes, `check_cluster_traces` hands every node's file to `kref trace
check`'s own decision (trace_check.cli.validate) in auto mode: the quorum
against spec/KRaft.tla, every user partition against spec/Replication.tla
(the partitions batched into one TLC run), each bounded by `timeout_s`. A
rejection fails the test with the report that names the first event no
action can take; a trace that cannot be checked (exit 2) fails it too,
unless the test passes `strict=False` and says why.

Strict by default since session 12: what made a cluster's partition "not
checkable" is gone (the controller traces each partition's creation,
PartitionRecord, so a partition whose creation no replica applied starts
there; a controlled shutdown is spec/Replication.tla's ControlledShutdown, so
the check no longer stops at the final SIGTERMs).

Every rejection fails the test, spec/KRaft.tla's as spec/Replication.tla's.
(Session 10 printed a KRaft rejection only, for the tests converted then: a
vote or pre-vote grant that reached its candidate after it moved on could not
be expressed while the spec's votes were atomic steps; they are messages in
flight since session 11, docs/trace-validation.md.)
"""

from __future__ import annotations

import contextlib

from tests.clusterkit import running_cluster
from trace_check.cli import validate

TIMEOUT_S = 240


def check_cluster_traces(specs, *, strict: bool = True, timeout_s: float = TIMEOUT_S) -> str:
    files = [s.dir / "trace.ndjson" for s in specs if (s.dir / "trace.ndjson").exists()]
    assert files, "no node wrote a trace"
    code, report = validate([str(f) for f in files], timeout_s=timeout_s)
    print(report)
    assert code != 1, f"a trace of this run is not a behaviour of the spec:\n{report}"
    if strict:
        assert code == 0, report
    return report


@contextlib.contextmanager
def checked_cluster(tmp_path, controllers: int, brokers: int, overrides: dict[str, str], *, strict: bool = True):
    """tests.clusterkit.running_cluster, whose traces are checked once the test body ended well
    and every node stopped (a failing body is reported as it is, unchecked)."""
    with running_cluster(tmp_path, controllers, brokers, overrides) as running:
        yield running
    check_cluster_traces(running[0], strict=strict)
