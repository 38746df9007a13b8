"""What one small request costs a kref broker: CPU per request and a cProfile split.

Two phases, each against its own `kref broker` process (so one profile holds
one kind of request):
  produce: confluent-kafka sends --requests single-record produces (acks=1,
           linger.ms=0, one flush per record, --value-bytes values), as
           bench/broker.py's single-record figure does;
  fetch-behind: the same fetch from offset 0, a consumer far behind: each
           answer holds up to 1 MiB of the --requests one-record batches
           (the case where the log's read used to walk every batch header);
  fetch:   a raw Fetch (kref.protocol.client.WireClient, v12 by topic name,
           max_wait_ms 0, 1 MiB per partition) --requests times at the last
           offset of a topic holding --requests one-record batches: a
           caught-up consumer's fetch, answered with one record. (Fetching
           from far behind the log end returns up to 1 MiB of batches, and
           then the log's walk over every batch header dominates: see
           docs/performance.md.)
For each phase: the broker's CPU (utime + stime from /proc/PID/stat) per
request over an unprofiled run, then the same run again under the broker's
own cProfile (KREF_CPROFILE, process CPU clock; profiling inflates every
Python call, so read its figures as shares), printed as the share of the
profiled CPU under each stage of the request path. The machine is shared:
CPU per request, not wall time, is the figure; the load is printed.

    .venv/bin/python bench/request_path.py [--requests 3000] [--phase produce|fetch|fetch-behind]
"""

from __future__ import annotations

import argparse
import datetime
import os
import pstats
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from broker import create_topic, start_kref_process  # noqa: E402

MAX_REQUESTS = 50_000
TICKS = os.sysconf("SC_CLK_TCK")

# Stages of the request path: (label, file suffix, function name). A stage's
# cost is the cumulative CPU of that function (calls nested in another stage
# are counted in both, e.g. the append inside the produce handler).
STAGES = [
    ("read + frame (trio receive_some, FrameDecoder)", "framing.py", "feed"),
    ("frame a lone request (FrameDecoder.whole_frame)", "framing.py", "whole_frame"),
    ("decode request (codec.decode_request, kio)", "codec.py", "decode_request"),
    ("decode request (the connection's RequestReader)", "codec.py", "decode"),
    ("answer (server.answer: handler, encode, write)", "server.py", "answer"),
    ("dispatch (router)", "router.py", "dispatch"),
    ("  produce handler", "produce.py", "produce"),
    ("  produce handler, inline (acks 0/1)", "produce.py", "produce_inline"),
    ("    framing check of the records", "framing_validation.py", "validate_records_framing"),
    ("    append (Log.append_as_leader)", "log.py", "append_as_leader"),
    ("  fetch handler", "fetch.py", "fetch"),
    ("    log read (Log.read)", "storage/log.py", "read"),
    ("encode response (codec.encode_response)", "codec.py", "encode_response"),
    ("encode response (codec.encode_response_parts)", "codec.py", "encode_response_parts"),
    ("send (trio send_all -> send syscall)", "_highlevel_socket.py", "send_all"),
    ("send (a lone response's one write())", "~", "<built-in method posix.write>"),
    ("receive wait (trio receive_some)", "_highlevel_socket.py", "receive_some"),
    ("receive (server.receive: wait_readable + read())", "server.py", "receive"),
]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def produce_phase(bootstrap: str, topic: str, requests: int, value: bytes) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": 1,
                         "max.in.flight.requests.per.connection": 1})
    for _ in range(requests):
        producer.produce(topic, value, partition=0)
        if producer.flush(10) != 0:
            raise RuntimeError("single-record produce not acknowledged within 10 s")


def fill(bootstrap: str, topic: str, requests: int, value: bytes) -> None:
    produce_phase(bootstrap, topic, requests, value)  # one batch per record


