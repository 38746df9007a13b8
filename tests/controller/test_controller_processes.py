"""Broker membership in a cluster of three combined `kref broker` processes.

Each node runs a quorum voter, the controller core and a broker that
registers with the active controller over BrokerRegistration and
heartbeats over BrokerHeartbeat (Kafka's RPCs via kio). Short timeouts
(election 300 ms, fetch 600 ms, heartbeat 200 ms, session 2 s). Checked:

- every broker registers (RegisterBrokerRecord, fenced) and is unfenced
  once it has applied its registration (UnfenceBrokerRecord);
- kill -9 of a node that is not the active controller: its broker is fenced
  after broker.session.timeout.ms (FenceBrokerRecord); restarted, it
  registers again with a new incarnation and a higher broker epoch and is
  unfenced;
- kill -9 of a broker and an immediate restart, within
  broker.session.timeout.ms (6 s here): the new incarnation is refused
  (DUPLICATE_BROKER_REGISTRATION, retried) while the old session is valid,
  then the old incarnation is fenced and the new one registers with a new,
  higher broker epoch and is unfenced (Kafka's ClusterControlManager);
- SIGSTOP of the active controller past the election timeout and the
  session timeout, then SIGCONT: whatever the resumed zombie appends in its
  old epoch is never committed: no node's log holds a record of that epoch
  after its last committed offset, and its trace shows no
  AdvanceHighWatermark in that epoch after the resume.

The metadata logs are decoded at the end (kref/metadata/serde.py). Every
wait is bounded; the jitter seed is printed (KREF_TEST_SEED reruns it).
"""

from __future__ import annotations

import signal
import time

import pytest

from kref.storage.metadata_log import MetadataLog
from kref.metadata import records as r
from kref.metadata import serde
from kref.trace import read_ndjson_trace
from kref.trace.sink import read_ndjson_runs
from tests.clusterkit import FAST_CLUSTER_SETTINGS, describe_quorum, wait_until, wait_unfenced
from tests.controller.trace_validation import checked_cluster

SETTINGS = {
    **FAST_CLUSTER_SETTINGS,
    "broker.session.timeout.ms": "2000",
}


def decoded_log(spec) -> list[tuple[int, int, object]]:
    """(offset, leader epoch, record) of every data record in the node's metadata log."""
    metadata_log = MetadataLog(str(spec.data_dir), 0)
    try:
        epochs = metadata_log.epochs()
        out = []
        for offset, value in metadata_log.committed_records(0, metadata_log.log_end_offset):
            epoch = max(e for e, start in epochs if start <= offset)
            out.append((offset, epoch, serde.decode(value)))
        return out
    finally:
        metadata_log.close()


def log_has(spec, text: str) -> bool:
    try:
        return text in spec.log_file.read_text()
    except FileNotFoundError:
        return False


def current_leader(specs):
    best = None
    for s in specs:
        p = describe_quorum(s.controller_port)
        if p is not None and (best is None or p.leader_epoch > best[1].leader_epoch):
            best = (s.node_id, p)
    return best


@pytest.fixture
def cluster(tmp_path):
    with checked_cluster(tmp_path, 3, 3, SETTINGS) as running:
        yield running


def test_registration_fencing_and_zombie_controller(cluster):
    specs, processes, start = cluster
    by_id = {s.node_id: s for s in specs}

    # 1. All three brokers registered and unfenced.
    wait_unfenced(specs, processes)
    leader, p = wait_until(lambda: current_leader(specs), "an active controller")

    # 2. kill -9 a node that is not the active controller: its broker is fenced.
    victim = next(s.node_id for s in specs if s.node_id != leader)
    processes[victim].send_signal(signal.SIGKILL)
    processes[victim].wait(timeout=10)
    wait_until(lambda: _fenced_in_trace(by_id[leader], victim),
               "the killed broker to be fenced")
    # Restarted: a new incarnation registers and is unfenced again.
    start(by_id[victim])
    wait_until(lambda: by_id[victim].log_file.read_text().count("unfenced") >= 2, "the restarted broker to be unfenced")

    # 3. SIGSTOP the active controller past the election and session timeouts.
    leader, p = wait_until(lambda: current_leader(specs), "an active controller")
    zombie, zombie_epoch = leader, p.leader_epoch
    processes[zombie].send_signal(signal.SIGSTOP)
    wait_until(
        lambda: (x := current_leader([s for s in specs if s.node_id != zombie])) and x[1].leader_epoch > zombie_epoch,
        "a new active controller",
    )
    time.sleep(2.5)  # the zombie's broker sessions are now all older than broker.session.timeout.ms
    resumed_ms = time.monotonic_ns() // 1_000_000
    processes[zombie].send_signal(signal.SIGCONT)
    # The zombie learns the new epoch and its broker rejoins.
    wait_until(
        lambda: (x := current_leader(specs)) and x[0] != zombie
        and all(v.log_end_offset == x[1].high_watermark for v in x[1].current_voters),
        "the resumed zombie to follow the new controller",
    )
    committed = current_leader(specs)[1].high_watermark

    for s in specs:
        processes[s.node_id].send_signal(signal.SIGTERM)
    for s in specs:
        processes[s.node_id].wait(timeout=20)

    logs = {s.node_id: decoded_log(s) for s in specs}
    leader_log = [x for x in logs[current_leader_id(logs)]]
    registrations = [rec for _, _, rec in leader_log if isinstance(rec, r.RegisterBrokerRecord)]
    assert sorted({rec.broker_id for rec in registrations}) == [1, 2, 3]
    victim_epochs = [rec.broker_epoch for rec in registrations if rec.broker_id == victim]
    assert len(victim_epochs) >= 2 and victim_epochs == sorted(victim_epochs)
    assert any(isinstance(rec, r.FenceBrokerRecord) and rec.id == victim for _, _, rec in leader_log)
    assert sum(isinstance(rec, r.UnfenceBrokerRecord) for _, _, rec in leader_log) >= 4

    # The committed prefix is the same everywhere; no record the zombie wrote
    # in its epoch after the resume survives past the committed point.
    for node, entries in logs.items():
        prefix = [(o, e, rec) for o, e, rec in entries if o < committed]
        assert prefix == [(o, e, rec) for o, e, rec in leader_log if o < committed], node
    trace = read_ndjson_trace(by_id[zombie].dir / "trace.ndjson")
    after = [e for e in trace if e["time_ms"] >= resumed_ms]
    zombie_writes = [e for e in after if e["type"] == "FenceBroker" and e["leader_epoch"] == zombie_epoch]
    print(f"zombie node {zombie} epoch {zombie_epoch}: {len(zombie_writes)} FenceBroker writes after SIGCONT")
    assert not [e for e in after if e["type"] == "AdvanceHighWatermark" and e["leader_epoch"] == zombie_epoch]
    for _, entries in logs.items():
        assert not [rec for o, e, rec in entries if e == zombie_epoch and o >= committed]


