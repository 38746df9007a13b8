"""Scale of the controller core: 10,000 partitions (issue 9's scale figure).

Drives kref/controller/controller.py's ControllerCore directly (no sockets,
no quorum): three registered, unfenced brokers, then CreateTopics for
10,000 partitions with replication factor 3, as 1 topic x 10,000 and as
1,000 topics x 10. Prints the time of the decision (assignment + records +
applying them to the image), the size of the records in Kafka's framing
(kref/metadata/serde.py, what the metadata log and a snapshot would hold),
the time to replay them into a fresh core (what a standby or a restarted
controller does) and the Python heap the image holds (tracemalloc).
These are the controller core's own costs; the quorum's fsync per batch and
the network are not in them. Usage: python bench/controller_scale.py [N]
"""

from __future__ import annotations

import sys
import time
import tracemalloc
import uuid

from kref.controller import controller as c
from kref.metadata import serde


def _cluster() -> c.ControllerCore:
    core = c.ControllerCore(1, tracing=False)
    core.step(c.BecomeActive(1, 1), 0)
    for b in (1, 2, 3):
        core.step(c.BrokerRegistration(b, b, uuid.UUID(int=b)), 0)
    for b in (1, 2, 3):
        core.step(c.BrokerHeartbeatRequest(10 + b, b, core.brokers[b].broker_epoch, 10**6), 0)
    return core


def _create(total: int, per_topic: int) -> tuple[c.ControllerCore, list]:
    core = _cluster()
    records = []
    for i in range(total // per_topic):
        effects = core.step(c.CreateTopic(100 + i, f"t{i}", per_topic, 3, uuid.UUID(int=1000 + i)), 0)
        for e in effects:
            assert isinstance(e, c.WriteRecords), e
            records.extend(e.records)
    return core, records


def run(total: int, per_topic: int) -> None:
    started = time.perf_counter()
    _create(total, per_topic)
    decide_s = time.perf_counter() - started
    # The heap on a second pass: tracemalloc slows allocation several times.
    tracemalloc.start()
    core, records = _create(total, per_topic)
    heap = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    started = time.perf_counter()
    encoded = [serde.encode(r) for r in records]
    encode_s = time.perf_counter() - started
    started = time.perf_counter()
    fresh = c.ControllerCore(2, tracing=False)
    fresh.step(c.Replay(0, tuple(serde.decode(v) for v in encoded)), 0)
    replay_s = time.perf_counter() - started
    partitions = sum(len(t.partitions) for t in fresh.topics.values())
    assert partitions == total, partitions
    size = sum(len(v) for v in encoded)
    print(f"{total // per_topic:>5} topics x {per_topic:>5}: create {decide_s * 1000:7.0f} ms, "
          f"{len(records)} records {size / 1024:7.0f} KiB framed (encode {encode_s * 1000:5.0f} ms), "
          f"decode+replay {replay_s * 1000:6.0f} ms, image + records on the heap {heap / 2**20:5.1f} MiB")


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    run(n, n)
    run(n, 10)
