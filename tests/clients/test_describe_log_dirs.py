"""DescribeLogDirs over the wire (kafka-python's describe_log_dirs, and raw v1-v4).

A broker with two log dirs spreads a topic's partitions over both; the
answer lists both dirs (also when empty of the topic asked for), each
partition once in the dir that holds it, with the bytes it takes (a
partition that got records is larger than an empty one), offset lag 0 on
the leader, and (v4) the volume's total and usable bytes. A filtered
request reports only the partitions it names.
"""

from __future__ import annotations

import os

from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic


def _raw_describe(broker, version, topics):
    import importlib

    from kref.protocol.client import WireClient

    req = importlib.import_module(f"kio.schema.describe_log_dirs.v{version}.request")
    resp = importlib.import_module(f"kio.schema.describe_log_dirs.v{version}.response")
    body = req.DescribeLogDirsRequest(topics=None if topics is None else tuple(
        req.DescribableLogDirTopic(topic=t, partitions=tuple(ps)) for t, ps in topics.items()))
    with WireClient(broker.host, broker.port) as client:
        return client.request(body, resp.DescribeLogDirsResponse)


def test_describe_log_dirs_reports_where_partitions_live(kref_broker_factory, tmp_path):
    broker = kref_broker_factory(start=False)
    broker.log_dirs = [tmp_path / "dir-a", tmp_path / "dir-b"]
    broker.start()
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=20000)
    admin.create_topics([NewTopic("spread", num_partitions=4, replication_factor=1)])
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    for i in range(50):
        producer.send("spread", value=b"x" * 100, partition=0)
    producer.flush(timeout=20)
    producer.close()

    answer = _raw_describe(broker, 4, None)
    assert answer.error_code == 0
    dirs = {r.log_dir: r for r in answer.results}
    assert set(dirs) == {str(d) for d in broker.log_dirs}
    placement = {}
    for result in answer.results:
        assert result.error_code == 0 and result.total_bytes > 0 and 0 <= result.usable_bytes <= result.total_bytes
        for topic in result.topics:
            if topic.name != "spread":
                continue
            for p in topic.partitions:
                assert p.partition_index not in placement
                placement[p.partition_index] = (result.log_dir, p.partition_size)
                assert p.offset_lag == 0 and p.is_future_key is False
    assert sorted(placement) == [0, 1, 2, 3]
    assert {d for d, _ in placement.values()} == set(dirs)  # spread over both dirs
    for p, (log_dir, size) in placement.items():
        assert os.path.isdir(os.path.join(log_dir, f"spread-{p}"))
    assert placement[0][1] > 5000 > placement[1][1]  # 50 records of 100 bytes

    only = _raw_describe(broker, 1, {"spread": [2], "missing": [0]})
    listed = [(r.log_dir, t.name, p.partition_index) for r in only.results for t in r.topics for p in t.partitions]
    assert listed == [(placement[2][0], "spread", 2)]
    assert len(only.results) == 2  # every log dir is listed, even with nothing asked for in it

    # kafka-python's admin call (it picks its own version) sees the same placement
    described = admin.describe_log_dirs()
    admin.close()
    text = repr(described)
    assert all(str(d) in text for d in broker.log_dirs) and "spread" in text