def test_restart_within_the_session_gets_a_new_broker_epoch(tmp_path):
    import re

    settings = {**SETTINGS, "broker.session.timeout.ms": "6000"}
    with checked_cluster(tmp_path, 3, 3, settings) as (specs, processes, start):
        by_id = {s.node_id: s for s in specs}
        wait_unfenced(specs, processes)
        leader, _ = wait_until(lambda: current_leader(specs), "an active controller")
        victim = next(s.node_id for s in specs if s.node_id != leader)
        log_file = by_id[victim].log_file

        def epochs() -> list[int]:
            return [int(x) for x in re.findall(r"registered with broker epoch (\d+)", log_file.read_text())]

        old_epoch, = epochs()
        processes[victim].send_signal(signal.SIGKILL)
        processes[victim].wait(timeout=10)
        start(by_id[victim])  # at once: well within the 6 s session of the killed incarnation
        wait_until(lambda: len(epochs()) == 2, "the new incarnation registered")
        wait_until(lambda: log_file.read_text().count("unfenced") >= 2, "the new incarnation unfenced")
        new_epoch = epochs()[1]
        assert new_epoch > old_epoch
        # The controller that registered each incarnation is whichever was active then:
        # on a loaded box leadership can move during the restart, so read every node's
        # trace (every run) merged by the shared clock, each record once.
        trace = _merged_controller_trace(specs)
        registered = [e["broker_epoch"] for e in trace if e["type"] == "RegisterBroker" and e["broker"] == victim]
        assert registered[-2:] == [old_epoch, new_epoch], registered
        if "registration refused: DUPLICATE_BROKER_REGISTRATION" not in log_file.read_text():
            # On a loaded box the restart can outlive the old session: then the controller
            # must have fenced the old incarnation (session expiry) before the new one registered.
            at = {id(e): i for i, e in enumerate(trace)}
            old_i = max(at[id(e)] for e in trace if e["type"] == "RegisterBroker" and e.get("broker_epoch") == old_epoch)
            new_i = max(at[id(e)] for e in trace if e["type"] == "RegisterBroker" and e.get("broker_epoch") == new_epoch)
            assert any(e["type"] == "FenceBroker" and e.get("broker") == victim and e.get("fenced", True)
                       for e in trace[old_i:new_i]), "neither refused nor fenced before the new registration"
        # The old incarnation is fenced for good: a heartbeat in its epoch is stale.
        from kref.protocol.client import WireClient
        from kref.protocol.codec import request_class
        from kref.protocol.errors import ErrorCode

        heartbeat = request_class(63, 0)(broker_id=victim, broker_epoch=old_epoch, current_metadata_offset=1 << 20,
                                         want_fence=False, want_shut_down=False)
        leader, _ = wait_until(lambda: current_leader(specs), "an active controller")
        with WireClient("127.0.0.1", by_id[leader].controller_port, timeout=10) as client:
            assert client.request(heartbeat).error_code == ErrorCode.STALE_BROKER_EPOCH


def _merged_controller_trace(specs) -> list[dict]:
    """Every node's trace events (all runs), merged by mono_ns, each registration once."""
    events = []
    for s in specs:
        path = s.dir / "trace.ndjson"
        if path.exists():
            for run in read_ndjson_runs(path):
                events.extend(run.events)
    events.sort(key=lambda e: e.get("mono_ns", 0))
    seen, merged = set(), []
    for e in events:
        if e.get("type") == "RegisterBroker":
            key = (e.get("broker"), e.get("broker_epoch"))
            if key in seen:
                continue
            seen.add(key)
        merged.append(e)
    return merged


def current_leader_id(logs) -> int:
    return max(logs, key=lambda n: len(logs[n]))


def _fenced_in_trace(spec, broker: int) -> bool:
    try:
        return any(e["type"] == "FenceBroker" and e["broker"] == broker for e in read_ndjson_trace(spec.dir / "trace.ndjson"))
    except (FileNotFoundError, ValueError):
        return False