def fetch_phase(bootstrap: str, topic: str, requests: int, *, behind: bool = False) -> None:
    from kref.protocol.client import WireClient
    from kref.protocol.codec import request_class
    from kref.protocol.messages import build, nested

    cls = request_class(1, 12)
    topic_type, part_type = nested(cls, "FetchTopic"), nested(cls, "FetchPartition")
    host, port = bootstrap.split(":")
    with WireClient(host, int(port)) as client:
        for _ in range(requests):
            offset = 0 if behind else requests - 1
            part = build(part_type, partition=0, current_leader_epoch=-1, fetch_offset=offset,
                         last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20)
            request = build(cls, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 20,
                            isolation_level=0, session_id=0, session_epoch=-1,
                            topics=(build(topic_type, topic=topic, partitions=(part,)),),
                            forgotten_topics_data=(), rack_id="")
            response = client.request(request)
            records = response.responses[0].partitions[0].records
            if not records:
                raise RuntimeError(f"fetch at offset {offset} returned no records")


def stage_table(path: str) -> list[tuple[str, float]]:
    stats = pstats.Stats(path)
    total = stats.total_tt
    out = []
    for label, suffix, name in STAGES:
        cum = sum(v[3] for (file, _line, func), v in stats.stats.items() if func == name and file.endswith(suffix))
        if cum:
            out.append((label, cum / total))
    return out


def run_phase(phase: str, args) -> None:
    value = os.urandom(args.value_bytes)
    prefix = tempfile.mktemp(prefix=f"kref-request-path-{phase}-")
    with start_kref_process({"KREF_CPROFILE": prefix}) as (bootstrap, proc):
        topic = f"path-{phase}"
        create_topic(bootstrap, topic)
        if phase in ("fetch", "fetch-behind"):
            fill(bootstrap, topic, args.requests, value)
            behind = phase == "fetch-behind"
            work = lambda: fetch_phase(bootstrap, topic, args.requests, behind=behind)  # noqa: E731
        else:
            produce_phase(bootstrap, topic, 200, value)  # connect, learn metadata, warm up
            work = lambda: produce_phase(bootstrap, topic, args.requests, value)  # noqa: E731
        load = os.getloadavg()[0]
        cpu0, t0 = cpu_seconds(proc.pid), time.perf_counter()
        work()
        cpu, wall = cpu_seconds(proc.pid) - cpu0, time.perf_counter() - t0
        if not args.no_profile:
            proc.send_signal(signal.SIGUSR1)
            time.sleep(0.2)
            work()
            proc.send_signal(signal.SIGUSR2)
            dump = f"{prefix}.{proc.pid}"
            deadline = time.monotonic() + 30
            while not os.path.exists(dump) and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(0.5)  # the dump is written by the signal handler; let it finish
    load = max(load, os.getloadavg()[0])
    print(f"\n{phase}: {args.requests} requests, broker CPU {cpu / args.requests * 1e6:.0f} us/request "
          f"(wall {wall / args.requests * 1e6:.0f} us/request), load {load:.1f}")
    if args.no_profile:
        return
    calls = pstats.Stats(dump).total_calls
    # Deterministic where CPU time is not (a shared machine): Python calls
    # per request, the broker's background work included.
    print(f"  Python function calls per request (profiled run): {calls / args.requests:.0f}")
    print(f"  {'stage (cumulative, share of profiled broker CPU)':<56} share")
    for label, share in stage_table(dump):
        print(f"  {label:<56} {share * 100:5.1f}%")
    if args.top:
        pstats.Stats(dump).sort_stats("tottime").print_stats(args.top)
    if args.keep_profile:
        os.replace(dump, f"{args.keep_profile}.{phase}")
    else:
        os.unlink(dump)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--phase", choices=("produce", "fetch", "fetch-behind"), default=None)
    parser.add_argument("--top", type=int, default=0, help="also print the N functions with most own time")
    parser.add_argument("--no-profile", action="store_true", help="only the unprofiled CPU per request")
    parser.add_argument("--keep-profile", metavar="PREFIX", default=None,
                        help="keep each phase's cProfile dump as PREFIX.<phase> (for pstats)")
    args = parser.parse_args()
    args.requests = max(1, min(args.requests, MAX_REQUESTS))
    for phase in (args.phase,) if args.phase else ("produce", "fetch", "fetch-behind"):
        run_phase(phase, args)


if __name__ == "__main__":
    main()
