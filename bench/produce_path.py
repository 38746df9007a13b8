"""One single-record Produce through the broker's code, in one process, stage by stage.

Theory of operation: bench/request_path.py measures a whole broker process
(sockets, trio, the client's pacing) and splits it with cProfile, which
inflates functions with many small calls. This harness removes the sockets
and the profiler: it opens a real Broker (a temporary log dir), registers
the real handlers, and runs one request frame through the stages the server
runs (the connection's RequestReader, the inline handler or router.dispatch,
encode_response) --requests times,
timing each stage with the thread CPU clock. The requests run in 10 blocks
and each stage's figure is its cheapest block: on a shared machine the
other load only ever adds (cache and frequency effects), so the minimum is
the steadiest estimate of the code's own cost. What it leaves out is the
server's own work (trio's wait, read(), the frame decoder, write()), which
bench/request_path.py still shows. The frame is the shape librdkafka sends
for one 100-byte record (Produce v9 here; --version chooses another).

    .venv/bin/python bench/produce_path.py [--requests 20000] [--version 9] [--records 1]
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

MAX_REQUESTS = 1_000_000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--version", type=int, default=9)
    parser.add_argument("--records", type=int, default=1, help="records per batch (one batch per request)")
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--acks", type=int, default=1, choices=(0, 1, -1))
    parser.add_argument("--generic", action="store_true",
                        help="decode_request and the router's async handler for every request (the path before "
                             "session 14's per-connection reader and inline handler)")
    args = parser.parse_args()
    args.requests = max(1, min(args.requests, MAX_REQUESTS))
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]
    import trio

    from kref.broker.broker import Broker
    from kref.broker.config import BrokerConfig
    from kref.broker.handlers import register_all
    from kref.broker.router import DECLINED, RequestContext, Router
    from kref.protocol.codec import RequestReader, decode_request, encode_request, encode_response, request_class
    from kref.protocol.messages import build, nested
    from kref.records.batch import Record, build_batch

    data = tempfile.mkdtemp(prefix="kref-produce-path-")
    config = BrokerConfig.load(None, [f"log.dirs={data}", "listeners=PLAINTEXT://127.0.0.1:0"])
    broker = Broker(config)
    router = Router()
    register_all(router, broker)
    broker.open()
    broker.create_topic("path", 1, 1)
    cls = request_class(0, args.version)
    topic_type, part_type = nested(cls, "TopicProduceData"), nested(cls, "PartitionProduceData")
    now = int(time.time() * 1000)
    batch = build_batch([Record(offset=-1, timestamp=now, key=None, value=os.urandom(args.value_bytes), headers=())
                         for _ in range(args.records)])
    key = {"topic_id": broker.get_topic("path").topic_id} if args.version >= 13 else {"name": "path"}
    body = build(cls, transactional_id=None, acks=args.acks, timeout=datetime.timedelta(milliseconds=30000),
                 topic_data=(build(topic_type, **key, partition_data=(build(part_type, index=0, records=batch),)),))
    frame = encode_request(body, 7, client_id="rdkafka")[4:]
    supported = router.supported_versions
    n = args.requests
    clock = time.thread_time

    blocks = 10
    per_block = max(1, n // blocks)

    async def run() -> dict[str, float]:
        best = {"decode": math.inf, "handler": math.inf, "encode": math.inf}
        for _ in range(blocks):
            block = await run_block()
            for stage, t in block.items():
                best[stage] = min(best[stage], t / per_block)
        return best

    reader = RequestReader(supported)
    inline_handlers = {} if args.generic else router.inline_handlers
    decode = (lambda f: decode_request(f, supported)) if args.generic else reader.decode

    async def run_block() -> dict[str, float]:
        totals = {"decode": 0.0, "handler": 0.0, "encode": 0.0}
        for _ in range(per_block):
            t0 = clock()
            request = decode(frame)
            t1 = clock()
            # What the server does (kref/broker/server.py answer): the inline
            # handler when there is one and it does not decline, else the router.
            inline = inline_handlers.get(request.api_key)
            response = DECLINED if inline is None else inline(broker, request.api_version, request.body)
            if response is DECLINED:
                ctx = RequestContext(broker, request.api_key, request.api_version, request.correlation_id,
                                     request.client_id, "127.0.0.1", 1, "PLAINTEXT")
                response = await router.dispatch(ctx, request)
            t2 = clock()
            if response is not None:
                encode_response(request, response)
            t3 = clock()
            totals["decode"] += t1 - t0
            totals["handler"] += t2 - t1
            totals["encode"] += t3 - t2
        return totals

    try:
        totals = trio.run(run)
    finally:
        broker.shutdown()
    total = sum(totals.values())
    print(f"Produce v{args.version}, {args.records} record(s) of {args.value_bytes} B, acks={args.acks}, "
          f"{'generic path' if args.generic else 'server path'}, "
          f"{blocks} x {per_block} requests, load {os.getloadavg()[0]:.1f}: {total * 1e6:.1f} us/request "
          f"of thread CPU (each stage: its cheapest block)")
    for stage, t in totals.items():
        print(f"  {stage:8} {t * 1e6:7.1f} us  {t / total * 100:5.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
