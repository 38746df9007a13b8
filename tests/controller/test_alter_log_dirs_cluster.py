"""Moving both replicas of a partition between log dirs on a real 2-broker KRaft cluster.

Each broker has two log.dirs. kafka-python's admin client sends one
AlterReplicaLogDirs per broker (it groups the replicas by broker id), so the
leader's replica and the follower's move at the same time, while a
confluent-kafka producer writes with acks=all. On the follower the copy
races the replica fetcher's appends (append_as_follower on the current log)
and the swap must hand the fetcher the moved log; on the leader it races
produce. Afterwards both replicas live in their other dir, the isr still
holds both, every acknowledged record is read back through the cluster,
and, with the cluster stopped, from each replica's segments in its new dir
(the follower's too).

Bounded: every wait has a deadline (generous: a loaded 2-core box), the
producer writes at most MAX_RECORDS.
"""

from __future__ import annotations


from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.errors import NoError
from kafka.structs import TopicPartitionReplica

from confluent_kafka.admin import AdminClient

from kref.node import local_cluster
from kref.storage import meta_properties
from kref.storage.config import LogConfig
from kref.storage.log_manager import LogManager
from tests.clients.test_alter_replica_log_dirs_live import AckedProducer, _dirs_of, _read_all, _wait
from tests.controller.test_reassignment_processes import _partition
from tests.storage.batches import decode_values
from tests.clusterkit import FAST_CLUSTER_SETTINGS, stop_processes

SETTINGS = {
    **FAST_CLUSTER_SETTINGS,
    "replica.lag.time.max.ms": "10000",
    "replica.alter.log.dirs.io.max.bytes.per.second": "2000000",
}
TOPIC = "moving"  # the name AckedProducer writes to
WAIT_S = 120


class _Node:
    """What _dirs_of needs: the node's log dirs."""

    def __init__(self, spec) -> None:
        self.log_dirs = [spec.data_dir, spec.dir / "data-b"]


def test_both_replicas_move_under_acks_all(tmp_path):
    specs = local_cluster.plan(tmp_path, controllers=1, brokers=2, overrides=SETTINGS)
    nodes = {}
    for spec in specs:
        nodes[spec.node_id] = _Node(spec)
        spec.properties["log.dirs"] = ",".join(str(d) for d in nodes[spec.node_id].log_dirs)
        spec.config_file.write_text("".join(f"{k}={v}\n" for k, v in spec.properties.items()))
    local_cluster.format_nodes(specs, meta_properties.random_uuid())
    processes = {s.node_id: local_cluster.start_node(s) for s in specs}
    servers = local_cluster.bootstrap_servers(specs)
    try:
        assert local_cluster.wait_ready(specs, timeout_s=WAIT_S), "the cluster did not come up"
        admin = KafkaAdminClient(bootstrap_servers=servers, request_timeout_ms=30000)
        admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=2)])
        where = _wait(lambda: {i: _dirs_of(n, TOPIC) for i, n in nodes.items()}
                      if all(_dirs_of(n, TOPIC) for n in nodes.values()) else None, "both replicas")
        producer = AckedProducer(servers).start()
        try:
            _wait(lambda: len(producer.acked) >= 8000, "8000 acknowledged records before the move")
            wanted = {}
            for node_id, node in nodes.items():
                [source] = where[node_id]
                wanted[node_id] = next(str(d) for d in node.log_dirs if str(d) != source)
            replicas = {TopicPartitionReplica(TOPIC, 0, i): d for i, d in wanted.items()}
            assert admin.alter_replica_log_dirs(replicas) == {r: NoError for r in replicas}
            _wait(lambda: all(_dirs_of(nodes[i], TOPIC) == {d: [f"{TOPIC}-0"]} for i, d in wanted.items()),
                  "both replicas in their new dirs")
            moved_at = len(producer.acked)
            _wait(lambda: len(producer.acked) >= moved_at + 2000, "records acknowledged after the moves")
        finally:
            producer.finish()
        assert not producer.errors, producer.errors[:5]
        inspector = AdminClient({"bootstrap.servers": servers})
        _wait(lambda: (p := _partition(inspector.list_topics(TOPIC, timeout=10), TOPIC)) and len(p.isrs) == 2,
              "both replicas in the isr after the moves")
        admin.close()
        values = set(producer.acked.values())
        got = set(_read_all(servers, max(producer.acked) + 1).values())
        assert values <= got, f"{len(values - got)} acknowledged records unreadable after the moves"
    finally:
        stop_processes(processes)
        for spec in specs:
            if spec.log_file.exists():
                print(f"--- node {spec.node_id} log ---\n{spec.log_file.read_text(errors='replace')[-6000:]}")
    # Each replica, the follower's too, holds every acknowledged record in its new dir's segments.
    for node_id, destination in wanted.items():
        on_disk = set(_read_dir(destination).values())
        assert values <= on_disk, f"node {node_id}: {len(values - on_disk)} acknowledged records not in {destination}"


def _read_dir(log_dir: str) -> dict[int, bytes]:
    manager = LogManager([log_dir], LogConfig(), 0)
    manager.load_logs(0)
    log = manager.get_log(TOPIC, 0)
    out: dict[int, bytes] = {}
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        out.update(decode_values(data.records))
        offset = data.next_offset
    manager.shutdown()
    return out
