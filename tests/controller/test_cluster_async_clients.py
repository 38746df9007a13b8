"""aiokafka and kafkajs, clients with their own protocol code, against three combined nodes.

One `kref cluster` layout (three combined nodes, short timeouts) serves both
tests. Each client, unmodified, over real sockets: Metadata /
DescribeCluster show the three brokers, CreateTopics with replication
factor 3 is forwarded to the active controller, every partition has three
replicas and a full isr, acks=all produce reaches the leaders, and a
consumer group (two members for kafkajs) reads every record and commits.
kafkajs runs under node (tests/clients/js/kafkajs_cluster.js, installed by
scripts/setup.sh); that test skips only when node or that install is missing.
Once both ran, the cluster's traces are checked against spec/KRaft.tla and
spec/Replication.tla (tests/controller/trace_validation.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.clusterkit import FAST_CLUSTER_SETTINGS, wait_listed
from tests.controller.trace_validation import checked_cluster

SETTINGS = FAST_CLUSTER_SETTINGS
JS = Path(__file__).parents[1] / "clients" / "js" / "kafkajs_cluster.js"
NODE_MODULES = Path(sys.prefix) / "node" / "node_modules"
MESSAGES = 60


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory):
    from kref.node.local_cluster import bootstrap_servers

    with checked_cluster(tmp_path_factory.mktemp("cluster"), 3, 3, SETTINGS) as (
            specs, processes, start):
        wait_listed(specs, processes)
        yield bootstrap_servers(specs)


@pytest.mark.timeout(900)  # the cluster run plus TLC on its traces (trace_validation.TIMEOUT_S per spec)
def test_aiokafka_on_three_nodes(bootstrap):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    topic = "aio-replicated"

    async def scenario():
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=20000)
        await admin.start()
        try:
            cluster = await admin.describe_cluster()
            assert sorted(b["node_id"] for b in cluster["brokers"]) == [1, 2, 3], cluster
            assert cluster["controller_id"] in (1, 2, 3)
            await admin.create_topics([NewTopic(topic, 3, 3)])
            for _ in range(100):  # each broker replays the topic on its own: bounded wait
                described = (await admin.describe_topics([topic]))[0]
                if len(described["partitions"]) == 3 and all(p["leader"] >= 0 for p in described["partitions"]):
                    break
                await asyncio.sleep(0.2)
            for p in described["partitions"]:
                assert sorted(p["replicas"]) == [1, 2, 3] and sorted(p["isr"]) == [1, 2, 3], p
        finally:
            await admin.close()

        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
        await producer.start()
        try:
            for i in range(MESSAGES):
                await producer.send(topic, key=b"%d" % (i % 3), value=b"aio-%d" % i)
            await producer.flush()
        finally:
            await producer.stop()

        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id="aio-cluster-group",
                                    auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        try:
            got = set()
            while len(got) < MESSAGES:
                got.add((await asyncio.wait_for(consumer.getone(), 30)).value)
            await consumer.commit()
            committed = [await consumer.committed(tp) for tp in sorted(consumer.assignment())]
        finally:
            await consumer.stop()
        assert got == {b"aio-%d" % i for i in range(MESSAGES)}
        assert sum(committed) == MESSAGES

    asyncio.run(asyncio.wait_for(scenario(), 120))


@pytest.mark.skipif(shutil.which("node") is None or not (NODE_MODULES / "kafkajs").is_dir(),
                    reason="node or kafkajs is not installed (scripts/setup.sh installs kafkajs when npm exists)")
@pytest.mark.timeout(900)  # the cluster run plus TLC on its traces (trace_validation.TIMEOUT_S per spec)
def test_kafkajs_on_three_nodes(bootstrap):
    out = subprocess.run(["node", str(JS), bootstrap], capture_output=True, text=True, timeout=150,
                         env={**os.environ, "NODE_PATH": str(NODE_MODULES)})
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["brokers"] == [1, 2, 3] and seen["controller"] in (1, 2, 3)
    assert len(seen["partitions"]) == 3
    for p in seen["partitions"]:
        assert p["replicas"] == [1, 2, 3] and p["isr"] == [1, 2, 3] and p["leader"] in (1, 2, 3), p
    assert sum(seen["high"]) == 90 and seen["consumed"] == 90
    assert seen["committed"] == seen["high"]
