"""KIP-112: an OSError creating a log takes that log dir offline instead of ending the node.

A real Broker on two real log dirs. The second dir is replaced by a plain
file (what a failed mount or a removed disk leaves: every file call under it
fails with an OSError). A metadata delta then names new partitions for this
broker, as the cluster's metadata log would (kref/broker/replica_manager.py
`apply_delta`):

- the node does not crash; the failed dir is offline (LogManager.offline_dirs);
- the replica that lived in it goes offline here (it leaves the partition map);
- every new partition is created in the dir still online;
- DescribeLogDirs answers KAFKA_STORAGE_ERROR for the offline dir alone;
- with every dir offline, a new partition is not hosted, and still nothing crashes.
"""

from __future__ import annotations

import os
import shutil
import uuid
from types import SimpleNamespace

import trio

from kref.broker.broker import Broker
from kref.broker.config import BrokerConfig
from kref.broker.handlers.log_dirs import handle_describe_log_dirs
from kref.metadata import records as mr
from kref.metadata.image import MetadataImage
from kref.protocol.codec import request_class
from kref.protocol.errors import ErrorCode


def _topic(image: MetadataImage, node: int, name: str, partitions: int):
    topic_id = uuid.uuid4()
    records = [mr.TopicRecord(name, topic_id)] + [
        mr.PartitionRecord(p, topic_id, (node,), (node,), node) for p in range(partitions)]
    return image.apply(records)


def _dir_of(broker: Broker, key) -> str:
    return os.path.dirname(os.path.normpath(broker.partitions[key].log.dir))


def test_a_failed_log_dir_goes_offline_and_its_replicas_with_it(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    broker = Broker(BrokerConfig.load(None, [f"log.dirs={a},{b}"]))
    broker.open()
    manager, node = broker.replica_manager, broker.node_id
    image = MetadataImage()
    try:
        manager.apply_delta(_topic(image, node, "before", 2), image, 0)
        assert {_dir_of(broker, ("before", p)) for p in range(2)} == {a, b}  # one in each dir
        in_b = next(("before", p) for p in range(2) if _dir_of(broker, ("before", p)) == b)

        shutil.rmtree(b)
        with open(b, "w") as f:  # no longer a directory: every file call under it fails
            f.write("a failed mount\n")
        manager.apply_delta(_topic(image, node, "after", 4), image, 0)  # must not raise

        assert b in broker.log_manager.offline_dirs and a not in broker.log_manager.offline_dirs
        assert in_b not in broker.partitions  # its replica went offline with the dir
        assert all(_dir_of(broker, ("after", p)) == a for p in range(4))  # created where it works

        cls = request_class(35, 4)
        answer = trio.run(handle_describe_log_dirs, SimpleNamespace(broker=broker, api_version=4), cls(topics=None))
        codes = {r.log_dir: r.error_code for r in answer.results}
        assert codes == {a: ErrorCode.NONE, b: ErrorCode.KAFKA_STORAGE_ERROR}

        broker.replica_manager.log_dir_failed(a, "the last dir fails too")
        manager.apply_delta(_topic(image, node, "nowhere", 1), image, 0)  # must not raise
        assert ("nowhere", 0) not in broker.partitions and not broker.partitions
    finally:
        broker.shutdown()
