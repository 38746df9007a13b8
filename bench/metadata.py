"""Metadata for many partitions: the cached encoded answer against building and
encoding it per request, in one process and one run.

A broker (in this process) whose metadata image holds --topics topics of
--partitions partitions each (default 100 x 100 = 10,000; the records are
applied to the image directly, without creating 10,000 logs, which takes
minutes and plays no part in a Metadata answer). The
Metadata handler the server runs is called for "all topics" at --version
(default 12, what librdkafka sends) --requests times:
  uncached: the cache emptied before every request (what every request cost
            before the cache: build the kio response, encode it in Python);
  cached:   the same handler with its cache (the first request fills it).
Printed: ms per request for each, the ratio, the body size; then the same
after a partition is added (one miss, then hits again).
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
from kref.protocol.codec import PreEncoded, encode_body, request_class  # noqa: E402


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

    async def once(clear: bool) -> tuple[float, int]:
        if clear:
            cache.__init__(cache.max_entries, cache.max_bytes)
        start = time.perf_counter()
        answer = await handler(ctx, request)
        body = answer.body if isinstance(answer, PreEncoded) else encode_body(answer)
        return time.perf_counter() - start, len(body)

    def report(label: str, uncached: list[float], cached: list[float], size: int) -> None:
        u, c = sorted(uncached)[len(uncached) // 2], sorted(cached)[len(cached) // 2]
        print(f"{label}: uncached {u * 1e3:8.2f} ms/request, cached {c * 1e3:8.3f} ms/request, "
              f"ratio {u / c:,.0f}x, body {size:,} B (medians of {len(uncached)})")

    uncached, cached = [], []
    for i in range(args.requests):  # paired, alternating order
        for clear in ((True, False) if i % 2 == 0 else (False, True)):
            dt, size = await once(clear)
            (uncached if clear else cached).append(dt)
    report(f"Metadata v{args.version}, all topics", uncached, cached, size)
    topic_id = image.topic("topic-0000").topic_id
    image.apply([mr.PartitionRecord(args.partitions, topic_id, (node,), (node,), node)])
    broker._topic_views = None
    first, size = await once(False)
    again = [(await once(False))[0] for _ in range(args.requests)]
    print(f"after a PartitionRecord: first request {first * 1e3:.2f} ms (rebuilt), then "
          f"{sorted(again)[len(again) // 2] * 1e3:.3f} ms; cache hits {cache.hits}, misses {cache.misses}")
    print(f"load average: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
