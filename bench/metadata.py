"""Metadata for many partitions: kio's encoding against kref's per-topic chunks
and whole-answer cache, in one process and one run, in CPU time.

A broker (in this process) whose metadata image holds --topics topics of
--partitions partitions each (default 100 x 100 = 10,000; the records are
applied to the image directly, without creating 10,000 logs, which takes
minutes and plays no part in a Metadata answer). "All topics" at --version
(default 12, what librdkafka sends), --requests times each, alternating:
  kio:       the answer built as kio dataclasses and encoded by kio (what
             every request cost before session 3's cache, and every miss
             until session 8);
  cold:      the handler with both caches emptied (struct-encoded partitions);
  1 changed: one partition's leader epoch bumped before the request (a new
             image generation: the whole answer is rebuilt from topic
             chunks, one topic re-encoded);
  cached:    nothing changed (the whole encoded answer is reused).
The bodies of kio and the handler are compared byte for byte. Printed: CPU
ms per request (medians) and the ratio of each to kio.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
import uuid

import trio

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kref.broker.broker import Broker  # noqa: E402
from kref.broker.config import BrokerConfig  # noqa: E402
from kref.broker.handlers import register_all  # noqa: E402
from kref.broker.router import RequestContext, Router  # noqa: E402
from kref.metadata import records as mr  # noqa: E402
from kref.broker.handlers.metadata import AUTHORIZED_OPERATIONS_OMITTED, brokers_of, layout  # noqa: E402
from kref.protocol.codec import PreEncoded, encode_body, request_class  # noqa: E402
from kref.protocol.errors import ErrorCode  # noqa: E402
from kref.protocol.messages import build  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--version", type=int, default=12)
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    root = tempfile.mkdtemp(prefix="kref-bench-metadata-")
    try:
        trio.run(run, root, args)
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def run(root: str, args: argparse.Namespace) -> None:
    broker = Broker(BrokerConfig.load(None, [f"log.dirs={root}/data"]))
    broker.open()
    image = broker.metadata.image
    node = broker.node_id
    for i in range(args.topics):
        topic_id = uuid.uuid4()
        image.apply([mr.TopicRecord(f"topic-{i:04d}", topic_id)]
                    + [mr.PartitionRecord(p, topic_id, (node,), (node,), node) for p in range(args.partitions)])
    broker._topic_views = None
    print(f"{args.topics} topics x {args.partitions} partitions = {args.topics * args.partitions:,} in the image")
    router = Router()
    register_all(router, broker)
    handler = router.handler_for(3)
    cls = request_class(3, args.version)
    request = cls(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    ctx = RequestContext(broker, 3, args.version, 1, "bench", "127.0.0.1")
    cache = broker.metadata_cache
    lay = layout(args.version)

    def kio_answer() -> bytes:
        def part(name, p):
            epoch = image.partition(name, p).leader_epoch
            return build(lay.partition_type, error_code=ErrorCode.NONE, partition_index=p, leader_id=node,
                         leader_epoch=epoch, replica_nodes=(node,), isr_nodes=(node,), offline_replicas=())
        topics = tuple(
            build(lay.topic_type, error_code=ErrorCode.NONE, name=t.name, topic_id=t.topic_id,
                  is_internal=t.is_internal, topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
                  partitions=tuple(part(t.name, p) for p in range(t.num_partitions)))
            for t in broker.topics.values())
        node_id, host, port = brokers_of(broker, "bench")
        return encode_body(build(
            lay.response_type, brokers=(build(lay.broker_type, node_id=node_id, host=host, port=port, rack=None),),
            cluster_id=broker.cluster_id, controller_id=node, topics=topics,
            cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED, error_code=ErrorCode.NONE))

    async def handler_answer() -> bytes:
        answer = await handler(ctx, request)
        return answer.body if isinstance(answer, PreEncoded) else encode_body(answer)

    first_topic = image.topic("topic-0000")
    bumps = 0

    async def measure(kind: str) -> tuple[float, bytes]:
        nonlocal bumps
        if kind == "cold":
            cache.clear()
        elif kind == "1 changed":
            bumps += 1
            image.apply([mr.PartitionChangeRecord(bumps % args.partitions, first_topic.topic_id, leader=node)])
        start = time.process_time()
        body = kio_answer() if kind == "kio" else await handler_answer()
        return time.process_time() - start, body

    kinds = ("kio", "cold", "1 changed", "cached")
    times: dict[str, list[float]] = {k: [] for k in kinds}
    await handler_answer()  # fill the caches once
    for i in range(args.requests):
        order = kinds if i % 2 == 0 else tuple(reversed(kinds))
        bodies = {}
        for kind in order:
            dt, bodies[kind] = await measure(kind)
            times[kind].append(dt)
        # Nothing changed between "cached" and its neighbours in this order only
        # when it follows "1 changed": compare the handler with kio right now.
        if (await handler_answer()) != kio_answer():
            raise SystemExit("handler answer differs from kio's encoding")
    median = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    print(f"Metadata v{args.version}, all topics, body {len(bodies['kio']):,} B, "
          f"CPU ms per request (median of {args.requests}), load {os.getloadavg()[0]:.1f}:")
    for kind in kinds:
        print(f"  {kind:<10} {median[kind] * 1e3:10.3f} ms   kio / this = {median['kio'] / median[kind]:,.1f}x")
    print(f"answers cache: hits {cache.hits}, misses {cache.misses}; "
          f"topic chunks: hits {cache.topics.hits}, misses {cache.topics.misses}")


if __name__ == "__main__":
    main()
