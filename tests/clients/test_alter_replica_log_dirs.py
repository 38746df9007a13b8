"""AlterReplicaLogDirs (API 34) with kafka-python's alter_replica_log_dirs, read back
through describe_log_dirs, on a broker with two log dirs.

Answered per partition as Kafka does: a replica already in the destination
is NONE; a destination that is not one of the broker's log.dirs is
LOG_DIR_NOT_FOUND; a replica the broker does not host yet is
REPLICA_NOT_AVAILABLE and is then created in the requested dir (Kafka's
preferred log dir), even where the spread would have put it elsewhere.
Moving a hosted replica to the other dir is NONE and moves it (the live
move with records and a producer writing: test_alter_replica_log_dirs_live.py).
"""

from __future__ import annotations

import os
import time

from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.errors import LogDirNotFoundError, NoError, ReplicaNotAvailableError
from kafka.structs import TopicPartitionReplica


def _dirs_of(broker, topic) -> dict[int, str]:
    out = {}
    for d in broker.log_dirs:
        for name in os.listdir(d):
            if name.startswith(f"{topic}-") and name[len(topic) + 1:].isdigit():
                out[int(name[len(topic) + 1:])] = str(d)
    return out


def test_alter_replica_log_dirs_answers_and_places_new_replicas(kref_broker_factory, tmp_path):
    broker = kref_broker_factory(start=False)
    broker.log_dirs = [tmp_path / "dir-a", tmp_path / "dir-b"]
    broker.start()
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=20000)
    try:
        node_id = admin.describe_cluster()["controller_id"]  # the single broker
        admin.create_topics([NewTopic("placed", num_partitions=2, replication_factor=1)])
        placed = _dirs_of(broker, "placed")
        assert sorted(placed) == [0, 1] and set(placed.values()) == {str(d) for d in broker.log_dirs}
        other = {str(d) for d in broker.log_dirs} - {placed[0]}

        result = admin.alter_replica_log_dirs({
            TopicPartitionReplica("placed", 0, node_id): placed[0],
            TopicPartitionReplica("placed", 1, node_id): str(tmp_path / "not-a-log-dir"),
        })
        assert result == {TopicPartitionReplica("placed", 0, node_id): NoError,
                          TopicPartitionReplica("placed", 1, node_id): LogDirNotFoundError}
        destination = other.pop()
        result = admin.alter_replica_log_dirs({TopicPartitionReplica("placed", 0, node_id): destination})
        assert result == {TopicPartitionReplica("placed", 0, node_id): NoError}
        deadline = time.monotonic() + 30
        while _dirs_of(broker, "placed").get(0) != destination and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _dirs_of(broker, "placed") == {0: destination, 1: placed[1]}
        placed = _dirs_of(broker, "placed")

        # One dir now holds both partitions, so the spread would put a new one
        # in the other: ask for the full one before the replica exists.
        wanted = destination
        result = admin.alter_replica_log_dirs({TopicPartitionReplica("later", 0, node_id): wanted})
        assert result == {TopicPartitionReplica("later", 0, node_id): ReplicaNotAvailableError}
        admin.create_topics([NewTopic("later", num_partitions=1, replication_factor=1)])
        deadline = time.monotonic() + 20
        while not _dirs_of(broker, "later") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _dirs_of(broker, "later") == {0: wanted}
        # describe_log_dirs reports it in that dir, not as a future replica.
        [answer] = admin.describe_log_dirs({"later": [0]})
        where = [(d["log_dir"], p["is_future_key"]) for d in answer["log_dirs"]
                 for t in d["topics"] for p in t["partitions"] if t["name"] == "later"]
        assert where == [(wanted, False)]
    finally:
        admin.close()
