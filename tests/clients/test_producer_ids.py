"""InitProducerId over the wire: producer id blocks from the metadata log (KIP-730).

The single broker is its own controller (blocks are ProducerIdsRecords in its
kref-metadata.log; the earlier kref-producer-ids.json is migrated); on
`kref cluster` every broker asks the active controller, so idempotent
producers connected to different brokers never share an id (they would
collide in the producer state of a partition both write to).
"""

from __future__ import annotations

import datetime
import json

import pytest

from kref.coordinator.producer_id import LEGACY_STATE_FILE, PRODUCER_ID_BLOCK_SIZE


def init_producer_id(bootstrap: str) -> tuple[int, int]:
    from kio.schema.init_producer_id.v4 import request as req
    from kio.schema.init_producer_id.v4 import response as resp

    from kref.protocol.client import WireClient

    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    with WireClient(host, int(port)) as client:
        answer = client.request(req.InitProducerIdRequest(
            transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1,
            producer_epoch=-1), resp.InitProducerIdResponse)
    return int(answer.error_code), answer.producer_id


def test_single_broker_migrates_the_legacy_file_and_never_repeats(kref_broker_factory):
    broker = kref_broker_factory(start=False)
    log_dir = broker.log_dirs[0]
    log_dir.mkdir(parents=True, exist_ok=True)
    (log_dir / LEGACY_STATE_FILE).write_text(json.dumps({"version": 1, "next_block_start": 7000}))
    broker.start()
    code, first = init_producer_id(broker.bootstrap)
    assert code == 0 and first == 7000, first
    assert not (log_dir / LEGACY_STATE_FILE).exists()
    code, second = init_producer_id(broker.bootstrap)
    assert (code, second) == (0, 7001)
    broker.kill()  # a crash: the block was durable before its first id was used
    broker.start()
    code, after = init_producer_id(broker.bootstrap)
    assert code == 0 and after == 7000 + PRODUCER_ID_BLOCK_SIZE, after


@pytest.mark.timeout(900)  # the cluster run plus TLC on its traces (trace_validation.TIMEOUT_S per spec)
def test_cluster_brokers_hand_out_disjoint_producer_ids(tmp_path):
    from kref.node.local_cluster import bootstrap_servers
    from tests.controller.test_cluster_clients import SETTINGS
    from tests.clusterkit import wait_unfenced, wait_until
    from tests.controller.trace_validation import checked_cluster

    with checked_cluster(tmp_path, 3, 3, SETTINGS) as (specs, processes, start):
        servers = bootstrap_servers(specs).split(",")
        wait_unfenced(specs, processes)
        ids = {}
        for server in servers:
            # COORDINATOR_LOAD_IN_PROGRESS (14) while no block can be had yet: retriable
            code, pid = wait_until(lambda: _granted(init_producer_id(server)), f"a producer id from {server}")
            ids[server] = pid
        blocks = {pid // PRODUCER_ID_BLOCK_SIZE for pid in ids.values()}
        assert len(blocks) == 3, ids
        # a second producer on the same broker gets the next id of that broker's block
        assert init_producer_id(servers[0]) == (0, ids[servers[0]] + 1)


def _granted(answer):
    code, pid = answer
    assert code in (0, 14), answer
    return answer if code == 0 else None
