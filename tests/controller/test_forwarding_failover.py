"""A broker forwards admin requests across a controller failover, as Kafka's does.

Three combined nodes. Two of them, the active controller among them, are
killed with SIGKILL: the survivor loses its leader and, alone, cannot elect
one. A CreateTopics then goes to the survivor (raw wire, so no client-side
retry hides the answer) while one killed node is started again. The
survivor's forwarding channel must keep the request until the quorum has a
leader again and send it there (Kafka's broker-to-controller channel
re-queues a request on a disconnect, while no controller is known, and on
NOT_CONTROLLER), up to the request's own timeout (60 s here: a restart
takes seconds on a loaded machine). The answer is NONE, not NOT_CONTROLLER, and both running
brokers then list the topic. The nodes' jitter seed is printed.
"""

from __future__ import annotations

import datetime
import re
import signal
import sys
import threading
import time

import pytest

from kref.protocol.client import WireClient
from kref.protocol.codec import request_class
from kref.protocol.errors import ErrorCode
from tests.clusterkit import FAST_CLUSTER_SETTINGS, wait_for_leader, wait_listed, wait_until
from tests.controller.trace_validation import checked_cluster

TOPIC = "after-failover"


def create_topic(port: int, name: str):
    cls = request_class(19, 7)
    m = sys.modules[cls.__module__]
    request = cls(
        topics=(m.CreatableTopic(name=name, num_partitions=1, replication_factor=1, assignments=(), configs=()),),
        timeout=datetime.timedelta(seconds=60),
        validate_only=False,
    )
    with WireClient("127.0.0.1", port, timeout=75) as client:
        return client.request(request).topics[0]


def lists_topic(port: int, name: str) -> bool:
    cls = request_class(3, 12)
    m = sys.modules[cls.__module__]
    try:
        with WireClient("127.0.0.1", port, timeout=5) as client:
            response = client.request(cls(topics=(m.MetadataRequestTopic(name=name, topic_id=None),),
                                          allow_auto_topic_creation=False,
                                          include_topic_authorized_operations=False))
    except OSError:
        return False
    return any(t.name == name and t.error_code == ErrorCode.NONE for t in response.topics)


@pytest.mark.timeout(900)  # the cluster run plus TLC on its traces (trace_validation.TIMEOUT_S per spec)
def test_create_topics_sent_while_the_quorum_has_no_leader_succeeds_once_it_has_one(tmp_path):
    with checked_cluster(tmp_path, 3, 3, FAST_CLUSTER_SETTINGS) as (specs, processes, start):
        wait_listed(specs, processes)
        leader, quorum = wait_for_leader(specs)
        by_id = {s.node_id: s for s in specs}
        survivor = next(s for s in specs if s.node_id != leader)
        killed = [s.node_id for s in specs if s is not survivor]
        seen = len(survivor.log_file.read_text(errors="replace"))
        for node in killed:
            processes[node].send_signal(signal.SIGKILL)
            processes[node].wait()
        # The survivor has noticed: it asks for pre-votes (KIP-996) or stands, and cannot win alone.
        lost_leader = re.compile(rf"node {survivor.node_id}: (Prospective|Candidate|Unattached), leader")
        wait_until(lambda: lost_leader.search(survivor.log_file.read_text(errors="replace")[seen:]),
                   "the survivor noticing it has no leader")

        answer = {}
        sender = threading.Thread(target=lambda: answer.update(result=create_topic(survivor.client_port, TOPIC)))
        started = time.monotonic()
        sender.start()
        start(by_id[killed[0]])  # a majority again: an election can succeed
        sender.join(90)
        assert not sender.is_alive(), "CreateTopics was not answered within 90 s"
        result = answer["result"]
        print(f"killed {killed} (leader {leader}, epoch {quorum.leader_epoch}); CreateTopics to node "
              f"{survivor.node_id} answered {ErrorCode(result.error_code).name} after {time.monotonic() - started:.1f}s")
        assert result.error_code == ErrorCode.NONE, result
        for s in (survivor, by_id[killed[0]]):
            wait_until(lambda s=s: lists_topic(s.client_port, TOPIC), f"{TOPIC} on node {s.node_id}")
