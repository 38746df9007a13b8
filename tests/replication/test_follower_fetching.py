"""Follower fetching (KIP-392) between three real kref processes.

Each node is in its own rack (broker.rack r1..r3) with
replica.selector.class=...RackAwareReplicaSelector. For a consumer in the
rack of a follower:

- the leader answers a Fetch v11+ with preferred_read_replica = that
  follower and no records (raw wire request, checked field by field);
- the follower serves Fetch v11+ from consumers up to its high watermark,
  and refuses v10 (NOT_LEADER_OR_FOLLOWER), as Kafka does;
- confluent-kafka with client.rack reads every record through that path.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib
import os
import random
import time

import pytest

from kref.node import local_cluster
from kref.storage import meta_properties
from kref.protocol.errors import ErrorCode
from tests.clusterkit import wait_until, wait_unfenced, stop_processes
from tests.replication.test_replication_processes import SETTINGS, _partition

TOPIC = "racks"
COUNT = 50
SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


@contextlib.contextmanager
def racked_cluster(tmp_path):
    seed = int(os.environ.get("KREF_TEST_SEED", random.randrange(1 << 30)))
    print(f"seed={seed} (KREF_TEST_SEED; the election jitter of every node)")
    specs = local_cluster.plan(tmp_path, 3, 3, overrides={**SETTINGS, "replica.selector.class": SELECTOR})
    for s in specs:
        with open(s.config_file, "a") as f:
            f.write(f"broker.rack=r{s.node_id}\n")
    local_cluster.format_nodes(specs, meta_properties.random_uuid())
    processes = {}
    try:
        for s in specs:
            processes[s.node_id] = local_cluster.start_node(s, env={"KREF_QUORUM_JITTER_SEED": str(seed)})
        yield specs
    finally:
        stop_processes(processes)


def _fetch(port: int, version: int, rack: str, offset: int = 0):
    from kref.protocol.client import WireClient

    req = importlib.import_module(f"kio.schema.fetch.v{version}.request")
    resp = importlib.import_module(f"kio.schema.fetch.v{version}.response")
    partition = req.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=offset, log_start_offset=-1,
                                   partition_max_bytes=1 << 20, **({"last_fetched_epoch": -1} if version >= 12 else {}))
    fields = dict(replica_id=-1, max_wait=datetime.timedelta(milliseconds=0), min_bytes=1, max_bytes=1 << 20,
                  isolation_level=0, session_id=0, session_epoch=-1,
                  topics=(req.FetchTopic(topic=TOPIC, partitions=(partition,)),), forgotten_topics_data=())
    if version >= 11:
        fields["rack_id"] = rack
    with WireClient("127.0.0.1", port) as client:
        answer = client.request(req.FetchRequest(**fields), resp.FetchResponse)
    return answer.responses[0].partitions[0]


@pytest.mark.timeout(240)
def test_consumer_fetches_from_the_follower_in_its_rack(tmp_path):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    with racked_cluster(tmp_path) as specs:
        by_id = {s.node_id: s for s in specs}
        bootstrap = local_cluster.bootstrap_servers(specs)
        wait_unfenced(specs)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 3)])[TOPIC].result(30)
        p = wait_until(lambda: (p := _partition(admin, TOPIC)) is not None and len(p.isrs) == 3 and p.leader >= 0 and p,
                       "a leader and 3 in-sync replicas")
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        for i in range(COUNT):
            producer.produce(TOPIC, value=b"r%d" % i, partition=0)
        assert producer.flush(30) == 0
        follower = next(r for r in p.replicas if r != p.leader)
        rack = f"r{follower}"

        answer = wait_until(lambda: (a := _fetch(by_id[p.leader].client_port, 12, rack)).preferred_read_replica == follower and a,
                            "the leader to name the follower in the client's rack")
        assert answer.error_code == ErrorCode.NONE and not answer.records
        same_rack = _fetch(by_id[p.leader].client_port, 12, f"r{p.leader}")
        assert same_rack.preferred_read_replica == -1 and same_rack.records  # the leader is in the rack itself
        # The follower learns the leader's high watermark with its next fetch.
        served = wait_until(lambda: (a := _fetch(by_id[follower].client_port, 12, rack)).high_watermark == COUNT and a,
                            "the follower to serve the consumer below its high watermark")
        assert served.error_code == ErrorCode.NONE and served.records
        assert _fetch(by_id[follower].client_port, 10, "").error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "racks", "client.rack": rack,
                             "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < COUNT and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
        consumer.close()
        assert got == [b"r%d" % i for i in range(COUNT)]
