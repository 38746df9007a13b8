"""A broker back after a failure rejoins many isrs in a few batched AlterPartition requests.

Three combined nodes, one topic of 240 partitions with replication factor 3.
kill -9 of a node that is not the active controller: after
broker.session.timeout.ms it is fenced and leaves every isr. It restarts,
catches up, and each leader adds it back through AlterPartition. Kafka's
AlterPartitionManager sends one request for all the partitions pending at
once; kref did one request per partition, and at 10,000 partitions those
thousands of requests held up the leaders' own heartbeats until the
controller fenced a live broker (docs/kraft.md).

Checked: the returning node is back in every isr; the leaders sent far
fewer AlterPartition requests than partitions they changed (each node logs
one line per request with its partition count); no live node was fenced
(each broker logs its own fencing). Every trace is checked, strictly
(tests/controller/trace_validation.py): the quorum against spec/KRaft.tla and
the 240 partitions against spec/Replication.tla, through the kill -9, the
fencing, the batched expansions and the final SIGTERMs (unchecked at session
12's merge; session 13: a fetch to a broker that never applied its
leadership is left out as never answered, tests/trace_check/test_never_leader_traces.py,
and a leader that applied it late and took the fetch is read first,
test_late_leadership_traces.py).
"""

from __future__ import annotations

import re
import signal

import pytest

from tests.clusterkit import FAST_CLUSTER_SETTINGS, wait_for_leader, wait_listed, wait_until
from tests.controller.trace_validation import checked_cluster

PARTITIONS = 240
TOPIC = "wide"
REQUEST_LINE = re.compile(r"node (\d+): AlterPartition request (\d+) for (\d+) partition\(s\)")


def _partitions(admin):
    topic = admin.list_topics(TOPIC, timeout=10).topics.get(TOPIC)
    return topic.partitions if topic is not None and topic.error is None else {}


def _requests(log_text: str) -> list[int]:
    return [int(m.group(3)) for m in REQUEST_LINE.finditer(log_text)]


@pytest.mark.timeout(600)
def test_returning_broker_rejoins_isrs_in_batched_alter_partition_requests(tmp_path):
    from confluent_kafka.admin import AdminClient, NewTopic

    from kref.node.local_cluster import bootstrap_servers

    with checked_cluster(tmp_path, 3, 3, FAST_CLUSTER_SETTINGS) as (specs, processes, start):
        by_id = {s.node_id: s for s in specs}
        wait_listed(specs, processes)
        admin = AdminClient({"bootstrap.servers": bootstrap_servers(specs)})
        admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=3)])[TOPIC].result(timeout=60)
        wait_until(lambda: len(ps := _partitions(admin)) == PARTITIONS and all(len(p.isrs) == 3 for p in ps.values()),
                   f"{PARTITIONS} partitions with full isrs")
        controller, _ = wait_for_leader(specs)
        victim = next(n for n in sorted(by_id) if n != controller)
        before = {n: len(_requests(by_id[n].log_file.read_text())) for n in by_id if n != victim}

        processes[victim].send_signal(signal.SIGKILL)
        processes[victim].wait(timeout=30)
        wait_until(lambda: all(victim not in p.isrs for p in _partitions(admin).values()),
                   f"node {victim} fenced and out of every isr")
        start(by_id[victim])
        wait_until(lambda: all(victim in p.isrs for p in _partitions(admin).values()),
                   f"node {victim} back in every isr")

        rejoined = 0
        sent = 0
        for n in by_id:
            if n == victim:
                continue
            sizes = _requests(by_id[n].log_file.read_text())[before[n]:]
            sent += len(sizes)
            rejoined += sum(sizes)
        led_by_others = PARTITIONS  # the victim led none while fenced: the others re-added it everywhere
        print(f"AlterPartition requests after the restart: {sent} carrying {rejoined} partition changes")
        assert rejoined >= led_by_others  # every isr change went through AlterPartition
        assert sent <= led_by_others // 4, (sent, rejoined)  # batched, not one request per partition
        for n in by_id:
            if n != victim:
                text = by_id[n].log_file.read_text()
                assert f"broker {n}: fenced" not in text, f"live node {n} was fenced"
